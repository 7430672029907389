//! The answer's bytes over every API × streamed or not × how its choices ended, without a
//! server: each case's choices come from an upstream's SSE text parsed by the library, go
//! through the same endings, framings and one-object writers the gateway answers with, and
//! their bytes are checked: the facts each case must show, and the whole answer against
//! `answers.txt` (`CHOICEWISE_BLESS=1` rewrites it after a deliberate change).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::http::StatusCode;
use choicewise_core::chunks::Envelope;
use choicewise_core::{Completions, Source};
use futures::StreamExt;
use serde_json::json;

use crate::answer::ending::{AnswerEnd, Cut, Initiator, OutputEnd, Seen, decide};
use crate::answer::respond::{Answer, one_object};
use crate::answer::translated::ApiFraming;
use crate::answer::write::{Endings, Framing, Tail, output};
use crate::api::chat::Chat;
use crate::api::gemini::{Gemini, GeminiReply};
use crate::api::messages::{Messages, MessagesEncoder};
use crate::api::responses::Responses;
use crate::api::{ClientApi, Reply};
use crate::request::ChatRequest;
use crate::upstream::engine::{AnswerUsage, ChoiceTokens, Summary, TrySummary, UsageParts};
use crate::upstream::stop::{PAST_DEADLINE, SHUT_DOWN};

/// How the case's output choices end.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ending {
    Stop,
    Length,
    ToolCalls,
    UpstreamError,
    NoFinishReason,
    Missing,
    ShutDown,
    PastDeadline,
    /// Two output choices (one for Messages and Responses), each failed upstream.
    AllFailed,
}

const ENDINGS: [Ending; 9] = [
    Ending::Stop,
    Ending::Length,
    Ending::ToolCalls,
    Ending::UpstreamError,
    Ending::NoFinishReason,
    Ending::Missing,
    Ending::ShutDown,
    Ending::PastDeadline,
    Ending::AllFailed,
];

const CONTENT: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"}}]}\n\n";
const CONTENT_1: &str =
    "data: {\"choices\":[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"Yo\"}}]}\n\n";
const TOOL_CALL: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}\n\n";
const ERROR: &str = "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n";

const DONE: &str = "data: [DONE]\n\n";

fn finish(reason: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{reason}\"}}]}}\n\n{DONE}"
    )
}

impl Ending {
    /// The upstream's answer; the cut, if the answer is cut short.
    fn upstream(self) -> (String, Option<Cut>) {
        match self {
            Ending::Stop | Ending::Missing => (format!("{CONTENT}{}", finish("stop")), None),
            Ending::Length => (format!("{CONTENT}{}", finish("length")), None),
            Ending::ToolCalls => (format!("{TOOL_CALL}{}", finish("tool_calls")), None),
            Ending::UpstreamError => (format!("{CONTENT}{ERROR}"), None),
            Ending::NoFinishReason => (format!("{CONTENT}{DONE}"), None),
            Ending::ShutDown => (CONTENT.to_string(), Some(Cut::ShutDown)),
            Ending::PastDeadline => (CONTENT.to_string(), Some(Cut::PastDeadline)),
            Ending::AllFailed => (format!("{CONTENT}{CONTENT_1}{ERROR}"), None),
        }
    }

    /// The output choices' indexes in the upstream's answer (`None`: missing from it), as
    /// `A` answers them.
    fn indexes<A: ClientApi>(self) -> Vec<Option<u32>> {
        match self {
            Ending::Missing => vec![None],
            Ending::AllFailed if !A::ONE_OUTPUT => vec![Some(0), Some(1)],
            _ => vec![Some(0)],
        }
    }
}

/// A client API as the cases answer in it: what its answer needs of a request for `m`.
trait Case: ClientApi {
    fn reply() -> Self::Reply;
}

impl Case for Chat {
    fn reply() {}
}

impl Case for Messages {
    fn reply() -> Reply {
        Reply {
            model: "m".into(),
            ..Reply::default()
        }
    }
}

impl Case for Responses {
    fn reply() -> Reply {
        <Messages as Case>::reply()
    }
}

impl Case for Gemini {
    fn reply() -> GeminiReply {
        GeminiReply {
            sse: true,
            thoughts: false,
        }
    }
}

/// The case's answer as `A` writes it.
fn api_of<A: Case>() -> Answer<A> {
    Answer {
        reply: A::reply(),
        envelope: Envelope {
            id: Arc::from("chatcmpl-test"),
            created: 0,
            model: Arc::from("m"),
        },
        estimate: None,
    }
}

/// The case's request: for `m`, streamed, its usage asked for.
fn request() -> ChatRequest {
    let body = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "stream": true, "stream_options": {"include_usage": true}}"#;
    let limits = crate::Limits::default();
    ChatRequest::parse(&axum::body::Bytes::from(body), &limits).unwrap()
}

fn completions(sse: &str, cut: Option<Cut>) -> Completions {
    let reads = futures::stream::iter([Ok::<_, std::io::Error>(sse.to_string())]);
    match cut {
        // Cut short: the upstream is still open.
        Some(_) => Completions::new(Source::sse(reads.chain(futures::stream::pending()))),
        None => Completions::new(Source::sse(reads)),
    }
}

/// The streamed answer's bytes, and its verdict.
async fn streamed<A: Case>(ending: Ending) -> (String, AnswerEnd) {
    let (sse, cut) = ending.upstream();
    let indexes = ending.indexes::<A>();
    let Answer {
        reply, envelope, ..
    } = api_of::<A>();
    let mut framing = A::framing(reply, &envelope, &request(), indexes.len(), None);
    let mut write = Vec::new();
    framing.open(&mut write);
    let mut endings = Endings::new(indexes.len());
    for (o, index) in indexes.iter().enumerate() {
        let mut outs = output(completions(&sse, cut), *index);
        loop {
            // A cut answer's upstream stays open: what it sent, then the cut.
            let next = match cut {
                Some(_) => tokio::time::timeout(std::time::Duration::from_millis(200), outs.next())
                    .await
                    .ok()
                    .flatten(),
                None => outs.next().await,
            };
            let Some(out) = next else { break };
            endings.say(&mut framing, o, out, &mut write);
        }
    }
    let ends = endings.cut(&mut framing, cut, &mut write);
    let tail = Tail {
        usage: Some(usage()),
        stop_reason: None,
        summary: Some(summary()),
    };
    let answer = AnswerEnd::of(&ends, true);
    framing.tail(&ends, &answer, tail, &mut write);
    (String::from_utf8(write).unwrap(), answer)
}

/// The non-streamed answer's bytes (`200 ...`, or its status with its error body), and its
/// verdict.
async fn whole<A: Case>(ending: Ending) -> (String, AnswerEnd) {
    let (sse, cut) = ending.upstream();
    let mut choices = Vec::new();
    for index in ending.indexes::<A>() {
        let completions = completions(&sse, cut);
        let choice = match index {
            Some(index) => completions.choice(index).await,
            None => None,
        };
        if let Some(choice) = &choice {
            if let Some(cut) = cut {
                // What the upstream sent is read; then the cut cancels the choice.
                let mut content = choice.content();
                let _ = content.next().await;
                choice.cancel_for(Initiator::Gateway(cut).reason());
            }
            let _ = choice.message().await;
        }
        let seen = choice.as_ref().map(Seen::of);
        let end = decide(seen.as_ref(), cut);
        choices.push((choice, end));
    }
    let ends: Vec<OutputEnd> = choices.iter().map(|(_, end)| end.clone()).collect();
    let answer = AnswerEnd::of(&ends, false);
    let object = one_object(
        &api_of::<A>(),
        "m",
        false,
        &choices,
        &answer,
        &usage(),
        Some(&summary()),
    );
    let text = match object {
        Ok(body) => format!("200 {}", String::from_utf8(body.to_vec()).unwrap()),
        Err((status, body)) => format!("{} {body}", status.as_u16()),
    };
    (text, answer)
}

/// The answer's usage: 3 prompt tokens, 1 completion token, one sample's part.
fn usage() -> AnswerUsage {
    AnswerUsage {
        choicewise: UsageParts {
            estimated: false,
            per_choice: vec![ChoiceTokens {
                completion_tokens: 1,
                estimated: false,
                index: Some(0),
                prompt_tokens: 3,
                sample: 0,
            }],
        },
        completion_tokens: 1,
        prompt_tokens: 3,
        total_tokens: 4,
    }
}

/// The pick's summary.
fn summary() -> Summary {
    Summary {
        decision: Some("all"),
        ..Summary::default()
    }
}

/// Ids and times made when the answer is written, made stable.
fn stable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("_cw") {
        out.push_str(&rest[..at]);
        out.push_str("_ID");
        rest = rest[at + 3..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
    }
    out.push_str(rest);
    let mut text = out;
    let key = "\"created_at\":";
    let mut from = 0;
    while let Some(at) = text[from..].find(key) {
        let start = from + at + key.len();
        let end = start
            + text[start..]
                .chars()
                .take_while(char::is_ascii_digit)
                .count();
        text.replace_range(start..end, "0");
        from = start;
    }
    text
}

/// The verdict's rule for each ending, the same in every API, streamed or not: the log
/// label (and metrics outcome), and the status a non-streamed answer is sent with.
fn verdict(ending: Ending) -> (&'static str, u16) {
    use Ending::*;
    match ending {
        Stop | Length | ToolCalls => ("complete", 200),
        UpstreamError | NoFinishReason | Missing | AllFailed => ("every_choice_failed", 502),
        ShutDown => ("shut_down", 503),
        PastDeadline => ("request_deadline", 504),
    }
}

/// What each case's answer must say (and must not), by its API's label.
fn facts(api: &str, stream: bool, ending: Ending) -> (Vec<String>, Vec<&'static str>) {
    use Ending::*;
    let no_finish = "the upstream ended the choice without a finish reason";
    let missing = "the upstream ended without this choice";
    let s = |t: &str| t.to_string();
    let (label, status) = verdict(ending);
    let code = format!(r#""code":"{label}""#);
    match (api, stream, ending) {
        ("chat", true, Stop) => (
            vec![s(r#""finish_reason":"stop""#), s("data: [DONE]")],
            vec!["\"error\":{"],
        ),
        ("chat", true, Length) => (vec![s(r#""finish_reason":"length""#)], vec!["\"error\":{"]),
        ("chat", true, ToolCalls) => (
            vec![s(r#""finish_reason":"tool_calls""#), s(r#""name":"f""#)],
            vec!["\"error\":{"],
        ),
        // No choice finished: the error event, then [DONE], whatever the cause.
        ("chat", true, ending) => {
            let why = match ending {
                UpstreamError | AllFailed => "boom",
                NoFinishReason => no_finish,
                Missing => missing,
                ShutDown => SHUT_DOWN,
                _ => PAST_DEADLINE,
            };
            (vec![s(why), code, s("data: [DONE]")], vec![])
        }
        ("chat", false, Stop) => (vec![s("200 "), s(r#""finish_reason":"stop""#)], vec![]),
        ("chat", false, Length) => (vec![s("200 "), s(r#""finish_reason":"length""#)], vec![]),
        ("chat", false, ToolCalls) => (
            vec![s("200 "), s(r#""finish_reason":"tool_calls""#)],
            vec![],
        ),
        ("messages", true, Stop) => (
            vec![s(r#""stop_reason":"end_turn""#), s("event: message_stop")],
            vec!["event: error"],
        ),
        ("messages", true, Length) => (
            vec![s(r#""stop_reason":"max_tokens""#)],
            vec!["event: error"],
        ),
        ("messages", true, ToolCalls) => (
            vec![s(r#""stop_reason":"tool_use""#), s(r#""type":"tool_use""#)],
            vec!["event: error"],
        ),
        ("gemini", _, Stop | Length | ToolCalls) => {
            let reason = match ending {
                Length => r#""finishReason":"MAX_TOKENS""#,
                _ => r#""finishReason":"STOP""#,
            };
            let mut shows = vec![s(reason), s(r#""usageMetadata":{"promptTokenCount":3"#)];
            if ending == ToolCalls {
                shows.push(s(
                    r#"{"functionCall":{"id":"call_1","name":"f","args":{"a":1}}}"#,
                ));
            }
            if !stream {
                shows.push(s("200 "));
            }
            (shows, vec!["\"error\":{", "OTHER"])
        }
        // No candidate finished: each ends with OTHER and why, then Google's error record.
        ("gemini", true, ending) => {
            let why = match ending {
                UpstreamError | AllFailed => "boom",
                NoFinishReason => no_finish,
                Missing => missing,
                ShutDown => SHUT_DOWN,
                _ => PAST_DEADLINE,
            };
            let error = format!(r#"data: {{"error":{{"code":{status},"#);
            (
                vec![s(why), s(r#""finishReason":"OTHER""#), error],
                vec!["[DONE]"],
            )
        }
        (_, true, ending) => {
            let (name, done) = match api {
                "messages" => ("event: error", "event: message_stop"),
                _ => ("event: response.failed", "event: response.completed"),
            };
            match ending {
                Stop | ToolCalls => (vec![s("event: response.completed")], vec![name]),
                Length => (
                    vec![s("event: response.incomplete"), s("max_output_tokens")],
                    vec![name],
                ),
                UpstreamError | AllFailed => (vec![s(name), s("boom")], vec![done]),
                NoFinishReason => (vec![s(name), s(no_finish)], vec![done]),
                Missing => (vec![s(name), s(missing)], vec![done]),
                ShutDown => (vec![s(name), s(SHUT_DOWN)], vec![done]),
                PastDeadline => (vec![s(name), s(PAST_DEADLINE)], vec![done]),
            }
        }
        (_, false, Stop | Length | ToolCalls) => {
            let shows = match (api, ending) {
                ("messages", Stop) => r#""stop_reason":"end_turn""#,
                ("messages", Length) => r#""stop_reason":"max_tokens""#,
                ("messages", _) => r#""stop_reason":"tool_use""#,
                (_, Length) => r#""status":"incomplete""#,
                (_, Stop) => r#""status":"completed""#,
                _ => r#""type":"function_call""#,
            };
            (vec![s("200 "), s(shows)], vec![])
        }
        // No choice finished: the verdict's error, in the API's shape and status.
        (_, false, ending) => {
            let why = match ending {
                UpstreamError | AllFailed => "boom",
                NoFinishReason => no_finish,
                Missing => missing,
                ShutDown => SHUT_DOWN,
                _ => PAST_DEADLINE,
            };
            (vec![format!("{status} "), s(why)], vec![])
        }
    }
}

/// Every case of `A`, checked, and written to `all`.
async fn cases<A: Case>(all: &mut String) {
    let api = A::LABEL;
    for stream in [true, false] {
        for ending in ENDINGS {
            let (bytes, answer) = match stream {
                true => streamed::<A>(ending).await,
                false => whole::<A>(ending).await,
            };
            let bytes = stable(&bytes);
            let case = format!("{api} stream={stream} {ending:?}");
            let (shows, never) = facts(api, stream, ending);
            for text in &shows {
                assert!(
                    bytes.contains(text.as_str()),
                    "{case}: no {text:?} in\n{bytes}"
                );
            }
            for text in never {
                assert!(!bytes.contains(text), "{case}: {text:?} in\n{bytes}");
            }
            // One verdict per ending, whatever the API, streamed or not.
            let (label, status) = verdict(ending);
            assert_eq!(answer.label(), label, "{case}:\n{bytes}");
            assert_eq!(
                answer.span_error(),
                (status != 200).then_some(label),
                "{case}"
            );
            let expected = (!stream).then(|| StatusCode::from_u16(status).unwrap());
            assert_eq!(answer.status(), expected, "{case}");
            if !stream {
                assert!(bytes.starts_with(&format!("{status} ")), "{case}: {bytes}");
            }
            writeln!(all, "== {case}\n{bytes}").unwrap();
        }
    }
}

#[tokio::test]
async fn every_api_streamed_or_not_writes_each_ending_as_decided() {
    let mut all = String::new();
    cases::<Chat>(&mut all).await;
    cases::<Messages>(&mut all).await;
    cases::<Responses>(&mut all).await;
    cases::<Gemini>(&mut all).await;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api/answers/answers.txt");
    if std::env::var_os("CHOICEWISE_BLESS").is_some() {
        std::fs::write(path, &all).unwrap();
    }
    let expected = std::fs::read_to_string(path).unwrap();
    assert!(
        expected == all,
        "the answers differ from answers.txt:\n{all}"
    );
}

#[test]
fn a_decided_ending_is_what_the_framings_write() {
    // The Messages framing writes the ending it is given, not one of its own.
    let mut framing = ApiFraming::new(Box::new(MessagesEncoder::new(&Reply {
        model: "m".into(),
        ..Reply::default()
    })));
    let mut write = Vec::new();
    framing.open(&mut write);
    let ends = [OutputEnd::Stopped(Initiator::Gateway(Cut::PastDeadline))];
    framing.tail(
        &ends,
        &AnswerEnd::of(&ends, true),
        Tail::default(),
        &mut write,
    );
    let text = String::from_utf8(write).unwrap();
    assert!(
        text.contains("event: error") && text.contains(PAST_DEADLINE),
        "{text}"
    );
}

/// A vote's tally as core decides it: two samples say 4, one says 5.
fn a_tally() -> choicewise_core::select::Tally {
    let answer = |a: &'static str| {
        let chunk = format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"
        );
        Source::sse(futures::stream::iter([Ok::<_, std::io::Error>(chunk)])).n(1)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let c = Completions::builder().fan_out([answer("4"), answer("5"), answer("4")]);
        let key = |m: &choicewise_core::ChoiceOutput| m.message.content.clone();
        c.vote(key).await.vote.unwrap()
    })
}

#[test]
fn the_usage_and_the_summary_are_written_as_the_extension_states_them() {
    // The objects the answers carried before they were types, field for field.
    let usage = usage();
    let expected = json!({
        "prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4,
        "choicewise": {
            "per_choice": [{"index": 0, "sample": 0, "prompt_tokens": 3, "completion_tokens": 1,
                            "estimated": false}],
            "estimated": false,
        },
    });
    assert_eq!(serde_json::to_string(&usage).unwrap(), expected.to_string());
    let pick = Summary {
        cancelled: Some(vec![2]),
        confidence: Some(choicewise_core::confidence::ConfidenceReport::unavailable_for("why not")),
        decision: Some("vote"),
        reason: Some("why".into()),
        samples: Some(3),
        selected: Some(vec![0]),
        started: Some(3),
        tries: vec![TrySummary {
            outcome: "ok",
            sample: 0,
            upstream: "openai:m@127.0.0.1:1".into(),
        }],
        vote: Some(a_tally()),
    };
    // The tally as core writes it (the CLI's `--json` the same), its fields in their order.
    let expected = concat!(
        r#"{"cancelled":[2],"confidence":{"unavailable":"why not"},"decision":"vote","#,
        r#""reason":"why","samples":3,"selected":[0],"started":3,"#,
        r#""tries":[{"outcome":"ok","sample":0,"upstream":"openai:m@127.0.0.1:1"}],"#,
        r#""vote":{"decided":true,"key":"4","votes":2,"counted":3,"choices":3,"#,
        r#""tally":[{"key":"4","votes":2},{"key":"5","votes":1}]}}"#
    );
    assert_eq!(serde_json::to_string(&pick).unwrap(), expected);
    // A request without the extension: its tries alone.
    let tries = Summary {
        tries: pick.tries.clone(),
        ..Summary::default()
    };
    let expected = json!({"tries": [{"sample": 0, "upstream": "openai:m@127.0.0.1:1",
                                      "outcome": "ok"}]});
    assert_eq!(serde_json::to_string(&tries).unwrap(), expected.to_string());
}
