//! One rule for a choice's finish, whatever API its upstream speaks: the first finish wins
//! and what comes after it is left out (a second finish, more text); a choice that finished
//! is finished even when its stream is then cut before its end (`[DONE]`, `message_stop`),
//! its usage then estimated; a choice that never finished fails. A table over Chat
//! Completions, Anthropic Messages and Responses upstreams, each answer streamed and not.

use choicewise_testserver::TestServer;
use serde_json::{Value, json};

use crate::common::{no_env, post_chat, serve, upstream_toml};

/// An SSE event named by its data's `type`, as the Anthropic and Responses APIs send them.
fn named(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    )
}

/// A Chat Completions chunk of choice 0.
fn chat(delta: Value, finish: Value) -> String {
    let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

/// What follows an upstream's first finish in a case of the table.
#[derive(Clone, Copy, Debug)]
pub(crate) enum After {
    /// The stream's end, as the API writes it: the control.
    End,
    /// A second finish of another reason, then the end.
    SecondFinish,
    /// More text, then the end.
    Text,
    /// Nothing: the connection closes before the stream's end.
    Cut,
    /// Half an event, then the connection closes.
    CutMidEvent,
}

const HALF_EVENT: &str = "data: {\"type\":\"x\",\"choi";

/// The upstream's answer in `api`: "Hello", a first finish (a stop), then `after`.
pub(crate) fn answer(api: &str, after: After) -> String {
    let mut out = String::new();
    match api {
        "chat" => {
            out += &chat(
                json!({"role": "assistant", "content": "Hello"}),
                Value::Null,
            );
            out += &chat(json!({}), json!("stop"));
            match after {
                After::SecondFinish => out += &chat(json!({}), json!("length")),
                After::Text => out += &chat(json!({"content": " LATE"}), Value::Null),
                _ => {}
            }
            if matches!(after, After::End | After::SecondFinish | After::Text) {
                let usage = json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
                    "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                    "total_tokens": 7}});
                out += &format!("data: {usage}\n\ndata: [DONE]\n\n");
            }
        }
        "anthropic" => {
            out += &named(json!({"type": "message_start", "message": {"id": "msg_1",
                "type": "message", "role": "assistant", "model": "up", "content": [],
                "stop_reason": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}));
            out += &named(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}));
            out += &named(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Hello"}}));
            out += &named(json!({"type": "content_block_stop", "index": 0}));
            let stop = |reason: &str| {
                named(
                    json!({"type": "message_delta", "delta": {"stop_reason": reason},
                    "usage": {"output_tokens": 2}}),
                )
            };
            out += &stop("end_turn");
            match after {
                After::SecondFinish => out += &stop("max_tokens"),
                After::Text => {
                    out += &named(json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": " LATE"}}));
                }
                _ => {}
            }
            if matches!(after, After::End | After::SecondFinish | After::Text) {
                out += &named(json!({"type": "message_stop"}));
            }
        }
        _ => {
            out += &named(json!({"type": "response.created", "sequence_number": 0,
                "response": {"id": "resp_1", "object": "response", "created_at": 1,
                "status": "in_progress", "model": "up", "output": []}}));
            out += &named(
                json!({"type": "response.output_item.added", "sequence_number": 1,
                "output_index": 0, "item": {"id": "msg_1", "type": "message",
                "status": "in_progress", "role": "assistant", "content": []}}),
            );
            out += &named(
                json!({"type": "response.output_text.delta", "sequence_number": 2,
                "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hello"}),
            );
            let end = |kind: &str, status: &str| {
                named(json!({"type": kind, "sequence_number": 3,
                    "response": {"id": "resp_1", "object": "response", "created_at": 1,
                    "status": status, "model": "up", "output": [],
                    "incomplete_details": {"reason": "max_output_tokens"},
                    "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}}}))
            };
            // The Responses API's finish is its stream's end: nothing can cut between them.
            out += &end("response.completed", "completed");
            match after {
                After::SecondFinish => out += &end("response.incomplete", "incomplete"),
                After::Text => {
                    out += &named(json!({"type": "response.output_text.delta",
                        "sequence_number": 4, "item_id": "msg_1", "output_index": 0,
                        "content_index": 0, "delta": " LATE"}));
                }
                _ => {}
            }
        }
    }
    if matches!(after, After::CutMidEvent) {
        out += HALF_EVENT;
    }
    out
}

/// What the client is given, streamed or not: the choice's finish reason, its text, whether
/// its usage is estimated (`None` when the answer says nothing of it), or the status of an
/// error.
fn read(stream: bool, status: u16, text: &str) -> Result<(String, String, Option<bool>), String> {
    if status != 200 {
        return Err(format!("{status} {text}"));
    }
    if !stream {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("{e}: {text}"))?;
        let choice = &v["choices"][0];
        return Ok((
            choice["finish_reason"].as_str().unwrap_or_default().into(),
            choice["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .into(),
            v["usage"]["choicewise"]["estimated"].as_bool(),
        ));
    }
    let (mut finish, mut content, mut estimated) = (String::new(), String::new(), None);
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(choice) = v["choices"].get(0) {
            content += choice["delta"]["content"].as_str().unwrap_or_default();
            if let Some(f) = choice["finish_reason"].as_str() {
                finish = f.to_string();
            }
        }
        if let Some(e) = v["usage"]["choicewise"]["estimated"].as_bool() {
            estimated = Some(e);
        }
    }
    Ok((finish, content, estimated))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_finish_wins_and_a_finished_choice_survives_a_cut_in_every_api() {
    let cases = [
        After::End,
        After::SecondFinish,
        After::Text,
        After::Cut,
        After::CutMidEvent,
    ];
    let mut failed = Vec::new();
    for api in ["chat", "anthropic", "responses"] {
        for after in cases {
            let upstream = TestServer::builder()
                .body(answer(api, after))
                .start()
                .await
                .unwrap();
            let toml = format!(
                "[[models]]\nname = \"m\"\n{}",
                upstream_toml(api, &upstream.base_url(), "")
            );
            let (addr, _) = serve(&toml, no_env).await;
            for stream in [false, true] {
                let body = json!({"model": "m", "stream": stream,
                    "stream_options": {"include_usage": true},
                    "messages": [{"role": "user", "content": "hi"}]});
                let r = post_chat(addr, &body).await;
                let status = r.status().as_u16();
                let text = r.text().await.unwrap();
                let what = format!("{api}, {after:?}, stream {stream}");
                let (finish, content, estimated) = match read(stream, status, &text) {
                    Ok(got) => got,
                    Err(e) => {
                        failed.push(format!("{what}: {e}"));
                        continue;
                    }
                };
                // Usage the upstream counted is kept; a stream cut before its usage came
                // (Chat's usage chunk, Anthropic's `message_stop`) is counted here.
                let cut = matches!(after, After::Cut | After::CutMidEvent);
                let want_estimated = cut && api != "responses";
                if finish != "stop" || content != "Hello" || estimated != Some(want_estimated) {
                    failed.push(format!(
                        "{what}: finish {finish:?}, content {content:?}, estimated {estimated:?}: {text}"
                    ));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// The other half of the rule: a stream that ends without the choice's finish fails it, in
/// every upstream API (a 502 not streamed, `finish_reason: "error"` streamed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_choice_cut_before_its_finish_fails_in_every_api() {
    let mut failed = Vec::new();
    for api in ["chat", "anthropic", "responses"] {
        // The answer up to its first finish, left out.
        let whole = answer(api, After::Cut);
        let finish_at = match api {
            "chat" => whole.match_indices("data: ").nth(1).map(|(i, _)| i),
            "anthropic" => whole.find("event: message_delta"),
            _ => whole.find("event: response.completed"),
        };
        let body = whole[..finish_at.unwrap()].to_string();
        let upstream = TestServer::builder().body(body).start().await.unwrap();
        let toml = format!(
            "[[models]]\nname = \"m\"\n{}",
            upstream_toml(api, &upstream.base_url(), "")
        );
        let (addr, _) = serve(&toml, no_env).await;
        for stream in [false, true] {
            let body = json!({"model": "m", "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]});
            let r = post_chat(addr, &body).await;
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            let ok = match stream {
                false => status == 502,
                true => status == 200 && text.contains(r#""finish_reason":"error""#),
            };
            if !ok {
                failed.push(format!("{api}, stream {stream}: {status} {text}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
