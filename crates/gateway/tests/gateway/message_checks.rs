//! One check of a request's conversation before any upstream (`api::message_check`): an
//! item that is not an object, a role in the wrong case, an unknown or missing role get the
//! same 400 over a Chat Completions, an Anthropic and a Responses upstream, in the client's
//! API's shape, with a stable code and the item's path; the upstream is never asked.

use choicewise_testserver::TestServer;
use serde_json::{Value, json};

use crate::common::{no_env, post_to, serve, upstream_toml};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_message_gets_one_answer_over_every_upstream_api() {
    // (the second item of the list, the code, the path's last part, words in the message)
    let faults = [
        (
            json!({"role": "User", "content": "x"}),
            "invalid_role",
            ".role",
            "User",
        ),
        (
            json!({"role": "bot", "content": "x"}),
            "invalid_role",
            ".role",
            "bot",
        ),
        (json!({"content": "x"}), "invalid_role", ".role", "role"),
        (
            json!({"role": ["user"], "content": "x"}),
            "invalid_role",
            ".role",
            "array",
        ),
        (json!("just text"), "invalid_message", "", "string"),
        (json!(42), "invalid_message", "", "number"),
    ];
    let mut failed = Vec::new();
    for api in ["chat", "anthropic", "responses"] {
        let upstream = TestServer::builder()
            .body(crate::finishes::answer(api, crate::finishes::After::End))
            .start()
            .await
            .unwrap();
        let toml = format!(
            "[[models]]\nname = \"m\"\n{}",
            upstream_toml(api, &upstream.base_url(), "")
        );
        let (addr, _) = serve(&toml, no_env).await;
        for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
            let (list, item_at) = match path {
                "/v1/messages" => ("messages", "messages.1"),
                "/v1/responses" => ("input", "input[1]"),
                _ => ("messages", "messages[1]"),
            };
            let body = |second: &Value| {
                json!({"model": "m", "max_tokens": 20,
                    list: [{"role": "user", "content": "hi"}, second]})
            };
            // The control: a good second message is served.
            let good = json!({"role": "assistant", "content": "hello"});
            let r = post_to(addr, path, &body(&good)).await;
            if r.status() != 200 {
                let status = r.status();
                failed.push(format!(
                    "{path} over {api}: control {status} {}",
                    r.text().await.unwrap()
                ));
            }
            for (second, code, field, says) in &faults {
                if path == "/v1/responses" && second.get("role").is_none() && second.is_object() {
                    // An input item with neither type nor role is no message: its type is
                    // the field missing (`missing_required_parameter`, tested elsewhere).
                    continue;
                }
                let before = upstream.requests().len();
                let r = post_to(addr, path, &body(second)).await;
                let status = r.status().as_u16();
                let answer: Value = r.json().await.unwrap_or_default();
                let what = format!("{path} over {api}, {second}");
                let param = format!("{item_at}{field}");
                let message = answer["error"]["message"].as_str().unwrap_or_default();
                let shaped = match path {
                    // Anthropic's shape has no code or param: its message names the field.
                    "/v1/messages" => {
                        answer["type"] == "error"
                            && answer["error"]["type"] == "invalid_request_error"
                    }
                    _ => {
                        answer["error"]["code"] == *code
                            && answer["error"]["param"] == param.as_str()
                            && message.contains(says)
                    }
                };
                if status != 400 || !shaped || !message.starts_with(&param) {
                    failed.push(format!("{what}: {status} {answer}"));
                }
                if upstream.requests().len() != before {
                    failed.push(format!("{what}: the upstream was asked"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
