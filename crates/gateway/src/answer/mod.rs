//! A request of any of the three APIs, from its body to its answer: read, checked, its
//! policy applied, its samples opened and picked, answered in its API's terms.
//!
//! Its parts: [`respond`] answers a pick, streamed through [`write`]'s loop or as one object,
//! framed by [`chat`] (Chat Completions) or [`translated`] (Messages, Responses); [`ending`]
//! decides how each output and the answer ended; [`closing`] cuts answers at their deadline
//! or the gateway's shutdown; [`finish`] is the request's record.

pub(crate) mod chat;
pub(crate) mod closing;
pub(crate) mod ending;
pub(crate) mod finish;
pub(crate) mod respond;
pub(crate) mod translated;
pub(crate) mod write;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use choicewise_client::Dialect;
use choicewise_core::chunks::Envelope;

use crate::admission::layers;
use crate::answer::ending::ErrorType;
use crate::answer::finish::Finish;
use crate::error::ApiError;
use crate::request::ChatRequest;
use crate::state::Gateway;
use crate::upstream::engine::{Picked, Run};
use crate::upstream::open;
use crate::{HostedTools, ingress, listen};

/// A request of any of the three APIs (`api`: the client's, `Dialect::Chat` for Chat
/// Completions), answered in that
/// API's terms, its failures included. Its record ([`Finish`]) is made as it arrives, filled
/// in as it is served, and goes with its answer's body, which records it when it ends.
pub(crate) async fn answer(gw: Gateway, request: axum::extract::Request, api: Dialect) -> Response {
    let (parts, body) = request.into_parts();
    let peer = parts.extensions.get::<listen::Peer>().map(|p| p.0);
    let mut finish = Finish::new(&gw, &parts.headers, peer);
    finish.api(layers::api_label(api));
    let mut streamed_responses = None;
    let served = serve_chat(&gw, body, &mut finish, api, &mut streamed_responses).await;
    let label = layers::ModelLabel(finish.model().to_string());
    let tries = finish.tries();
    let mut response = match served {
        Ok(ready) => ready.answer(finish).await,
        Err(e) => {
            finish.refused(&e);
            // A streamed Responses request whose prompt overflowed the model's context: the
            // stream OpenAI answers then, which Codex CLI recognises.
            let overflow = (streamed_responses.as_ref())
                .and_then(|reply| ingress::responses::overflow_answer(reply, &e));
            overflow.unwrap_or_else(|| layers::shaped(api, e))
        }
    };
    // Every answer's headers are sent after its first tries ended: how many there were.
    if let Some(tries) = tries {
        let count = tries.lock().map_or(0, |t| t.len());
        response
            .headers_mut()
            .insert("x-choicewise-tries", count.into());
    }
    response.extensions_mut().insert(label);
    response
}

/// Bodies of at most this many bytes without a `vote_by` are parsed on the worker that
/// read them (see [`parses_inline`]).
const INLINE_PARSE_BYTES: usize = 16 * 1024;

/// Whether a request body is parsed on the worker: at most [`INLINE_PARSE_BYTES`], and no
/// `vote_by` to compile, nor a `\u` escape that could spell one.
fn parses_inline(body: &[u8]) -> bool {
    let has = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    body.len() <= INLINE_PARSE_BYTES && !has(b"vote_by") && !has(b"\\u")
}

/// Serves a request up to its answer: read, checked, its policy applied, its samples opened
/// and picked; `finish` learns what the request's record needs as it goes, and
/// `streamed_responses` the answer's `Reply` once a streamed Responses request is read (its
/// errors after that may be answered as a stream).
async fn serve_chat(
    gw: &Gateway,
    body: Body,
    finish: &mut Finish,
    api: Dialect,
    streamed_responses: &mut Option<ingress::Reply>,
) -> Result<Ready, ApiError> {
    let arrived = finish.arrived();
    // The key was checked and a slot taken by the layers (`Gateway::router`).
    let bytes = layers::read_body(gw, body).await?;
    let len = bytes.len();
    let inline = parses_inline(&bytes);
    let limits = gw.inner.limits.clone();
    let picks = gw.inner.picks.clone();
    // A refusal carries the model the body names, when it could be read: a refused Messages or
    // Responses request is counted in the metrics under its model.
    // First the one rule of strings, numbers and depth (`wellformed`), whichever API the
    // model's upstreams speak.
    let parse = move || match (crate::wellformed::check(&bytes, api), api) {
        (Err(e), _) => Err(Box::new((e, None))),
        (Ok(()), Dialect::Chat) => Ok::<_, Box<(ApiError, Option<String>)>>((
            ChatRequest::parse(&bytes, &limits)
                .and_then(|r| r.with_model(&picks, &limits))
                .map_err(|e| Box::new((e, None)))?,
            None,
            None,
            Translation::default(),
        )),
        (Ok(()), api) => {
            let body =
                ingress::parse_body(&bytes).map_err(|e| Box::new((ApiError::from(e), None)))?;
            let asked = (body.get("model")).and_then(|m| serde_json::from_slice::<String>(m).ok());
            let refused = |e: ApiError| Box::new((e, asked.clone()));
            let translated =
                ingress::to_chat(api, &body).map_err(|e| refused(ApiError::from(e)))?;
            let native =
                (!translated.native.is_empty()).then(|| Arc::new((api, translated.native)));
            // A streamed Messages answer names the prompt's tokens in its first event.
            let prompt =
                (api == Dialect::Anthropic && translated.stream).then(|| translated.chat.clone());
            Ok((
                ChatRequest::from_fields(translated.chat, &limits)
                    .and_then(|r| r.with_model(&picks, &limits))
                    .map_err(refused)?,
                Some(translated.reply),
                native,
                Translation {
                    hosted: translated.hosted,
                    prompt,
                },
            ))
        }
    };
    // Parsing a body of up to max_body_bytes (translating it from the client's API) and
    // compiling its vote_by take CPU time: on a blocking thread, never on the workers that
    // serve every connection. A small body without a vote_by parses in microseconds, less
    // than the two thread hand-offs of the blocking pool: on the worker. Either way a panic
    // while parsing is the client's 400, not a dropped connection.
    let unparsed = || Box::new((ApiError::invalid("the request could not be parsed"), None));
    let parsed = if inline {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse))
            .unwrap_or_else(|_| Err(unparsed()))
    } else {
        (tokio::task::spawn_blocking(parse).await).unwrap_or_else(|_| Err(unparsed()))
    };
    let (req, reply, native, translation) = match parsed {
        Ok(parsed) => parsed,
        Err(refused) => {
            let (e, asked) = *refused;
            if let Some(model) = asked.filter(|m| gw.inner.models.contains_key(m)) {
                finish.named(model);
            }
            return Err(e);
        }
    };
    if api == Dialect::Responses && req.stream {
        streamed_responses.clone_from(&reply);
    }
    // Parsed: the memory mark checked again before the request goes on.
    layers::parsed(gw, len)?;
    finish.asked(&req.model);
    let Some(model) = gw.inner.models.get(&req.model).cloned() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "the model {:?} does not exist here (GET /v1/models lists them)",
                req.model
            ),
        )
        .code("model_not_found"));
    };
    finish.named(req.model.clone());
    // Hosted tools the gateway cannot run: left out, or the request refused, as the model
    // says.
    let dropped = match gw.inner.hosted_tools.get(&req.model) {
        Some(HostedTools::Refuse) => match translation.hosted.first() {
            Some(tool) => return Err(tool.refused(&req.model).into()),
            None => None,
        },
        _ => {
            let mut kinds: Vec<&str> = Vec::new();
            for tool in &translation.hosted {
                if !kinds.contains(&tool.kind.as_str()) {
                    kinds.push(&tool.kind);
                }
            }
            (!kinds.is_empty()).then(|| kinds.join(","))
        }
    };
    if let Some(dropped) = &dropped {
        tracing::info!(
            model = %req.model,
            dropped_tools = %dropped,
            "hosted tools left out of the upstream request (hosted_tools = \"drop\")"
        );
    }
    let estimate = translation.prompt.map(|chat| {
        let upstream_model =
            (model.routes.first()).map_or(model.name.as_str(), |r| r.model.as_str());
        let encoding = choicewise_usage::encoding_for_model(upstream_model).name;
        tokio::task::spawn_blocking(move || {
            let fields = chat.iter().map(|(k, v)| (k.as_str(), &v[..]));
            choicewise_usage::count_prompt_fields(encoding, fields)
                .ok()
                .map(|count| count.total)
        })
    });
    let apis: Vec<Dialect> = model.routes.iter().map(|u| u.api).collect();
    let budget = model.budget.clone();
    let opener = open::Opener {
        models: gw.inner.models.clone(),
        model,
        body: Arc::new(req.body.clone()),
        native,
        logprobs: req.policy.confidence().map(|c| c.top_logprobs),
        metrics: gw.inner.metrics.clone(),
        budget,
        tries: Arc::default(),
        limits_set: Arc::default(),
        client: finish.client(),
        sent: Arc::default(),
        max_requests: gw.inner.limits.max_upstream_requests_per_request,
        bodies: Arc::default(),
    };
    finish.opening(opener.tries.clone(), opener.limits_set.clone());
    // Everything the request does ends by its deadline: opening its first samples, the pick,
    // the answer (`closing`). The pick's own deadline (`deadline_ms`) counts from the
    // request's start too: opening its samples and the pick end by it.
    let deadline = arrived + Duration::from_secs_f64(gw.inner.limits.request_deadline_s);
    let pick_deadline = (req.policy.deadline())
        .map(|d| (arrived + d, d))
        .filter(|(at, _)| *at < deadline);
    let picked_by = pick_deadline.map_or(deadline, |(at, _)| at);
    let request_id = finish.request_id().to_string();
    let past_deadline = |while_: &str| {
        let (stated, key) = match pick_deadline {
            Some((_, d)) => (format!("{} ms", d.as_millis()), "deadline_ms"),
            None => (
                format!("{}s", gw.inner.limits.request_deadline_s),
                "request_deadline_s",
            ),
        };
        tracing::warn!(
            request_id = %request_id,
            model = %req.model,
            deadline = %stated,
            "the request passed its deadline ({key}) {while_}"
        );
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            format!(
                "model {:?}: the request passed its deadline ({stated}, {key}) {while_}",
                req.model
            ),
        )
        .code("request_deadline")
    };
    let mut run = match tokio::time::timeout_at(picked_by.into(), Run::start(opener, &req)).await {
        Ok(run) => run?,
        Err(_) => return Err(past_deadline("while its first samples were opened")),
    };
    let span = match (&gw.inner.traces, finish.take_parent()) {
        (Some(traces), Some(parent)) => Some(traces.request(parent, &req, apis.into_iter())),
        _ => None,
    };
    // The span names how each sample ended, and its parts.
    run.keep_messages(span.is_some());
    let picked = run
        .pick(&req, picked_by.saturating_duration_since(Instant::now()))
        .await;
    let past_deadline = (picked.samples.is_empty() && picked.timed_out).then(|| {
        let reason = picked.reason.as_deref().unwrap_or("nothing was picked");
        past_deadline(&format!("before its pick decided: {reason}"))
    });
    let outputs =
        (req.policy.rule() != choicewise_core::PickRule::All).then(|| picked.samples.clone());
    finish.picked(outputs, span, run);
    if let Some(e) = past_deadline {
        finish.fail(ErrorType::RequestDeadline).await;
        return Err(e);
    }
    if picked.samples.is_empty() {
        finish.fail(ErrorType::NoChoice).await;
        let reason = picked
            .reason
            .clone()
            .unwrap_or_else(|| "nothing was picked".into());
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!("model {:?}: {reason}", req.model),
        )
        .code("no_choice"));
    }
    let envelope = Envelope::new(&req.model);
    finish.response_id(&envelope.id);
    let request = (finish.request_id(), req.model.as_str());
    let closing = write::Closing::new(
        gw.inner.closing.subscribe(),
        deadline,
        (request.0, request.1, gw.inner.limits.request_deadline_s),
    );
    Ok(Ready {
        picked,
        req,
        reply,
        estimate,
        envelope,
        closing,
        dropped,
    })
}

/// A request ready to be answered: its pick made, what its answer is made of.
struct Ready {
    picked: Picked,
    req: ChatRequest,
    /// The client's API, when it is not Chat Completions.
    reply: Option<ingress::Reply>,
    /// A streamed Messages answer's prompt tokens, being counted.
    estimate: Option<tokio::task::JoinHandle<Option<u64>>>,
    envelope: Envelope,
    closing: write::Closing,
    /// The hosted tools left out of the upstream request.
    dropped: Option<String>,
}

impl Ready {
    /// The answer, in the client's API, streamed or not; `finish` goes with its body.
    async fn answer(self, finish: Finish) -> Response {
        let Ready {
            picked,
            req,
            reply,
            estimate,
            envelope,
            closing,
            dropped,
        } = self;
        let api = match reply {
            None => respond::Api::Chat(envelope),
            Some(reply) => respond::Api::Translated { reply, estimate },
        };
        let mut response = respond::respond(finish, picked, req, api, closing).await;
        if let Some(value) = dropped.and_then(|d| axum::http::HeaderValue::from_str(&d).ok()) {
            response
                .headers_mut()
                .insert("x-choicewise-dropped-tools", value);
        }
        response
    }
}

/// What a translated request (Messages, Responses) brings besides its Chat Completions body.
#[derive(Default)]
struct Translation {
    /// Its hosted tools, left out of the body.
    hosted: Vec<ingress::Hosted>,
    /// A streamed Messages request's Chat Completions body, whose prompt tokens are estimated
    /// for its `message_start`.
    prompt: Option<crate::request::Fields>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bodies_without_a_vote_key_parse_on_the_worker() {
        let small = br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
        assert!(parses_inline(small));
        let vote = br#"{"model": "m", "choicewise": {"select": "vote", "vote_by": "(\\d+)"}}"#;
        assert!(!parses_inline(vote), "a vote_by compiles off the workers");
        let escaped = br#"{"model": "m", "choicewise": {"vote\u005fby": "x"}}"#;
        assert!(!parses_inline(escaped), "an escape could spell vote_by");
        let mut large = br#"{"model": "m", "messages": [{"role": "user", "content": ""#.to_vec();
        large.resize(INLINE_PARSE_BYTES + 1, b'a');
        assert!(
            !parses_inline(&large),
            "a large body parses off the workers"
        );
    }
}
