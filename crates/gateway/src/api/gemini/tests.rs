//! The Gemini request's translation and the answer's framing, without a server.

use std::sync::Arc;

use axum::http::StatusCode;
use choicewise_core::ChoiceEvent;
use choicewise_core::chunks::Envelope;
use serde_json::{Value, json};

use super::answer::finish_reason_of;
use super::generation::json_schema_of;
use super::request::to_chat;
use super::*;
use crate::answer::ending::{AnswerEnd, Failure};
use crate::answer::write::{Framing, Out, Tail};
use crate::api::fields_of;

/// The Chat Completions body a Gemini body is read into (streamed, up to 8 candidates).
fn chat(body: Value) -> Result<Value, crate::api::IngressError> {
    let read = to_chat(&fields_of(&body)?, "m", true, 8)?;
    let fields = (read.chat.iter())
        .map(|(k, v)| (k.clone(), serde_json::from_slice(v).unwrap()))
        .collect();
    Ok(Value::Object(fields))
}

fn refused(body: Value) -> (String, String) {
    let e = chat(body).unwrap_err();
    (e.param.unwrap_or_default(), e.message)
}

#[test]
fn a_request_is_read_onto_chat_completions() {
    let got = chat(json!({
        "contents": [
            {"parts": [{"text": "Describe"}, {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
            {"role": "model", "parts": [{"thought": true, "text": "hm"}, {"text": "A cat."}]},
            {"role": "user", "parts": [{"text": "More"}]},
        ],
        "systemInstruction": {"role": "user", "parts": [{"text": "Be brief."}, {"text": "Be kind."}]},
        "generationConfig": {
            "candidateCount": 3, "temperature": 0.5, "topP": 0.9, "topK": 40,
            "maxOutputTokens": 100, "stopSequences": ["END"], "seed": 7,
            "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "properties": {"n": {"type": "INTEGER", "nullable": true}},
                               "propertyOrdering": ["n"]},
            "thinkingConfig": {"thinkingBudget": 3000, "includeThoughts": true},
        },
        "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
        "choicewise": {"samples": 3},
    }))
    .unwrap();
    assert_eq!(
        got,
        json!({
            "model": "m", "stream": true, "n": 3, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
            "max_tokens": 100, "stop": ["END"], "seed": 7, "reasoning_effort": "medium",
            "response_format": {"type": "json_schema", "json_schema": {"name": "response",
                "schema": {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}}}},
            "messages": [
                {"role": "system", "content": "Be brief.\n\nBe kind."},
                {"role": "user", "content": [{"type": "text", "text": "Describe"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
                {"role": "assistant", "content": "A cat."},
                {"role": "user", "content": "More"},
            ],
            "choicewise": {"samples": 3},
        })
    );
    let plain = chat(json!({"contents": [{"parts": [{"text": "hi"}]}],
                            "generationConfig": {"responseMimeType": "application/json"}}))
    .unwrap();
    assert_eq!(plain["response_format"], json!({"type": "json_object"}));
    assert!(plain.get("n").is_none());
}

#[test]
fn function_calls_and_responses_pair_by_id_then_by_name() {
    let got = chat(json!({
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "a", "args": {"x": [1, 2]}}},
                {"functionCall": {"id": "given", "name": "b"}},
                {"functionCall": {"name": "a", "args": {"x": 3}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "a", "response": {"r": 2}, "id": "call_1_2"}},
                {"functionResponse": {"name": "b", "id": "given", "response": {"r": "b"}}},
                {"functionResponse": {"name": "a", "response": {"r": 1}}},
            ]},
        ],
        "tools": [{"functionDeclarations": [{"name": "a", "parametersJsonSchema": {"type": "object"}},
                                            {"name": "b", "description": "B."}]},
                  {"googleSearch": {}}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
    }))
    .unwrap();
    let call = |id: &str, name: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    let result =
        |id: &str, content: &str| json!({"role": "tool", "tool_call_id": id, "content": content});
    assert_eq!(
        got["messages"],
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [
                call("call_1_0", "a", "{\"x\":[1,2]}"), call("given", "b", "{}"),
                call("call_1_2", "a", "{\"x\":3}")]},
            result("call_1_2", "{\"r\":2}"),
            result("given", "{\"r\":\"b\"}"),
            result("call_1_0", "{\"r\":1}"),
        ])
    );
    assert_eq!(
        got["tools"],
        json!([{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
               {"type": "function", "function": {"name": "b", "description": "B."}}])
    );
    assert_eq!(got["tool_choice"], "required");
    let read = to_chat(
        &fields_of(
            &json!({"contents": [{"parts": [{"text": "x"}]}], "tools": [{"googleSearch": {}}]}),
        )
        .unwrap(),
        "m",
        false,
        8,
    )
    .unwrap();
    assert_eq!(
        read.hosted,
        [crate::api::Hosted {
            param: "tools[0].googleSearch".into(),
            kind: "googleSearch".into()
        }]
    );
    assert!(!read.chat.contains_key("tools") && !read.chat.contains_key("stream"));
}

#[test]
fn bad_input_is_refused_naming_the_field() {
    let part = |p: Value| json!({"contents": [{"role": "user", "parts": [p]}]});
    for (body, param, says) in [
        (json!({}), "contents", "Field required"),
        (json!({"contents": []}), "contents", "at least one"),
        (json!({"contents": {}}), "contents", "must be an array"),
        (
            json!({"contents": [{"role": "system", "parts": []}]}),
            "contents[0].role",
            "\"user\" or \"model\"",
        ),
        (
            json!({"contents": [{"role": "user"}]}),
            "contents[0].parts",
            "Field required",
        ),
        (
            part(json!({})),
            "contents[0].parts[0]",
            "a part needs one of",
        ),
        (
            part(json!({"fileData": {"fileUri": "gs://x"}})),
            "contents[0].parts[0].fileData",
            "not served",
        ),
        (
            part(json!({"inlineData": {"mimeType": "audio/wav", "data": "x"}})),
            "contents[0].parts[0].inlineData.mimeType",
            "only images",
        ),
        (
            part(json!({"text": 3})),
            "contents[0].parts[0].text",
            "must be a string",
        ),
        (
            part(json!({"functionCall": {"name": "f"}})),
            "contents[0].parts[0].functionCall",
            "role \"model\"",
        ),
        (
            json!({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": [1]}}]}]}),
            "contents[0].parts[0].functionCall.args",
            "must be an object",
        ),
        (
            part(json!({"functionResponse": {"name": "f"}})),
            "contents[0].parts[0].functionResponse",
            "answers no function call",
        ),
        (
            json!({"contents": [], "cachedContent": "c/1"}),
            "cachedContent",
            "keeps no state",
        ),
        (
            json!({"contents": [], "generationConfig": {"candidateCount": 9}}),
            "generationConfig.candidateCount",
            "from 1 to 8",
        ),
        (
            json!({"contents": [], "generationConfig": {"topK": "x"}}),
            "generationConfig.topK",
            "a number",
        ),
        (
            json!({"contents": [], "generationConfig": {"responseMimeType": "text/x.enum"}}),
            "generationConfig.responseMimeType",
            "application/json",
        ),
        (
            json!({"contents": [], "generationConfig": {"responseModalities": ["IMAGE"]}}),
            "generationConfig.responseModalities",
            "TEXT",
        ),
        (
            json!({"contents": [], "generationConfig": {"responseLogprobs": true}}),
            "generationConfig.responseLogprobs",
            "not served",
        ),
        (
            json!({"contents": [], "generationConfig": []}),
            "generationConfig",
            "must be an object",
        ),
        (
            json!({"contents": [], "systemInstruction": {"parts": [{"inlineData": {}}]}}),
            "systemInstruction.parts[0]",
            "text parts",
        ),
    ] {
        let (got_param, message) = refused(body.clone());
        assert_eq!(got_param, param, "{body}: {message}");
        assert!(message.contains(says), "{body}: {message}");
    }
}

#[test]
fn the_path_names_the_model_and_the_method() {
    assert_eq!(
        target("/v1beta/models/m:generateContent").unwrap(),
        ("m", Method::Generate)
    );
    assert_eq!(
        target("/v1beta/models/a/b:streamGenerateContent").unwrap(),
        ("a/b", Method::Stream)
    );
    assert_eq!(
        target("/v1beta/models/qwen:7b:countTokens").unwrap(),
        ("qwen:7b", Method::CountTokens)
    );
    // Only a count leaves the answer's path.
    assert_eq!(
        Gemini::asks("/v1beta/models/m:countTokens"),
        Asks::CountTokens
    );
    for path in [
        "/v1beta/models/m:generateContent",
        "/v1beta/models/m:streamGenerateContent",
        "/v1beta/models/m:embedContent",
    ] {
        assert_eq!(Gemini::asks(path), Asks::Answer, "{path}");
    }
    for path in [
        "/v1beta/models/m:embedContent",
        "/v1beta/models/m",
        "/v1beta/files/x:generateContent",
    ] {
        assert_eq!(
            target(path).unwrap_err().status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    assert_eq!(
        target("/v1beta/models/:generateContent")
            .unwrap_err()
            .status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(alt_sse(Some("key=k&alt=sse")).ok(), Some(true));
    assert_eq!(alt_sse(Some("alt=json")).ok(), Some(false));
    assert_eq!(alt_sse(None).ok(), Some(false));
    let refused = alt_sse(Some("alt=proto")).unwrap_err();
    assert_eq!(refused.param.as_deref(), Some("alt"), "{}", refused.message);
    assert!(Gemini::owns("/v1beta/models/m:generateContent") && !Gemini::owns("/v1/messages"));
    // Google's v1 paths: a model's method, not the OpenAI API's model.
    assert!(Gemini::owns("/v1/models/m:generateContent") && !Gemini::owns("/v1/models/m"));
    assert_eq!(
        target("/v1/models/m:streamGenerateContent")
            .map(|(m, _)| m.to_string())
            .ok(),
        Some("m".to_string())
    );
}

#[test]
fn errors_are_googles_shape_and_status_names() {
    let e =
        ApiError::invalid("generationConfig.topK: must be a number").param("generationConfig.topK");
    assert_eq!(
        Gemini::error_body(&e),
        json!({"error": {"code": 400, "message": "generationConfig.topK: must be a number",
            "status": "INVALID_ARGUMENT", "details": [{
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": "generationConfig.topK",
                                     "description": "generationConfig.topK: must be a number"}]}]}})
    );
    for (status, name) in [
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (413, "INVALID_ARGUMENT"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (502, "UNAVAILABLE"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
    ] {
        assert_eq!(status_name(StatusCode::from_u16(status).unwrap()), name);
    }
    let renamed = in_gemini_terms(
        ApiError::invalid(
            "model \"m\" takes at most 2 samples (its max_samples), and the request asks for 3 (n)",
        )
        .param("n"),
    );
    assert_eq!(
        renamed.param.as_deref(),
        Some("generationConfig.candidateCount")
    );
    assert!(
        renamed
            .message
            .ends_with("(generationConfig.candidateCount)")
    );
}

#[test]
fn finish_reasons_map_to_geminis() {
    for (reason, gemini) in [
        ("stop", "STOP"),
        ("length", "MAX_TOKENS"),
        ("content_filter", "SAFETY"),
        ("tool_calls", "STOP"),
        ("function_call", "STOP"),
        ("RECITATION", "RECITATION"),
        ("end_turn", "STOP"),
    ] {
        assert_eq!(finish_reason_of(reason), gemini, "{reason}");
    }
}

#[test]
fn schemas_lose_their_openapi_spelling() {
    let schema = json!({"type": "ARRAY", "items": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
                        "nullable": false});
    assert_eq!(
        json_schema_of(schema),
        json!({"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}]}})
    );
}

fn envelope() -> Envelope {
    Envelope {
        id: Arc::from("resp-1"),
        created: 0,
        model: Arc::from("m"),
    }
}

/// The events of choice `index` of a Chat Completions SSE text, as the library reads them.
async fn events(sse: &str, index: u32) -> Vec<ChoiceEvent> {
    use futures::StreamExt;
    let reads = futures::stream::iter([Ok::<_, std::io::Error>(sse.to_string())]);
    let completions = choicewise_core::Completions::new(choicewise_core::Source::sse(reads));
    let outs: Vec<Out> = crate::answer::write::output(completions, Some(index))
        .collect()
        .await;
    (outs.into_iter())
        .filter_map(|o| match o {
            Out::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_json_array_stream_is_one_array_the_last_end_holding_the_usage() {
    let reply = GeminiReply {
        sse: false,
        thoughts: true,
    };
    // Candidate 1 thinks, then calls `f` with arguments that are no object.
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",",
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let mut framing = GeminiFraming::new(&reply, &envelope(), 2);
    let mut write = Vec::new();
    framing.open(&mut write);
    framing.event(0, &ChoiceEvent::Content("a".into()), &mut write);
    for event in events(sse, 0).await {
        framing.event(1, &event, &mut write);
    }
    let ends = [
        OutputEnd::Failed(Failure::NoFinishReason),
        OutputEnd::Finished("tool_calls".into()),
    ];
    framing.end(0, &ends[0], &mut write);
    framing.end(1, &ends[1], &mut write);
    let tail = Tail::default();
    framing.tail(&ends, &AnswerEnd::of(&ends, true), tail, &mut write);
    let text = String::from_utf8(write).unwrap();
    let records: Vec<Value> = serde_json::from_str(&text).unwrap();
    let candidates: Vec<&Value> = records.iter().map(|r| &r["candidates"][0]).collect();
    assert_eq!(records.len(), 4, "{text}");
    assert_eq!(candidates[0]["content"]["parts"], json!([{"text": "a"}]));
    assert_eq!(
        candidates[1]["content"]["parts"],
        json!([{"text": "think", "thought": true}])
    );
    assert_eq!(candidates[1]["index"], 1);
    // Candidate 0 failed; candidate 1's call had no object: both end, the last with the tail.
    assert_eq!(candidates[2]["finishReason"], "OTHER");
    assert_eq!(candidates[2]["index"], 0);
    assert_eq!(
        candidates[3]["finishReason"], "MALFORMED_FUNCTION_CALL",
        "{text}"
    );
    assert!(
        candidates[3]["finishMessage"]
            .as_str()
            .unwrap()
            .contains("not a JSON object"),
        "{text}"
    );
    assert!(
        records
            .iter()
            .all(|r| r["modelVersion"] == "m" && r["responseId"] == "resp-1")
    );
}
