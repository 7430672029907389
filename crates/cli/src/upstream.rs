//! What `choicewise chat` sends where: the API of each upstream (`--api`, the items of
//! `--fan-out`), its key and base URL from the flags or the usual environment variables, and
//! the request in that API's shape.

use choicewise::Dialect;
use serde_json::Value;

/// `--api`: `chat`, `responses`, `anthropic` or `gemini`, listed in `--help`.
pub fn api_parser() -> impl clap::builder::TypedValueParser<Value = Dialect> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Dialect::ALL.map(Dialect::name))
        .try_map(|s| s.parse::<Dialect>())
}

/// One item of `--fan-out`: `K` copies of the command's own request, or `[K*]API:MODEL[@URL]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub copies: usize,
    /// `None`: the command's `--api`, `--model`, `--base-url` and key.
    pub api: Option<Dialect>,
    pub model: Option<String>,
    pub base_url: Option<String>,
}

/// The items of `--fan-out`, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanOutSpec(pub Vec<Item>);

/// The most requests one run sends.
const MAX_REQUESTS: usize = 1024;

/// `--fan-out SPEC`: comma-separated items.
pub fn parse_fan_out(s: &str) -> Result<FanOutSpec, String> {
    let mut items = Vec::new();
    for part in s.split(',').map(str::trim) {
        let count = |k: &str| match k.parse::<usize>() {
            Ok(k) if (1..=MAX_REQUESTS).contains(&k) => Ok(k),
            _ => Err(format!(
                "{k:?} is not a number of requests from 1 to {MAX_REQUESTS}"
            )),
        };
        if part.bytes().all(|b| b.is_ascii_digit()) {
            items.push(Item {
                copies: count(part)?,
                api: None,
                model: None,
                base_url: None,
            });
            continue;
        }
        let (copies, rest) = match part.split_once(['*', '×']) {
            Some((k, rest)) if k.bytes().all(|b| b.is_ascii_digit()) => (count(k)?, rest),
            _ => (1, part),
        };
        let Some((api, rest)) = rest.split_once(':') else {
            return Err(format!(
                "{part:?}: expected K, or [K*]API:MODEL[@URL] with API chat, responses, anthropic, gemini or bedrock"
            ));
        };
        let api: Dialect = api.parse()?;
        let (model, base_url) = match rest.split_once('@') {
            Some((model, url)) => (model, Some(url.to_string())),
            None => (rest, None),
        };
        items.push(Item {
            copies,
            api: Some(api),
            model: (!model.is_empty()).then(|| model.to_string()),
            base_url: base_url.filter(|u| !u.is_empty()),
        });
    }
    let total: usize = items.iter().map(|i| i.copies).sum();
    if total > MAX_REQUESTS {
        return Err(format!("{total} requests: at most {MAX_REQUESTS}"));
    }
    Ok(FanOutSpec(items))
}

/// The request (built in Chat Completions' shape from the flags) in `api`'s shape (see
/// [`Dialect::request_from_chat`]).
pub fn shape(api: Dialect, request: &Value) -> Result<Value, String> {
    // The field refused names the flag that set it.
    api.request_from_chat(request).map_err(|e| match e.param() {
        Some("n") => format!("{e}: ask for several choices with --fan-out K*{api}:MODEL"),
        Some(field @ ("seed" | "stop")) => {
            format!("{e}: leave out --{field} (or that field of --request) for it")
        }
        _ => e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fan_out_items() {
        assert_eq!(
            parse_fan_out("3").unwrap().0,
            [Item {
                copies: 3,
                api: None,
                model: None,
                base_url: None
            }]
        );
        let items =
            parse_fan_out("2*chat:gpt-4o-mini,responses:gpt-5-mini, anthropic:claude-sonnet-4-5@http://127.0.0.1:9/v1,3×chat:qwen3:8b@http://h:1")
                .unwrap();
        let short: Vec<_> = items
            .0
            .iter()
            .map(|i| {
                (
                    i.copies,
                    i.api.unwrap(),
                    i.model.as_deref().unwrap(),
                    i.base_url.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            short,
            [
                (2, Dialect::Chat, "gpt-4o-mini", None),
                (1, Dialect::Responses, "gpt-5-mini", None),
                (
                    1,
                    Dialect::Anthropic,
                    "claude-sonnet-4-5",
                    Some("http://127.0.0.1:9/v1")
                ),
                (3, Dialect::Chat, "qwen3:8b", Some("http://h:1")),
            ]
        );
        for bad in ["0", "grpc:x", "chat", "2*", "1025", "600,600"] {
            assert!(parse_fan_out(bad).is_err(), "{bad}");
        }
        let gemini = parse_fan_out("gemini:gemini-2.5-pro").unwrap();
        assert_eq!(gemini.0[0].api, Some(Dialect::Gemini));
    }

    #[test]
    fn request_shapes() {
        let chat = json!({
            "model": "m", "temperature": 0.2, "max_tokens": 50,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        });
        assert_eq!(shape(Dialect::Chat, &chat).unwrap(), chat);
        assert_eq!(
            shape(Dialect::Responses, &chat).unwrap(),
            json!({"model": "m", "temperature": 0.2, "max_output_tokens": 50,
                   "instructions": "Be brief.", "input": [{"role": "user", "content": "hi"}]})
        );
        assert_eq!(
            shape(Dialect::Anthropic, &chat).unwrap(),
            json!({"model": "m", "temperature": 0.2, "max_tokens": 50,
                   "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]})
        );
        let plain = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(
            shape(Dialect::Anthropic, &plain).unwrap()["max_tokens"],
            choicewise::defaults::DEFAULT_ANTHROPIC_MAX_TOKENS
        );
        let e = shape(Dialect::Anthropic, &json!({"n": 3, "messages": []})).unwrap_err();
        assert!(e.contains("--fan-out"), "{e}");
        let sampled = json!({"model": "m", "stop": ["\n\n", "END"], "top_p": 0.9,
                             "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(
            shape(Dialect::Anthropic, &sampled).unwrap()["stop_sequences"],
            json!(["\n\n", "END"])
        );
        let e = shape(Dialect::Responses, &sampled).unwrap_err();
        assert!(e.contains("the responses API has no stop"), "{e}");
        let seeded = json!({"model": "m", "seed": 7, "messages": []});
        assert!(shape(Dialect::Chat, &seeded).is_ok());
        let e = shape(Dialect::Anthropic, &seeded).unwrap_err();
        assert!(e.contains("no seed"), "{e}");
    }
}
