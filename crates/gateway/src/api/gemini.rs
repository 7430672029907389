//! Google's Gemini API in: `POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent` ([`Gemini`]), the model named in the path and streaming in the
//! method's name. A body is read into a Chat Completions request (`gemini/request.rs`), its
//! candidates answered as `GenerateContentResponse`s (`gemini/answer.rs`), its errors in
//! Google's shape (`{"error": {"code", "message", "status"}}`).
//!
//! | Gemini | Chat Completions |
//! |---|---|
//! | the path's model | `model` |
//! | `:streamGenerateContent` (`?alt=sse`: server-sent events; without it, one JSON array streamed as its records come) | `stream: true` |
//! | `contents` (role `user`, or none; `model`; the older `function`, as `user`) | messages, in order |
//! | `text` parts | text (a user's joined with its images as parts; a model's joined) |
//! | `inlineData` parts of an `image/*` type (user) | `image_url` parts with a `data:` URL |
//! | `functionCall` parts (model; `args` an object, `id` kept or made) | the assistant message's `tool_calls` (`arguments` as JSON text) |
//! | `functionResponse` parts (user) | `tool` messages before the user's other parts, each answering the call of its `id`, else the first unanswered call of its `name`; its `response` as JSON text |
//! | `thought` parts | dropped: no Chat Completions upstream takes them back |
//! | `systemInstruction` (its text parts, joined by a blank line) | a first `system` message |
//! | `generationConfig.candidateCount` | `n` |
//! | `temperature`, `topP`, `topK` (vLLM, llama.cpp and Anthropic take it), `seed`, `presencePenalty`, `frequencyPenalty` | `temperature`, `top_p`, `top_k`, `seed`, `presence_penalty`, `frequency_penalty` |
//! | `maxOutputTokens`, `stopSequences` | `max_tokens`, `stop` |
//! | `responseMimeType: "application/json"`; `responseJsonSchema`, or `responseSchema` (its OpenAPI type names lower-cased) | `response_format` `json_object`; `json_schema` named `response` |
//! | `thinkingConfig`: `thinkingBudget` above 0, `thinkingLevel`; `includeThoughts` | `reasoning_effort` (below 2048 `low`, below 4096 `medium`, else `high`; the level as it is); reasoning answered as `thought` parts |
//! | `tools[].functionDeclarations` (`parameters`, OpenAPI type names lower-cased; or `parametersJsonSchema` as sent) | function tools |
//! | other tools (`googleSearch`, `codeExecution`, `urlContext`, ...) | left out, or the request refused, as the model's `hosted_tools` says |
//! | `toolConfig.functionCallingConfig.mode` `AUTO` / `ANY` / `NONE` / `VALIDATED` (`allowedFunctionNames` of one name under `ANY`) | `tool_choice` `auto` / `required` / `none` / `auto` (that function) |
//! | `choicewise` | kept as sent |
//!
//! Ignored: `safetySettings`, `labels`, `serviceTier`, `store`, `thoughtSignature`,
//! `videoMetadata` and any field not named here. Refused (400 naming the field, status
//! `INVALID_ARGUMENT`): `cachedContent` (the gateway keeps no state), `fileData`,
//! `executableCode` and `codeExecutionResult` parts, `inlineData` that is not an image,
//! `responseLogprobs`, a `responseMimeType` other than text or JSON, `responseModalities` other
//! than text, `speechConfig`, `imageConfig`. Another method than these and `:countTokens`
//! (`:embedContent`, ...) is a 404 (`NOT_FOUND`).
//!
//! Beside the answers, the gateway's own services in Google's terms: `POST
//! /v1beta/models/{model}:countTokens` (its `contents`, or a whole `generateContentRequest`,
//! read as `generateContent` reads it: `gemini/count.rs`; answered `{"totalTokens": N}`,
//! counted by the gateway, as Messages' `count_tokens` estimates), and `GET /v1beta/models` and
//! `GET /v1beta/models/{model}` (the configured models as Google's `Model`: `name`
//! `models/NAME`, `supportedGenerationMethods`).

mod answer;
mod count;
mod generation;
mod request;

pub(crate) use answer::GeminiFraming;

use axum::http::StatusCode;
use bytes::Bytes;
use choicewise_core::Choice;
use choicewise_core::chunks::Envelope;
use serde_json::{Value, json};

use super::{Asks, BodyCost, ClientApi, Counted, Head, Read, Refused};
use crate::Limits;
use crate::answer::ending::OutputEnd;
use crate::config::ModelPick;
use crate::error::ApiError;
use crate::request::ChatRequest;
use crate::upstream::engine::{AnswerUsage, Summary};

/// The paths of Google's Gemini API (v1beta), under which a request's errors are answered
/// in Google's shape.
const PREFIX: &str = "/v1beta/";

/// Where the models' methods are: `/v1beta/models/{model}:{method}`.
const MODELS: &str = "/v1beta/models/";

/// Where Google serves them too, as v1 (google-genai asks there without `api_version`):
/// `/v1/models/{model}:{method}`, served as v1beta's.
pub(crate) const V1_MODELS: &str = "/v1/models/";

/// Whether `path` is a model's method under Gemini's v1 paths (a `:` after the model): the
/// OpenAI API's `/v1/models/{id}` names a model without one.
pub(crate) fn v1_method(path: &str) -> bool {
    path.strip_prefix(V1_MODELS)
        .is_some_and(|t| t.contains(':'))
}

/// Google's Gemini API: a request translated onto Chat Completions, every candidate
/// (`candidateCount`, the request's `n`) answered as `GenerateContentResponse` records or one
/// object, errors in Google's shape.
pub(crate) struct Gemini;

/// What a Gemini answer needs of its request.
#[derive(Debug, Clone)]
pub(crate) struct GeminiReply {
    /// A streamed answer is server-sent events (`?alt=sse`), else one JSON array.
    pub sse: bool,
    /// The client asked for thoughts (`thinkingConfig.includeThoughts`): reasoning is
    /// answered as `thought` parts, else left out.
    pub thoughts: bool,
}

impl ClientApi for Gemini {
    const LABEL: &'static str = "gemini";
    // Every segment after `models/`: a model's name may hold a `/`.
    const ROUTE: &'static str = "/v1beta/models/{*target}";
    const SHOWN: &'static [&'static str] = &[
        "/v1beta/models/{model}:generateContent",
        "/v1beta/models/{model}:streamGenerateContent",
        "/v1beta/models/{model}:countTokens",
    ];
    const MODELS: Option<&'static str> = Some("/v1beta/models");
    const COST: BodyCost = BodyCost {
        heavy: &["contents", "systemInstruction", "tools"],
        sixteenths: 24,
    };
    const ONE_OUTPUT: bool = false;
    type Reply = GeminiReply;
    type Framing = GeminiFraming;

    fn owns(path: &str) -> bool {
        path.starts_with(PREFIX) || v1_method(path)
    }

    fn asks(path: &str) -> Asks {
        match target(path) {
            Ok((_, Method::CountTokens)) => Asks::CountTokens,
            _ => Asks::Answer,
        }
    }

    fn read_count(head: &Head, bytes: &Bytes, limits: &Limits) -> Result<Counted, Box<Refused>> {
        let (model, _) = target(head.uri.path()).map_err(|e| Refused::new(e, None))?;
        let asked = Some(model.to_string());
        let body = super::parse_body(bytes).map_err(|e| Refused::new(e, asked.clone()))?;
        let chat =
            count::to_chat(&body, model, limits.max_n).map_err(|e| Refused::new(e, asked))?;
        Ok(Counted {
            model: model.to_string(),
            chat,
        })
    }

    fn counted(tokens: u64) -> Value {
        json!({ "totalTokens": tokens })
    }

    fn model(name: &str) -> Value {
        model_entry(name)
    }

    fn models(names: &[String]) -> Value {
        let models: Vec<Value> = names.iter().map(|name| model_entry(name)).collect();
        json!({ "models": models })
    }

    fn read(
        head: &Head,
        bytes: &Bytes,
        limits: &Limits,
        picks: &crate::config::ByName<ModelPick>,
    ) -> Result<Read<GeminiReply>, Box<Refused>> {
        let (model, method) = target(head.uri.path()).map_err(|e| Refused::new(e, None))?;
        let stream = method == Method::Stream;
        let asked = Some(model.to_string());
        let sse =
            stream && alt_sse(head.uri.query()).map_err(|e| Refused::new(e, asked.clone()))?;
        let body = super::parse_body(bytes).map_err(|e| Refused::new(e, asked.clone()))?;
        let read = request::to_chat(&body, model, stream, limits.max_n)
            .map_err(|e| Refused::new(e, asked.clone()))?;
        let req = ChatRequest::from_fields(read.chat, limits)
            .and_then(|r| r.with_model(picks, limits))
            .map_err(|e| Refused::new(in_gemini_terms(e), asked))?;
        Ok(Read {
            req,
            reply: GeminiReply {
                sse,
                thoughts: read.thoughts,
            },
            native: None,
            hosted: read.hosted,
            prompt: None,
        })
    }

    fn framing(
        reply: GeminiReply,
        envelope: &Envelope,
        _: &ChatRequest,
        outputs: usize,
        _: Option<u64>,
    ) -> GeminiFraming {
        GeminiFraming::new(&reply, envelope, outputs)
    }

    fn streamed_type(reply: &GeminiReply) -> &'static str {
        match reply.sse {
            true => "text/event-stream",
            false => "application/json",
        }
    }

    fn object(
        reply: &GeminiReply,
        envelope: &Envelope,
        _: bool,
        choices: &[(Option<Choice>, OutputEnd)],
        usage: &AnswerUsage,
        summary: Option<&Summary>,
    ) -> Bytes {
        answer::object(reply, envelope, choices, usage, summary)
    }

    fn error_body(error: &ApiError) -> Value {
        error_body(error.status, &error.message, error.param.as_deref())
    }
}

/// A model's method, as a request's path names it (`models/{model}:{method}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    /// `generateContent`: one JSON object.
    Generate,
    /// `streamGenerateContent`: a streamed answer.
    Stream,
    /// `countTokens`: the prompt's tokens.
    CountTokens,
}

/// The model and its method, from a request's path (`/v1beta/models/{model}:generateContent`,
/// `:streamGenerateContent` or `:countTokens`); another method is a 404 naming those served.
fn target(path: &str) -> Result<(&str, Method), ApiError> {
    let not_found = |what: String| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            format!(
                "{what}: this gateway serves POST /v1beta/models/{{model}}:generateContent, \
                 :streamGenerateContent and :countTokens"
            ),
        )
    };
    let Some(target) = (path.strip_prefix(MODELS)).or_else(|| path.strip_prefix(V1_MODELS)) else {
        return Err(not_found(format!("{path} is not a model's method")));
    };
    let Some((model, method)) = target.rsplit_once(':') else {
        return Err(not_found(format!(
            "{path} names no method (models/MODEL:METHOD)"
        )));
    };
    if model.trim().is_empty() {
        return Err(ApiError::invalid(format!("{path}: the path names no model")).param("model"));
    }
    match method {
        "generateContent" => Ok((model, Method::Generate)),
        "streamGenerateContent" => Ok((model, Method::Stream)),
        "countTokens" => Ok((model, Method::CountTokens)),
        other => Err(not_found(format!("the method {other:?} is not served"))),
    }
}

/// A configured model in Google's `Model` shape, as `GET /v1beta/models` lists it: its
/// resource name (`models/NAME`), the methods served for it here. The gateway knows no token
/// limits of its own: those fields are left out, as the API allows.
fn model_entry(name: &str) -> Value {
    json!({
        "name": format!("models/{name}"),
        "baseModelId": name,
        "version": "choicewise",
        "displayName": name,
        "description": "A model of this choicewise gateway.",
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    })
}

/// Whether a query asks for server-sent events (`alt=sse`; `alt=json`, or none, is the JSON
/// array); another `alt` (Google's `proto`, a typo) is a 400 naming it, rather than JSON the
/// client did not ask for.
fn alt_sse(query: Option<&str>) -> Result<bool, ApiError> {
    let mut sse = false;
    for value in
        (query.into_iter().flat_map(|q| q.split('&'))).filter_map(|p| p.strip_prefix("alt="))
    {
        match value {
            "sse" => sse = true,
            "json" => sse = false,
            other => {
                let shown: String = other.chars().take(32).collect();
                return Err(ApiError::invalid(format!(
                    "alt={shown} is not served: alt=sse (server-sent events) or alt=json"
                ))
                .param("alt"));
            }
        }
    }
    Ok(sse)
}

/// A Chat Completions request's refusal said in the Gemini request's terms: its `n` is the
/// request's `generationConfig.candidateCount`.
fn in_gemini_terms(mut e: ApiError) -> ApiError {
    if e.param.as_deref() == Some("n") {
        e.param = Some("generationConfig.candidateCount".into());
        e.message = e
            .message
            .replace("(n)", "(generationConfig.candidateCount)");
    }
    e
}

/// Google's error body for a status: `{"error": {"code", "message", "status"}}`, with a
/// `google.rpc.BadRequest` detail naming the field when there is one.
pub(crate) fn error_body(status: StatusCode, message: &str, field: Option<&str>) -> Value {
    let mut error =
        json!({"code": status.as_u16(), "message": message, "status": status_name(status)});
    if let Some(field) = field {
        error["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": field, "description": message}],
        }]);
    }
    json!({ "error": error })
}

/// The `google.rpc.Code` name Google's APIs give an HTTP status.
pub(crate) fn status_name(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 405 | 411 | 413 | 415 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        408 | 504 => "DEADLINE_EXCEEDED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 => "UNAVAILABLE",
        _ if status.is_client_error() => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests;
