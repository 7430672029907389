//! The pass-through path over real sockets: a streamed Chat request of one choice to Chat
//! upstreams is answered with its upstream's own chunks (what the gateway does not read,
//! a vendor's fields, passes), under the gateway's id and model; the usage, a failure and
//! the tries read as on the general path.

use choicewise_testserver::TestServer;
use serde_json::{Value, json};

use crate::common::{metrics_with, no_env, post_chat, serve, sse_data, upstream_toml};

/// An upstream's answer with fields the gateway does not read, in the chunk and in the
/// choice, then its usage.
const VENDOR: &str = concat!(
    r#"data: {"id":"up-1","object":"chat.completion.chunk","created":1,"model":"up","system_fingerprint":"fp_1","provider":{"region":"eu"},"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null,"x_vendor":{"cached":true}}]}"#,
    "\n\n",
    r#"data: {"id":"up-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
    "\n\n",
    r#"data: {"id":"up-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#,
    "\n\ndata: [DONE]\n\n",
);

fn toml(url: &str) -> String {
    format!(
        "[[models]]\nname = \"m\"\n{}",
        upstream_toml("chat", url, "")
    )
}

/// A streamed Chat request for `m` saying hi, with `fields` besides: its 200's text and
/// its chunks, which end with `[DONE]`.
async fn streamed(addr: std::net::SocketAddr, fields: Value) -> (String, Vec<Value>) {
    let mut body = json!({"model": "m", "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = post_chat(addr, &body).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let (chunks, done) = sse_data(&text);
    assert!(done, "{text}");
    (text, chunks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_chat_request_of_one_choice_is_its_upstreams_own_chunks() {
    let upstream = TestServer::builder().body(VENDOR).start().await.unwrap();
    let (addr, _) = serve(&toml(&upstream.base_url()), no_env).await;
    for include_usage in [false, true] {
        let asked = json!({"stream_options": {"include_usage": include_usage}});
        let (text, chunks) = streamed(addr, asked).await;
        let id = chunks[0]["id"].as_str().unwrap();
        assert!(
            id.starts_with("chatcmpl-cw"),
            "the gateway's own id: {text}"
        );
        for chunk in &chunks {
            assert_eq!((&chunk["id"], &chunk["model"]), (&json!(id), &json!("m")));
        }
        // What the gateway does not read passes as the upstream sent it.
        assert_eq!(chunks[0]["system_fingerprint"], "fp_1", "{text}");
        assert_eq!(chunks[0]["provider"]["region"], "eu");
        assert_eq!(chunks[0]["choices"][0]["x_vendor"]["cached"], true);
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "stop");
        // The usage: only when asked, the general path's object (its `choicewise` parts).
        let usage: Vec<&Value> = chunks
            .iter()
            .map(|c| &c["usage"])
            .filter(|u| !u.is_null())
            .collect();
        match include_usage {
            false => assert!(usage.is_empty(), "{text}"),
            true => {
                assert_eq!(usage.len(), 1, "{text}");
                assert_eq!(usage[0]["completion_tokens"], 2);
                assert_eq!(usage[0]["prompt_tokens"], 7);
                assert_eq!(usage[0]["choicewise"]["estimated"], false);
            }
        }
    }
    // The record counts the tokens the upstream reported, as the general path does.
    metrics_with(
        addr,
        &["choicewise_tokens_total{model=\"m\",upstream=\"chat:up@127.0.0.1:"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_answer_that_fails_upstream_ends_as_the_general_path_ends_it() {
    let failing = concat!(
        r#"data: {"id":"u","object":"chat.completion.chunk","model":"up","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}"#,
        "\n\n",
        r#"data: {"error":{"message":"the model overloaded","type":"server_error"}}"#,
        "\n\n",
    );
    let upstream = TestServer::builder().body(failing).start().await.unwrap();
    let (addr, _) = serve(&toml(&upstream.base_url()), no_env).await;
    let mut answers = Vec::new();
    // One choice relayed; two, on the general path: each its choice's failure, then the
    // error event, then `[DONE]`.
    for n in [1, 2] {
        let (text, chunks) = streamed(addr, json!({"n": n})).await;
        let last = chunks.last().unwrap();
        assert!(
            last["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the model overloaded"),
            "{text}"
        );
        let failed = (chunks.iter())
            .filter(|c| c["choices"][0]["finish_reason"] == "error")
            .count();
        assert_eq!(failed, n, "{text}");
        // The upstream's request cut: a `cut` try, in the tries' summary.
        let tries = (chunks.iter())
            .find_map(|c| c["choicewise"]["tries"].as_array())
            .unwrap_or_else(|| panic!("no tries: {text}"));
        assert!(tries.iter().any(|t| t["outcome"] == "cut"), "{text}");
        answers.push((last["error"]["type"].clone(), last["error"]["code"].clone()));
    }
    assert_eq!(answers[0], answers[1], "the same error on both paths");
    assert_eq!(answers[0].1, "every_choice_failed");
}

/// An upstream silent mid-answer: the relayed answer fails after its idle timeout, as the
/// general path fails a silent choice, and its upstream request is a `cut` try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_answer_whose_upstream_falls_silent_fails_after_the_idle_timeout() {
    let upstream = crate::common::start(crate::common::stalled(1)).await;
    let toml = format!(
        "[limits]\nupstream_idle_timeout_s = 0.3\n{}",
        toml(&upstream.base_url())
    );
    let (addr, _) = serve(&toml, no_env).await;
    let started = std::time::Instant::now();
    let (text, chunks) = streamed(addr, json!({})).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let failed = chunks
        .iter()
        .find(|c| c["choices"][0]["finish_reason"] == "error");
    let why =
        failed.unwrap_or_else(|| panic!("no failure: {text}"))["choices"][0]["choicewise"]["error"]
            .as_str()
            .unwrap();
    assert!(why.contains("idle timeout"), "{why}");
    assert_eq!(
        chunks.last().unwrap()["error"]["code"],
        "every_choice_failed"
    );
}

/// How an upstream reports the usage of a native `n`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Reports {
    /// Not at all.
    Nothing,
    /// One usage for them all, at the end (OpenAI's).
    Total,
    /// One usage-only chunk after each choice's finish, each with the whole prompt and
    /// that choice's output (llama.cpp's).
    EachChoice,
}

/// A native `n = 3` answer as such an upstream streams it: the choices interleaved, a
/// chunk of two, one element after its choice's finish, a vendor's field; its usage as
/// it `reports` it.
fn native_three(reports: Reports) -> String {
    let element = |i: u32, content: &str, finish: &str| {
        format!(
            "{{\"index\":{i},\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":{finish}}}"
        )
    };
    let chunk = |elements: &[String]| {
        format!(
            "data: {{\"id\":\"up-3\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"system_fingerprint\":\"fp_3\",\"choices\":[{}]}}\n\n",
            elements.join(",")
        )
    };
    let usage = |completion: u32| {
        format!(
            "data: {{\"id\":\"up-3\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[],\"usage\":{{\"prompt_tokens\":11,\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n",
            11 + completion
        )
    };
    // Each choice's usage, if reported apart, after its finish.
    let own = |completion: u32| match reports {
        Reports::EachChoice => usage(completion),
        _ => String::new(),
    };
    let mut body = [
        chunk(&[element(0, "The answer", "null")]),
        chunk(&[element(2, "Four", "null"), element(1, "It is", "null")]),
        chunk(&[element(1, " four, as two and two make four.", "\"stop\"")]),
        own(12),
        chunk(&[element(0, " is four", "null"), element(1, " Late.", "null")]),
        chunk(&[element(2, ".", "\"stop\"")]),
        own(2),
        chunk(&[element(0, ".", "\"stop\"")]),
        own(5),
    ]
    .concat();
    if reports == Reports::Total {
        body.push_str(&usage(30));
    }
    body + "data: [DONE]\n\n"
}

/// `relaying`, a gateway's TOML, with its records' samples kept in `dir`: each request takes
/// the general path, which needs the choices whole.
fn general_path(relaying: &str, dir: &std::path::Path) -> String {
    format!(
        "[records]\nurl = \"sqlite://{}\"\nsamples = true\nspool_path = \"{}\"\n{relaying}",
        dir.join("r.db").display(),
        dir.join("r.spool").display()
    )
}

/// The lines of `/metrics` text that a request's record sets: its tokens, its choices' ends,
/// its cancelled tokens and (`answers`) its answer's end.
fn recorded(text: &str, answers: bool) -> std::collections::BTreeSet<String> {
    let names = [
        "choicewise_tokens_total",
        "choicewise_choices_total",
        "choicewise_cancelled_tokens_total",
    ];
    let answer = answers.then_some("choicewise_answers_total");
    (text.lines())
        .filter(|l| names.iter().chain(&answer).any(|n| l.starts_with(n)))
        .map(str::to_string)
        .collect()
}

/// Each choice's text and finish in `chunks`, by index.
fn choices_of(chunks: &[Value]) -> Vec<(String, Value)> {
    let mut choices = vec![(String::new(), Value::Null); 3];
    for chunk in chunks {
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let i = choice["index"].as_u64().unwrap() as usize;
            choices[i].0 += choice["delta"]["content"].as_str().unwrap_or_default();
            if !choice["finish_reason"].is_null() {
                choices[i].1 = choice["finish_reason"].clone();
            }
        }
    }
    choices
}

/// A native `n` is relayed in one upstream request: each choice reads as on the general
/// path (the same gateway keeping its samples on record, which needs them whole), and so
/// does the usage, its one total shared among the choices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_n_is_relayed_and_reads_as_the_general_path_reads_it() {
    for reports in [Reports::Total, Reports::EachChoice, Reports::Nothing] {
        let upstream = TestServer::builder()
            .body(native_three(reports))
            .start()
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let relaying = toml(&upstream.base_url());
        let general = general_path(&relaying, dir.path());
        let (relayed_at, _) = serve(&relaying, no_env).await;
        let (general_at, _) = serve(&general, no_env).await;
        let asked = json!({"n": 3, "stream_options": {"include_usage": true}});
        let (text, relayed) = streamed(relayed_at, asked.clone()).await;
        let (general_text, general) = streamed(general_at, asked).await;
        // Relayed: the upstream's own chunks (its vendor's field); the general path
        // writes its own.
        assert!(
            relayed.iter().any(|c| c["system_fingerprint"] == "fp_3"),
            "{text}"
        );
        // Both open the three choices first, in index order (the upstream began with 0,
        // then 2 and 1 in one chunk).
        let firsts = |chunks: &[Value]| -> Vec<Value> {
            (chunks.iter().take(3))
                .map(|c| c["choices"][0]["index"].clone())
                .collect()
        };
        assert_eq!(firsts(&relayed), [json!(0), json!(1), json!(2)], "{text}");
        assert_eq!(firsts(&general), firsts(&relayed));
        assert!(general.iter().all(|c| c["system_fingerprint"].is_null()));
        let choices = choices_of(&relayed);
        assert_eq!(choices, choices_of(&general), "{text}\n{general_text}");
        assert_eq!(choices[0].0, "The answer is four.");
        assert_eq!(
            choices[1].0, "It is four, as two and two make four.",
            "late: left out"
        );
        let usage_of = |chunks: &[Value]| {
            chunks.iter().find(|c| !c["usage"].is_null()).unwrap()["usage"].clone()
        };
        let (usage_relayed, usage_general) = (usage_of(&relayed), usage_of(&general));
        assert_eq!(usage_relayed, usage_general, "{text}\n{general_text}");
        let parts = usage_relayed["choicewise"]["per_choice"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(parts.len(), 3, "{usage_relayed}");
        let figures: Vec<u64> = (parts.iter())
            .map(|p| p["completion_tokens"].as_u64().unwrap())
            .collect();
        match reports {
            Reports::Total => {
                assert_eq!(usage_relayed["completion_tokens"], 30);
                let shares: u64 = figures.iter().sum();
                assert_eq!(
                    shares, 30,
                    "the shares add up to the total: {usage_relayed}"
                );
            }
            // Each choice's own figure, as reported; nothing the gateway's.
            Reports::EachChoice => {
                assert_eq!(figures, [5, 12, 2], "{usage_relayed}");
                assert_eq!(usage_relayed["completion_tokens"], 19);
                assert_eq!(usage_relayed["prompt_tokens"], 11);
                assert_eq!(usage_relayed["choicewise"]["estimated"], false);
                assert!(parts.iter().all(|p| p["estimated"] == false), "{parts:?}");
            }
            Reports::Nothing => assert_eq!(usage_relayed["choicewise"]["estimated"], true),
        }
        // The record of each reads the same: its tokens, its choices' ends, its answer.
        let counted = |text: &str| recorded(text, true);
        let seen = ["choicewise_tokens_total{model=\"m\""];
        let relayed_record = counted(&metrics_with(relayed_at, &seen).await);
        assert!(relayed_record.len() >= 4, "{relayed_record:?}");
        assert_eq!(
            relayed_record,
            counted(&metrics_with(general_at, &seen).await)
        );
        // One upstream request for the three choices, each time.
        let ns: Vec<Value> = (upstream.requests().iter())
            .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["n"].clone())
            .collect();
        assert_eq!(ns, [json!(3), json!(3)], "{ns:?}");
    }
}

/// A client gone mid-answer from a relayed native `n`: the choice that had finished is
/// recorded finished, the others cancelled with the tokens they had sent, as the general
/// path records the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_from_a_relayed_native_n_is_recorded_as_the_general_path_records_it() {
    // Four chunks, choice 1 finished among them; then the upstream stalls.
    let upstream = TestServer::builder()
        .body(native_three(Reports::Nothing))
        .stall_after_events(4)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let relaying = toml(&upstream.base_url());
    let general = general_path(&relaying, dir.path());
    let record = |text: &str| recorded(text, false);
    let mut records = Vec::new();
    for toml in [relaying.clone(), general] {
        let (addr, _) = serve(&toml, no_env).await;
        let body = json!({"model": "m", "stream": true, "n": 3,
            "messages": [{"role": "user", "content": "hi"}]});
        let mut r = post_chat(addr, &body).await;
        let mut text = String::new();
        while !text.contains("\"finish_reason\":\"stop\"") {
            let chunk = r.chunk().await.unwrap().expect("the answer ended early");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        drop(r);
        // Recorded once the gateway has seen its client go.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let text = loop {
            let text = crate::common::metrics(addr).await;
            let cancelled: f64 = (text.lines())
                .find_map(|l| l.strip_prefix("choicewise_cancelled_tokens_total{model=\"m\"} "))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            if cancelled > 0.0 {
                break text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no cancelled tokens: {text}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        records.push(record(&text));
    }
    let relayed = &records[0];
    assert!(
        relayed
            .iter()
            .any(|l| l.contains("finish_reason=\"stop\"") && l.ends_with(" 1")),
        "{relayed:?}"
    );
    assert_eq!(records[0], records[1]);
}
