//! What a client API is to the answer: the contract each client API implements
//! ([`ClientApi`]: how its requests are read, its answers framed and its errors shaped;
//! [`Encoder`]: how one output choice's streamed answer is written), and what it hands the
//! answer ([`Read`], [`Refused`], [`Hosted`], [`Tokens`]). The client APIs themselves
//! (`crate::api`) implement it; the answer knows none of them by name.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
#[cfg(test)]
use choicewise_core::Usage;
use choicewise_core::chunks::Envelope;
use choicewise_core::{Choice, ChoiceEvent, Dialect};
use serde_json::{Map, Value};

use crate::Limits;
use crate::answer::ending::OutputEnd;
use crate::answer::write::Framing;
use crate::config::ModelPick;
use crate::error::{ApiError, IngressError};
use crate::request::{ChatRequest, Fields};
use crate::upstream::engine::{AnswerUsage, Summary};

/// A client API the gateway serves, as hyper's `Http1Transaction` is one side of HTTP/1:
/// how its requests are read, its answers framed and written, its errors shaped. Its route
/// is the one handler instantiated for it (`answer::<A>`).
pub(crate) trait ClientApi: Send + Sync + 'static {
    /// The `api` label of its requests in the metrics and the `request` log line: its
    /// endpoint's name (`chat`, `messages`, `responses`).
    const LABEL: &'static str;
    /// Its route, as the router writes it (`/v1/chat/completions`, or a pattern such as
    /// `/v1beta/models/{target}`).
    const ROUTE: &'static str;
    /// Its routes as a 404 names them to a client (its route, unless that is a pattern).
    const SHOWN: &'static [&'static str] = &[Self::ROUTE];
    /// What its bodies may cost to process, for the memory ceiling's admission.
    const COST: BodyCost;
    /// Whether its answer has one output choice (no `n`): the pick's first.
    const ONE_OUTPUT: bool;
    /// How its errors name a field's path (the rule of [`crate::wellformed`] says where a
    /// fault is in these terms).
    const PATHS: crate::wellformed::Paths = crate::wellformed::Paths::Indexed;
    /// What its answer needs of its request besides the request the gateway runs.
    type Reply: Clone + Send + Sync + 'static;
    /// Its streamed answer's framing.
    type Framing: Framing + Send + 'static;

    /// Where it lists the configured models in its own shape (`GET`; the one model of a name
    /// under it, `GET {MODELS}/{name}`, on its [`ROUTE`](Self::ROUTE)), if it does: Gemini's
    /// `/v1beta/models`. [`model`](Self::model) and [`models`](Self::models) write them.
    const MODELS: Option<&'static str> = None;

    /// Whether a request's path is of this API: its route's, or one under it (its errors
    /// are answered in this API's shape, its body costed as this API's).
    fn owns(path: &str) -> bool {
        path.starts_with(Self::ROUTE)
    }

    /// What a `POST` on its route asks of the gateway ([`Asks`]), from the path alone: its
    /// answer, unless the path names another of the API's methods (Gemini's `:countTokens`).
    fn asks(_path: &str) -> Asks {
        Asks::Answer
    }

    /// Reads a request for a token count ([`Asks::CountTokens`]) into the model it names and
    /// the Chat Completions fields whose prompt is counted (`limits`: the gateway's).
    fn read_count(_head: &Head, _bytes: &Bytes, _limits: &Limits) -> Result<Counted, Box<Refused>> {
        Err(Refused::new(
            ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "not_found_error",
                "this API counts no tokens here",
            ),
            None,
        ))
    }

    /// A token count's answer, in this API's shape.
    fn counted(tokens: u64) -> Value {
        serde_json::json!({ "input_tokens": tokens })
    }

    /// One configured model, in this API's shape ([`MODELS`](Self::MODELS)).
    fn model(name: &str) -> Value {
        serde_json::json!({ "id": name })
    }

    /// The configured models, `names` in the configuration's order, as this API lists them
    /// ([`MODELS`](Self::MODELS)).
    fn models(names: &[String]) -> Value {
        Value::Array(names.iter().map(|name| Self::model(name)).collect())
    }

    /// Reads a request (its `head`: method, path, query, headers; its body's `bytes`) into
    /// the Chat Completions request the gateway runs and what its answer needs (`limits`,
    /// `picks`: the gateway's, which check it); a refusal names the model the request asked
    /// for when it could be read.
    fn read(
        head: &Head,
        bytes: &Bytes,
        limits: &Limits,
        picks: &crate::config::ByName<ModelPick>,
    ) -> Result<Read<Self::Reply>, Box<Refused>>;

    /// The streamed answer's framing, of `outputs` output choices of `req`, answered as
    /// `envelope` (its id, creation time, model); `prompt_tokens`: the prompt's tokens, when
    /// counted for the answer's first event ([`Read::prompt`]).
    fn framing(
        reply: Self::Reply,
        envelope: &Envelope,
        req: &ChatRequest,
        outputs: usize,
        prompt_tokens: Option<u64>,
    ) -> Self::Framing;

    /// The `Content-Type` of its streamed answer: server-sent events, unless the request
    /// asked for another streamed form (Gemini's `streamGenerateContent` without `alt=sse`
    /// streams one JSON array).
    fn streamed_type(_reply: &Self::Reply) -> &'static str {
        "text/event-stream"
    }

    /// The non-streamed answer as one object, of its output `choices` as they ended (the
    /// verdict says they are an answer; `logprobs`: the client asked for them).
    fn object(
        reply: &Self::Reply,
        envelope: &Envelope,
        logprobs: bool,
        choices: &[(Option<Choice>, OutputEnd)],
        usage: &AnswerUsage,
        summary: Option<&Summary>,
    ) -> axum::body::Bytes;

    /// One of the gateway's errors as its JSON body in this API's shape: the same status
    /// and message.
    fn error_body(error: &ApiError) -> Value;

    /// An error answered in this API's shape, with its headers (`Retry-After` when it has
    /// one, and its own).
    fn shaped(error: ApiError) -> Response {
        let mut response = (error.status, axum::Json(Self::error_body(&error))).into_response();
        error.head(&mut response);
        response
    }

    /// What of a request read its errors need, when they are answered otherwise than
    /// [`shaped`](Self::shaped) (`stream`: the client asked for a streamed answer).
    fn kept_for_errors(_reply: &Self::Reply, _stream: bool) -> Option<Self::Reply> {
        None
    }

    /// An error of a request (`kept`: what [`kept_for_errors`](Self::kept_for_errors) kept
    /// of it, once it was read), answered.
    fn refused(_kept: Option<&Self::Reply>, error: ApiError) -> Response {
        Self::shaped(error)
    }
}

/// What a `POST` on a client API's route asks of the gateway ([`ClientApi::asks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asks {
    /// An answer of the model: the route's own work.
    Answer,
    /// The prompt's tokens counted ([`ClientApi::read_count`], [`ClientApi::counted`]).
    CountTokens,
}

/// A token count's request read ([`ClientApi::read_count`]): the model it names and the Chat
/// Completions fields whose prompt is counted.
pub(crate) struct Counted {
    pub model: String,
    pub chat: Fields,
}

/// A request read by its [`ClientApi`]: the Chat Completions request the gateway runs, and
/// what its answer and its upstream requests need besides.
pub(crate) struct Read<R> {
    pub req: ChatRequest,
    pub reply: R,
    /// The client's own fields that an upstream of the API named takes as they are
    /// ([`Translated::native`](crate::api::Translated::native)).
    pub native: Option<Arc<(Dialect, Map<String, Value>)>>,
    /// Its hosted tools, left out of the request.
    pub hosted: Vec<Hosted>,
    /// The Chat Completions body whose prompt tokens are counted for the answer's first
    /// event (a streamed Messages answer's `message_start`).
    pub prompt: Option<Fields>,
}

/// A request refused while it was read, with the model its body names when that could be
/// read: a refused Messages or Responses request is counted in the metrics under its
/// model.
pub(crate) struct Refused {
    pub error: ApiError,
    pub asked: Option<String>,
}

impl Refused {
    pub fn new(error: impl Into<ApiError>, asked: Option<String>) -> Box<Refused> {
        Box::new(Refused {
            error: error.into(),
            asked,
        })
    }
}

/// A hosted tool of the request, left out of the Chat Completions body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hosted {
    /// Where it is, in the API's path notation (`tools[8].type`, `tools.2.type`).
    pub param: String,
    /// Its type (`web_search`, `web_search_20250305`, ...).
    pub kind: String,
}

impl Hosted {
    /// The 400 of a model whose `hosted_tools` is `"refuse"`.
    pub fn refused(&self, model: &str) -> IngressError {
        IngressError::unsupported(
            self.param.clone(),
            format!(
                "{:?} is a hosted tool, which this gateway cannot run (model {model:?} has hosted_tools = \"refuse\"; with \"drop\" it is left out)",
                self.kind
            ),
        )
    }
}

/// Writes one output choice's streamed answer in a client's API, as whole SSE frames
/// (`event: NAME\ndata: JSON\n\n`) appended to `out`: the API's block framing only; why
/// the choice ended is decided by [`crate::answer::ending::decide`] and written with
/// [`close`](Self::close).
///
/// Call `start` once, then `event` for each of the choice's events in order, then exactly
/// one of `failed`, `completed`, `close` and `end`. Each call is total: nothing panics, an
/// event that does not fit where it comes (after the finish, a fragment for a call already
/// closed) is dropped, and after the last frame nothing more is written.
pub(crate) trait Encoder: Send {
    /// The answer's opening frames (Anthropic `message_start`; Responses `response.created`
    /// and `response.in_progress`). Implied by the first other call if not made.
    fn start(&mut self, out: &mut Vec<u8>);

    /// The frames of one event: text, reasoning (when asked for), refusal, a tool call's
    /// start, argument fragments and end, the finish. Roles, log-probabilities, filter
    /// annotations and warnings show nothing.
    fn event(&mut self, event: &ChoiceEvent, out: &mut Vec<u8>);

    /// The choice ended without finishing, as `end` (its decided ending, typed: an
    /// upstream's failure with its error, or who stopped it) says: Anthropic's `error`
    /// event, Responses' `response.failed`, each with the ending's words and what its cause
    /// means in the API's terms; `choicewise` rides on it when given. The last frame.
    fn failed(&mut self, end: &OutputEnd, choicewise: Option<&Summary>, out: &mut Vec<u8>);

    /// The end of a choice that finished with `reason`: the open block or item closed, then
    /// Anthropic's `message_delta` (its `stop_reason`, the usage) and `message_stop`, or
    /// Responses' `response.completed` (`response.incomplete` for a `length` or
    /// `content_filter` finish) with the usage and every output item. `stop_reason` is the
    /// provider's own when known (`ChoiceOutput::stop_reason`: Anthropic's `stop_sequence`
    /// tells a stop sequence from an end of turn). `choicewise` rides on the last frame.
    fn completed(
        &mut self,
        reason: &str,
        usage: &Tokens,
        stop_reason: Option<&str>,
        choicewise: Option<&Summary>,
        out: &mut Vec<u8>,
    );

    /// The finish reason seen (a `Finished` event), if any.
    fn finish_reason(&self) -> Option<&choicewise_core::Text>;

    /// Writes the next piece of what an earlier call left owed (a Responses event that
    /// repeats a long text, written a bounded piece at a time); `false` when nothing is owed.
    /// Every call writes the first piece of what it owes; the rest waits for this, so that
    /// the answer holds one piece of such an event at a time, not the event whole.
    fn more(&mut self, _out: &mut Vec<u8>) -> bool {
        false
    }

    /// Whether the choice's finish has been seen (a `Finished` event).
    #[cfg(test)]
    fn finished(&self) -> bool {
        self.finish_reason().is_some()
    }

    /// The answer's last frames for the choice's decided ending: [`completed`](Self::completed)
    /// when it finished, [`failed`](Self::failed) with the ending when not.
    fn close(
        &mut self,
        end: &OutputEnd,
        usage: &Tokens,
        stop_reason: Option<&str>,
        choicewise: Option<&Summary>,
        out: &mut Vec<u8>,
    ) {
        match end {
            OutputEnd::Finished(reason) => {
                self.completed(reason, usage, stop_reason, choicewise, out);
            }
            other => self.failed(other, choicewise, out),
        }
    }

    /// The answer's end after the choice's events ended: its ending decided from what the
    /// encoder saw ([`crate::answer::ending::decide`]: a choice that never finished, or finished
    /// with `error`, fails), then [`close`](Self::close).
    #[cfg(test)]
    fn end(
        &mut self,
        usage: &Tokens,
        stop_reason: Option<&str>,
        choicewise: Option<&Summary>,
        out: &mut Vec<u8>,
    ) {
        let seen = crate::answer::ending::Seen {
            finish: self.finish_reason().cloned(),
            ..Default::default()
        };
        let end = crate::answer::ending::decide(Some(&seen), None);
        self.close(&end, usage, stop_reason, choicewise, out);
    }
}

/// An answer's token counts, as both APIs report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tokens {
    /// Prompt tokens, cached ones included (Chat Completions' `prompt_tokens`).
    pub input: u64,
    /// Output tokens (`completion_tokens`).
    pub output: u64,
    /// Of the prompt tokens, those read from a cache (`prompt_tokens_details.cached_tokens`).
    pub cached_input: u64,
    /// Of the output tokens, reasoning ones (`completion_tokens_details.reasoning_tokens`).
    pub reasoning: u64,
}

impl Tokens {
    /// From the gateway's own usage object (which counts no cached or reasoning tokens).
    pub fn from_answer(usage: &crate::upstream::engine::AnswerUsage) -> Tokens {
        Tokens {
            input: usage.prompt_tokens,
            output: usage.completion_tokens,
            ..Tokens::default()
        }
    }

    /// From the library's [`Usage`].
    #[cfg(test)]
    pub fn from_usage(usage: &Usage) -> Tokens {
        let detail = |outer: &str, inner: &str| {
            (usage.details.get(outer))
                .and_then(|d| d.get(inner))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        Tokens {
            input: usage.prompt_tokens,
            output: usage.completion_tokens,
            cached_input: detail("prompt_tokens_details", "cached_tokens"),
            reasoning: detail("completion_tokens_details", "reasoning_tokens"),
        }
    }
}

/// A request's head (method, path and query, headers), as a client API reads it.
pub(crate) type Head = axum::http::request::Parts;

/// What a client API's bodies may cost to process beyond their bytes, for the memory
/// ceiling's admission (`crate::admission::overload::cost`): the top-level fields its
/// handler reads entry by entry into something new (translated messages, the upstream's
/// body, the prompt's count), and the memory it takes per byte of those, in sixteenths (the
/// resident growth measured per body byte, docs/reliability.md, "The memory model",
/// rounded up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyCost {
    pub heavy: &'static [&'static str],
    pub sixteenths: u64,
}

impl BodyCost {
    /// A path of no client API: only its body counts.
    pub(crate) const NONE: BodyCost = BodyCost {
        heavy: &[],
        sixteenths: 0,
    };
}
