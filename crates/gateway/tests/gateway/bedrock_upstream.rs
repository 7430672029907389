//! A Bedrock upstream (`api = "bedrock"`, ConverseStream) under the gateway, over a scripted
//! Bedrock of its own on 127.0.0.1 (scripts/bedrock_upstream.py): each request's SigV4
//! signature checked by botocore's signer, each answer written in AWS's binary event stream,
//! split across writes anywhere, paced, cut or failed as the script says.
//!
//! It needs python3 with botocore (PyPI): without them each test is skipped, saying so, but
//! under CI (`CI=true`), where .ci/run installs botocore and their absence fails the test
//! (choicewise_test_support::BedrockUpstream).

use serde_json::{Value, json};

use crate::common::{post_chat, post_to, serve, sse_data};

pub(crate) use choicewise_test_support::{
    BEDROCK_ACCESS_KEY as ACCESS_KEY, BEDROCK_SECRET as SECRET, BedrockUpstream as Bedrock,
};
const MODEL: &str = "anthropic.claude-3-5-haiku-20241022-v1:0";

/// A gateway with model `m` over this Bedrock, its credentials from `env`.
async fn gateway(
    bedrock: &Bedrock,
    extra: &str,
    env: impl Fn(&str) -> Option<String> + 'static,
) -> std::net::SocketAddr {
    let toml = format!(
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"bedrock\"\nbase_url = \"{}\"\n\
         region = \"us-east-1\"\nmodel = \"{MODEL}\"\n{extra}\n",
        bedrock.url()
    );
    serve(&toml, env).await.0
}

/// AWS's variables with the example credentials (and this secret).
fn aws_env(secret: &'static str) -> impl Fn(&str) -> Option<String> {
    move |name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some(ACCESS_KEY.to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some(secret.to_string()),
        _ => None,
    }
}

/// A tool call as a client reads it: its id, its name, its arguments.
type Call = (String, String, String);

/// One choice as a client reads it: its text, its tool calls, its finish reason.
type Choice = (String, Vec<Call>, Option<String>);

/// The choices of a streamed Chat Completions answer.
fn choices(text: &str) -> Vec<Choice> {
    let (chunks, done) = sse_data(text);
    assert!(done, "{text}");
    let mut out: Vec<Choice> = Vec::new();
    for chunk in &chunks {
        for c in chunk["choices"].as_array().into_iter().flatten() {
            let i = c["index"].as_u64().unwrap() as usize;
            while out.len() <= i {
                out.push(Default::default());
            }
            let delta = &c["delta"];
            if let Some(t) = delta["content"].as_str() {
                out[i].0.push_str(t);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let k = call["index"].as_u64().unwrap() as usize;
                while out[i].1.len() <= k {
                    out[i].1.push(Default::default());
                }
                let slot = &mut out[i].1[k];
                if let Some(id) = call["id"].as_str() {
                    slot.0 = id.to_string();
                }
                if let Some(name) = call["function"]["name"].as_str() {
                    slot.1 = name.to_string();
                }
                if let Some(a) = call["function"]["arguments"].as_str() {
                    slot.2.push_str(a);
                }
            }
            if let Some(f) = c["finish_reason"].as_str() {
                out[i].2 = Some(f.to_string());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_choices_are_fanned_out_signed_and_read_from_split_event_streams() {
    // Each answer split into writes of 1 to 7 bytes a millisecond apart: frames cut anywhere,
    // the three streams interleaved.
    let answer = |text: &str, seed: u64| json!({"text": text, "writes": "bytes:1-7", "delay_ms": 1, "seed": seed, "usage": [11, 3]});
    let Some(bedrock) = Bedrock::start(
        &json!({"answers": [answer("Paris is the capital.", 1), answer("It is Paris.", 2), answer("Paris.", 3)]}),
        None,
    ) else {
        return;
    };
    let addr = gateway(&bedrock, "", aws_env(SECRET)).await;
    let response = post_chat(
        addr,
        &json!({"model": "m", "n": 3, "stream": true, "max_tokens": 50, "temperature": 0.7,
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "The capital of France?"}]}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let got = choices(&response.text().await.unwrap());
    let mut texts: Vec<&str> = got.iter().map(|c| c.0.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(texts, ["It is Paris.", "Paris is the capital.", "Paris."]);
    assert!(
        got.iter().all(|c| c.2.as_deref() == Some("stop")),
        "{got:?}"
    );
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_eq!(r["signature"], "ok", "{r}");
        assert_eq!(r["model"], MODEL);
        assert!(r["path"].as_str().unwrap().contains("v1%3A0"), "{r}");
        let body = &r["body"];
        assert_eq!(body["system"], json!([{"text": "Be brief."}]));
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"text": "The capital of France?"}]}])
        );
        assert_eq!(
            body["inferenceConfig"],
            json!({"maxTokens": 50, "temperature": 0.7})
        );
        assert!(
            body.get("model").is_none() && body.get("stream").is_none(),
            "{body}"
        );
        let auth = r["headers"]["authorization"].as_str().unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
            "{auth}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_and_its_result_go_both_ways_with_a_session_token() {
    let Some(bedrock) = Bedrock::start(
        &json!({"answers": [
            {"match": "tool_use_result_marker", "text": "There is one file."},
            {"tool_uses": [{"id": "tooluse_ls1", "name": "shell", "input": {"command": ["ls", "-la"]}}],
             "writes": "bytes:2-9", "delay_ms": 1}
        ]}),
        Some("FwoGZXIvYXdzEXAMPLETOKEN"),
    ) else {
        return;
    };
    let env = |name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some(ACCESS_KEY.to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some(SECRET.to_string()),
        "AWS_SESSION_TOKEN" => Some("FwoGZXIvYXdzEXAMPLETOKEN".to_string()),
        _ => None,
    };
    let addr = gateway(&bedrock, "", env).await;
    let tools = json!([{"type": "function", "function": {"name": "shell", "description": "Runs a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}}]);
    let first = post_chat(
        addr,
        &json!({"model": "m", "stream": true, "tools": tools,
            "messages": [{"role": "user", "content": "List the files."}]}),
    )
    .await;
    assert_eq!(first.status(), 200);
    let got = choices(&first.text().await.unwrap());
    assert_eq!(got.len(), 1);
    let (id, name, arguments) = &got[0].1[0];
    assert_eq!((id.as_str(), name.as_str()), ("tooluse_ls1", "shell"));
    let arguments: Value = serde_json::from_str(arguments).unwrap();
    assert_eq!(arguments, json!({"command": ["ls", "-la"]}));
    assert_eq!(got[0].2.as_deref(), Some("tool_calls"));
    let second = post_chat(
        addr,
        &json!({"model": "m", "stream": true, "tools": tools, "messages": [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "shell", "arguments": "{\"command\": [\"ls\", \"-la\"]}"}}]},
            {"role": "tool", "tool_call_id": id, "content": "a.txt tool_use_result_marker"}
        ]}),
    )
    .await;
    assert_eq!(second.status(), 200);
    assert_eq!(
        choices(&second.text().await.unwrap())[0].0,
        "There is one file."
    );
    let requests = bedrock.requests();
    assert!(
        requests.iter().all(|r| r["signature"] == "ok"),
        "{requests:?}"
    );
    let turn = &requests[1]["body"];
    assert_eq!(
        turn["messages"][1]["content"][0]["toolUse"],
        json!({"toolUseId": "tooluse_ls1", "name": "shell", "input": {"command": ["ls", "-la"]}})
    );
    assert_eq!(
        turn["messages"][2]["content"][0]["toolResult"]["toolUseId"],
        "tooluse_ls1"
    );
    assert_eq!(
        turn["toolConfig"]["tools"][0]["toolSpec"]["name"],
        json!("shell")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_the_upstream_rejects_is_a_502_naming_its_403() {
    let Some(bedrock) = Bedrock::start(&json!({"answers": [{"text": "never"}]}), None) else {
        return;
    };
    let addr = gateway(&bedrock, "", aws_env("not-the-secret")).await;
    let response = post_chat(
        addr,
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("403"), "{message}");
    assert!(!message.contains("not-the-secret"), "{message}");
    let requests = bedrock.requests();
    assert!(
        requests
            .iter()
            .all(|r| r["signature"].as_str().unwrap().contains("signature")),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_and_an_exception_fail_their_choice_only() {
    let Some(bedrock) = Bedrock::start(
        &json!({"answers": [
            {"match": "cut", "text": "a long answer cut short", "cut_after": 3, "writes": "bytes:3-5"},
            {"match": "exception", "text": "half", "no_stop": true, "no_metadata": true,
             "exception": {"type": "modelStreamErrorException", "message": "the model stopped"}},
            {"match": "fine", "text": "whole"}
        ]}),
        None,
    ) else {
        return;
    };
    let addr = gateway(&bedrock, "", aws_env(SECRET)).await;
    for (prompt, kind) in [("cut", "cut"), ("exception", "modelStreamErrorException")] {
        let response = post_to(
            addr,
            "/v1/chat/completions",
            &json!({"model": "m", "messages": [{"role": "user", "content": prompt}]}),
        )
        .await;
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 502, "{prompt}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        if kind != "cut" {
            assert!(message.contains("the model stopped"), "{prompt}: {message}");
        }
    }
    let fine = post_to(
        addr,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "fine"}]}),
    )
    .await;
    assert_eq!(fine.status(), 200);
    let body: Value = fine.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "whole");
}

/// A field Converse has no place for is the client's error, a 400 naming the field (the
/// translation's typed refusal), before any upstream is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_converse_has_no_place_for_is_a_400_naming_it() {
    let (url, _held) = choicewise_test_support::refusing();
    let toml = format!(
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"bedrock\"\nbase_url = \"{url}\"\n\
         region = \"us-east-1\"\nmodel = \"{MODEL}\"\n"
    );
    let (addr, _) = serve(&toml, aws_env(SECRET)).await;
    for (field, value) in [
        ("frequency_penalty", json!(0.5)),
        ("seed", json!(7)),
        ("reasoning_effort", json!("extreme")),
    ] {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        body[field] = value;
        let response = post_chat(addr, &body).await;
        let status = response.status();
        let e: Value = response.json().await.unwrap();
        assert_eq!(status, 400, "{field}: {e}");
        assert_eq!(e["error"]["param"], field, "{e}");
        assert_eq!(e["error"]["code"], "untranslatable_request", "{e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains("bedrock"),
            "{e}"
        );
    }
}
