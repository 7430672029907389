//! One check of a request's conversation, whatever API the model's upstreams speak: each
//! item of its list (`messages`, `input`) is an object, and each message's `role` is one its
//! API knows, spelled as that API spells it (lowercase). A request that breaks it is refused
//! before any upstream is asked, with a stable code and the item's path in the client's
//! notation, so that the same request gets the same answer over a Chat Completions, an
//! Anthropic or a Responses upstream (before, a Chat upstream was sent role `"User"` as it
//! came, and the others' translations refused it without a code).
//!
//! | Fault | Code | Path |
//! |---|---|---|
//! | an item that is not an object | `invalid_message` | the item: `messages[2]`, `messages.2`, `input[2]` |
//! | a message without a role, or a role not a string or not one of its API's | `invalid_role` | its role: `messages[2].role` |

use serde_json::Value;

use super::kind_of;
use crate::error::IngressError;

/// The roles of a Chat Completions message (`function`: the legacy function result).
pub(crate) const CHAT_ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// The roles of an Anthropic Messages message (`system`: a system turn inside the
/// conversation, which Claude Code sends).
pub(crate) const MESSAGES_ROLES: &[&str] = &["user", "assistant", "system"];

/// The roles of a Responses `message` item.
pub(crate) const RESPONSES_ROLES: &[&str] = &["user", "assistant", "system", "developer"];

/// The code of an item that is not an object.
pub(crate) const INVALID_MESSAGE: &str = "invalid_message";

/// The code of a message whose role is missing or not one its API knows.
pub(crate) const INVALID_ROLE: &str = "invalid_role";

/// Item `at` of a list, given as its JSON text, must be an object.
pub(crate) fn object(at: &str, text: &str) -> Result<(), IngressError> {
    if text.starts_with('{') {
        return Ok(());
    }
    let mut e = IngressError::invalid(
        at,
        format!(
            "a message must be an object, not {}",
            kind_of(text.as_bytes())
        ),
    );
    e.code = Some(INVALID_MESSAGE);
    Err(e)
}

/// The role of the message at `at` (`Value::Null` when it has none), checked against
/// `allowed`: the role, or the error naming `{at}.role`, what it is and what it may be
/// (and, for a known role in another case, that roles are lowercase).
pub(crate) fn role<'v>(
    at: &str,
    role: &'v Value,
    allowed: &[&str],
) -> Result<&'v str, IngressError> {
    if let Value::String(r) = role
        && allowed.contains(&r.as_str())
    {
        return Ok(r);
    }
    let list = allowed.join(", ");
    let what = match role {
        Value::String(r) if allowed.iter().any(|a| a.eq_ignore_ascii_case(r)) => {
            format!("{role} is not a role: roles are lowercase ({list})")
        }
        Value::String(_) => format!("{role} is not a role: it is one of {list}"),
        Value::Null => format!("a message needs its role, one of {list}"),
        other => format!("a role is a string (one of {list}), not {}", kind_of(other)),
    };
    let mut e = IngressError::invalid(format!("{at}.role"), what);
    e.code = Some(INVALID_ROLE);
    Err(e)
}

/// A Chat Completions request's `messages` (its text, a JSON array), checked one item at a
/// time from their text, no tree built: each an object whose `role` is one of
/// [`CHAT_ROLES`]. The first fault, named as `messages[i]` or `messages[i].role`.
pub(crate) fn chat_messages(messages: &[u8]) -> Result<(), IngressError> {
    use choicewise_partial_json::{for_each_raw_entry, for_each_raw_field};
    let unreadable =
        |e: serde_json::Error| IngressError::invalid("messages", format!("could not be read: {e}"));
    for_each_raw_entry(messages, |i, raw| {
        // The path is written only for a fault.
        let at = || format!("messages[{i}]");
        if !raw.get().starts_with('{') {
            return object(&at(), raw.get());
        }
        let mut found = None;
        for_each_raw_field(raw.get().as_bytes(), |k, v| {
            if k == "role" {
                found = Some(v);
            }
            Ok::<(), serde_json::Error>(())
        })
        .map_err(unreadable)?
        .map_err(unreadable)?;
        // A role of one of the names, as most are: read without a tree.
        if let Some(text) = found.map(|v| v.get())
            && text.starts_with('"')
        {
            let name: std::borrow::Cow<'_, str> = serde_json::from_str(text).map_err(unreadable)?;
            if CHAT_ROLES.contains(&&*name) {
                return Ok(());
            }
        }
        // A role is small: anything else is named by its kind alone.
        let found = match found.map(|v| v.get()) {
            None => Value::Null,
            Some(text) => serde_json::from_str::<Value>(text)
                .map(|v| match v {
                    Value::Array(_) => Value::Array(Vec::new()),
                    Value::Object(_) => Value::Object(Default::default()),
                    small => small,
                })
                .map_err(unreadable)?,
        };
        role(&at(), &found, CHAT_ROLES).map(|_| ())
    })
    .map_err(unreadable)?
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_fault_has_its_code_and_path() {
        let check = |messages: Value| chat_messages(messages.to_string().as_bytes());
        assert!(check(json!([{"role": "user", "content": "hi"}, {"role": "tool"}])).is_ok());
        let cases = [
            (
                json!([{"role": "user"}, "hi"]),
                "messages[1]",
                INVALID_MESSAGE,
                "not a string",
            ),
            (json!([[1]]), "messages[0]", INVALID_MESSAGE, "not an array"),
            (
                json!([{"role": "User"}]),
                "messages[0].role",
                INVALID_ROLE,
                "lowercase",
            ),
            (
                json!([{"role": "bot"}]),
                "messages[0].role",
                INVALID_ROLE,
                "one of system",
            ),
            (
                json!([{"content": "x"}]),
                "messages[0].role",
                INVALID_ROLE,
                "needs its role",
            ),
            (
                json!([{"role": 3}]),
                "messages[0].role",
                INVALID_ROLE,
                "not a number",
            ),
            (
                json!([{"role": {"a": [1]}}]),
                "messages[0].role",
                INVALID_ROLE,
                "not an object",
            ),
        ];
        for (messages, path, code, says) in cases {
            let e = check(messages.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(path), "{messages}");
            assert_eq!(e.code, Some(code), "{messages}");
            assert!(e.message.contains(says), "{messages}: {}", e.message);
            assert!(e.message.starts_with(path), "{}", e.message);
        }
    }
}
