//! A `countTokens` body read into the Chat Completions fields whose prompt the gateway counts:
//! its `contents`, or its `generateContentRequest` (a whole `generateContent` body, its
//! `systemInstruction` and `tools` counted too), read as `generateContent` reads them, so a
//! count and the request it stands for are the same prompt; but a function response may
//! stand alone, as Gemini CLI counts a tool's result (an image it read) without its call.

use super::request::Purpose;
use crate::api::IngressError;
use crate::request::{Fields, NotAnObject, kind_of, split_object};

/// Reads a `countTokens` body (`model`: from its path; `max_n`: the most candidates a request
/// may ask for) into the Chat Completions fields of the prompt it counts. Both `contents` and
/// `generateContentRequest`, or neither, is a 400 naming them.
pub(super) fn to_chat(body: &Fields, model: &str, max_n: u32) -> Result<Fields, IngressError> {
    let inner = match (body.get("contents"), body.get("generateContentRequest")) {
        (Some(_), Some(_)) => {
            return Err(IngressError::invalid(
                "generateContentRequest",
                "a count takes contents or generateContentRequest, not both",
            ));
        }
        (None, Some(request)) => match split_object(request) {
            Ok(inner) => inner,
            Err(NotAnObject::Type | NotAnObject::Json(_)) => {
                return Err(IngressError::invalid(
                    "generateContentRequest",
                    format!("must be an object, not {}", kind_of(&request[..])),
                ));
            }
        },
        (_, None) => body.clone(),
    };
    let read = super::request::read(&inner, model, false, max_n, Purpose::Count)?;
    Ok(read.chat)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::fields_of;

    fn chat(body: serde_json::Value) -> Result<serde_json::Value, IngressError> {
        let fields = to_chat(&fields_of(&body).unwrap(), "m", 8)?;
        let map = (fields.iter())
            .map(|(k, v)| (k.clone(), serde_json::from_slice(v).unwrap()))
            .collect();
        Ok(serde_json::Value::Object(map))
    }

    #[test]
    fn contents_or_a_whole_request_are_the_prompt_counted() {
        let contents = json!([{"role": "user", "parts": [{"text": "hello"}]}]);
        let bare = chat(json!({"contents": contents})).unwrap();
        assert_eq!(
            bare["messages"],
            json!([{"role": "user", "content": "hello"}])
        );
        let whole = chat(json!({"generateContentRequest": {
            "model": "models/m",
            "contents": contents,
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT"}}]}],
        }}))
        .unwrap();
        assert_eq!(whole["messages"][0]["role"], "system");
        assert_eq!(whole["messages"][1], bare["messages"][0]);
        assert_eq!(whole["tools"][0]["function"]["name"], "f");
        assert_eq!(whole["model"], "m");
    }

    #[test]
    fn a_function_response_alone_is_counted_as_its_tool_message() {
        // As Gemini CLI counts a tool's result that holds an image: no call before it.
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
        let counted = chat(json!({"contents": [{"role": "user", "parts": [
            {"functionResponse": {"id": "read_1", "name": "read_file",
                                  "response": {"output": "Binary content provided."}}},
            {"inlineData": {"mimeType": "image/png", "data": png}},
        ]}]}))
        .unwrap();
        let messages = counted["messages"].as_array().unwrap();
        assert_eq!(messages[0]["role"], "tool");
        assert_eq!(messages[0]["tool_call_id"], "read_1");
        assert!(
            messages[0]["content"]
                .as_str()
                .unwrap()
                .contains("Binary content")
        );
        assert_eq!(messages[1]["content"][0]["type"], "image_url");
        // Without an id, its name stands for the call.
        let named = chat(json!({"contents": [{"parts": [
            {"functionResponse": {"name": "read_file", "response": {}}},
        ]}]}))
        .unwrap();
        assert_eq!(named["messages"][0]["tool_call_id"], "read_file");
        // An answer's request still needs the call.
        let answer = super::super::request::to_chat(
            &fields_of(&json!({"contents": [{"parts": [
                {"functionResponse": {"name": "read_file", "response": {}}},
            ]}]}))
            .unwrap(),
            "m",
            false,
            8,
        );
        assert!(answer.is_err());
    }

    #[test]
    fn both_neither_or_a_request_not_an_object_is_refused_by_name() {
        let contents = json!([{"role": "user", "parts": [{"text": "hello"}]}]);
        let both = chat(json!({"contents": contents,
                               "generateContentRequest": {"contents": contents}}));
        assert_eq!(
            both.unwrap_err().param.as_deref(),
            Some("generateContentRequest")
        );
        let neither = chat(json!({}));
        assert_eq!(neither.unwrap_err().param.as_deref(), Some("contents"));
        let not_object = chat(json!({"generateContentRequest": [1]}));
        let e = not_object.unwrap_err();
        assert_eq!(e.param.as_deref(), Some("generateContentRequest"));
        assert!(e.to_string().contains("array"), "{e}");
        let inner_bad = chat(json!({"generateContentRequest": {"contents": []}}));
        assert_eq!(inner_bad.unwrap_err().param.as_deref(), Some("contents"));
    }
}
