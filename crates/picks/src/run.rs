//! The run: every problem of a set asked of a gateway once per pick, measured.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::traces::{Problem, TraceSet};
use crate::upstream::{RUN_PREFIX, TraceUpstream};
use crate::{AnswerRule, Figures, Pick, Settings};

/// A gateway's configuration (TOML) in front of the trace upstream at `upstream` (its base
/// URL, without `/v1`): models `fanout` (one upstream request per sample) and `native` (one
/// request of `n`), up to `max_samples` samples a request, listening on a free port of
/// 127.0.0.1.
///
/// ```
/// let toml = choicewise_picks::gateway_config("http://127.0.0.1:9", 64);
/// assert!(toml.contains("name = \"fanout\"") && toml.contains("max_samples = 64"));
/// ```
pub fn gateway_config(upstream: &str, max_samples: usize) -> String {
    let model = |name: &str, n: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{upstream}/v1\"\nmodel = \"arith-6m\"\nn = \"{n}\"\n\n"
        )
    };
    format!(
        "listen = \"127.0.0.1:0\"\nshutdown_grace_s = 1\n\n[limits]\nmax_n = {max_samples}\nmax_samples = {max_samples}\n\
         max_concurrent_requests = 4096\nmax_upstream_requests_per_request = {}\n\n{}{}",
        4 * max_samples,
        model("fanout", "fan-out"),
        model("native", "native"),
    )
}

/// What asks a gateway the problems of a set, pick by pick.
#[derive(Debug, Clone)]
pub struct Asker {
    /// The HTTP client.
    pub client: reqwest::Client,
    /// The gateway's base URL (`http://127.0.0.1:PORT`, without `/v1`).
    pub gateway: String,
    /// The gateway's model: `fanout` or `native` ([`gateway_config`]).
    pub model: String,
    /// Problems asked at once.
    pub concurrency: usize,
    /// How the picked choice's answer is read.
    pub rule: AnswerRule,
    /// The votes' key (`vote_by`).
    pub vote_by: String,
}

/// What one problem's answer was.
struct Answer {
    /// The answer read (`""`: none, or failed).
    got: String,
    /// Milliseconds to the first byte of the body, and to the whole answer.
    first_byte_ms: f64,
    answer_ms: f64,
    right: bool,
    failed: Option<String>,
    undecided: bool,
}

impl Asker {
    /// One pick through the gateway, every problem once, as run `run` of the upstream (its
    /// samples counted from the first): the figures, and the first failure's message.
    pub async fn measure(
        &self,
        up: &TraceUpstream,
        set: &TraceSet,
        pick: &Pick,
        base: &Settings,
        run: &str,
    ) -> (Figures, Option<String>) {
        let s = &pick.settings(base);
        let url = format!("{}/v1/chat/completions", self.gateway);
        let extension = pick.extension(s, &self.vote_by);
        let before = up.counters.counts();
        let start = Instant::now();
        let mut answers: Vec<(usize, Answer)> =
            futures::stream::iter(set.problems.iter().enumerate())
                .map(|(i, p)| {
                    let ask = self.ask(&url, run, p, extension.as_ref());
                    async move { (i, ask.await) }
                })
                .buffer_unordered(self.concurrency.max(1))
                .collect()
                .await;
        answers.sort_by_key(|(i, _)| *i);
        let answers: Vec<Answer> = answers.into_iter().map(|(_, a)| a).collect();
        let wall_s = start.elapsed().as_secs_f64();
        // The cancelled samples' streams end when the gateway closes their connections.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let c = up.counters.counts() - before;
        let first_failure = answers.iter().find_map(|a| a.failed.clone());
        (
            Figures {
                right: answers.iter().filter(|a| a.right).count(),
                tokens: c.tokens,
                requests: c.requests,
                samples_started: c.samples,
                cancelled: c.cancelled,
                failed: answers.iter().filter(|a| a.failed.is_some()).count(),
                undecided: answers.iter().filter(|a| a.undecided).count(),
                wall_s,
                answers: answers.iter().map(|a| a.got.clone()).collect(),
                first_byte_ms: answers.iter().map(|a| a.first_byte_ms).collect(),
                answer_ms: answers.iter().map(|a| a.answer_ms).collect(),
            },
            first_failure,
        )
    }

    async fn ask(
        &self,
        url: &str,
        run: &str,
        problem: &Problem,
        extension: Option<&Value>,
    ) -> Answer {
        let mut messages = vec![json!({"role": "system", "content": format!("{RUN_PREFIX}{run}")})];
        messages.extend(problem.messages());
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "temperature": 1.0,
            "stream": false,
        });
        if let Some(ext) = extension {
            body["choicewise"] = ext.clone();
        }
        let asked = Instant::now();
        let ms = |at: Instant| at.duration_since(asked).as_secs_f64() * 1000.0;
        let failed = |why: String| Answer {
            got: String::new(),
            first_byte_ms: ms(Instant::now()),
            answer_ms: ms(Instant::now()),
            right: false,
            failed: Some(why),
            undecided: false,
        };
        let mut response = match self.client.post(url).json(&body).send().await {
            Ok(r) => r,
            Err(e) => return failed(e.to_string()),
        };
        let status = response.status();
        let mut bytes = Vec::new();
        let mut first_byte = None;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    first_byte.get_or_insert_with(Instant::now);
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return failed(e.to_string()),
            }
        }
        let done = Instant::now();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !status.is_success() {
            return failed(format!("{status}: {text}"));
        }
        let Ok(answer) = serde_json::from_str::<Value>(&text) else {
            return failed(format!("not JSON: {text}"));
        };
        let content = answer
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or("");
        let got = self.rule.of(content);
        Answer {
            right: problem.is_right(&got),
            got,
            first_byte_ms: ms(first_byte.unwrap_or(done)),
            answer_ms: ms(done),
            failed: None,
            undecided: answer.pointer("/choicewise/vote/decided") == Some(&Value::Bool(false)),
        }
    }
}
