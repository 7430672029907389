//! Data an upstream sends for a choice after its finish: left out of the answer, streamed or
//! not, in every client API (a relayed stream ends each choice at its finish, so a
//! non-streamed answer must not say more than the stream would have).

use choicewise_testserver::TestServer;
use serde_json::json;

use crate::common::{no_env, post_to, serve, upstream_toml};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_after_a_finish_is_left_out_streamed_or_not_in_every_api() {
    let sse = concat!(
        r#"data: {"id":"c","object":"chat.completion.chunk","model":"up","choices":[{"index":0,"delta":{"role":"assistant","content":"four"},"finish_reason":"stop"}]}"#,
        "\n\n",
        r#"data: {"id":"c","object":"chat.completion.chunk","model":"up","choices":[{"index":0,"delta":{"content":" and more"},"finish_reason":null}]}"#,
        "\n\ndata: [DONE]\n\n"
    );
    let upstream = TestServer::builder().body(sse).start().await.unwrap();
    let toml = format!(
        "[[models]]\nname = \"m\"\n{}",
        upstream_toml("chat", &upstream.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let mut failed = Vec::new();
    for stream in [false, true] {
        let hi = json!([{"role": "user", "content": "hi"}]);
        let requests = [
            (
                "/v1/chat/completions",
                json!({"model": "m", "stream": stream, "messages": hi}),
            ),
            (
                "/v1/messages",
                json!({"model": "m", "max_tokens": 16, "stream": stream, "messages": hi}),
            ),
            (
                "/v1/responses",
                json!({"model": "m", "stream": stream, "input": "hi"}),
            ),
        ];
        for (path, body) in requests {
            let r = post_to(addr, path, &body).await;
            let (status, text) = (r.status().as_u16(), r.text().await.unwrap());
            if status != 200 || !text.contains("four") || text.contains("and more") {
                failed.push(format!("{path}, stream {stream}: {status} {text}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
