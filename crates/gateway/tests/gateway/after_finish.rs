//! Data an upstream sends for a choice after its finish: left out of the answer, streamed or
//! not, in every client API (a relayed stream ends each choice at its finish, so a
//! non-streamed answer must not say more than the stream would have).

use std::net::SocketAddr;

use choicewise_testserver::TestServer;

use crate::common::serve;

fn env(_: &str) -> Option<String> {
    None
}

async fn post(addr: SocketAddr, path: &str, body: String) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

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
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
        upstream.base_url()
    );
    let (addr, _) = serve(&toml, env).await;
    let mut failed = Vec::new();
    for stream in [false, true] {
        let requests = [
            (
                "/v1/chat/completions",
                format!(
                    r#"{{"model":"m","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
                ),
            ),
            (
                "/v1/messages",
                format!(
                    r#"{{"model":"m","max_tokens":16,"stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
                ),
            ),
            (
                "/v1/responses",
                format!(r#"{{"model":"m","stream":{stream},"input":"hi"}}"#),
            ),
        ];
        for (path, body) in requests {
            let (status, text) = post(addr, path, body).await;
            if status != 200 || !text.contains("four") || text.contains("and more") {
                failed.push(format!("{path}, stream {stream}: {status} {text}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
