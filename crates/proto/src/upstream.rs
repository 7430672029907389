//! An upstream API as one implementation of one trait, [`UpstreamApi`], and the one list of
//! them: what the API is called, where its requests go and with which key header, whether
//! one request asks for several choices, its request writer (a Chat Completions request in
//! its shape), which events are its own, and its event reader.
//!
//! [`Dialect`] stays the one public name of an API (configuration, flags, labels, serde);
//! [`Dialect::api`] is its implementation, from the list, and `Dialect`'s per-API methods
//! are that implementation's. A new upstream API is one module under `upstream/` (its
//! writer and reader may live in it), its `Dialect` variant, and one entry in the list
//! (`upstream_apis!`).
//!
//! The request side is called through `&dyn UpstreamApi` (once per request). A stream's
//! events are not: each API's reader is a type of its own, and the stream's reader, made
//! from the same list, reads an event by a `match` on it, with no dynamic call per event.
//!
//! ```
//! use choicewise_proto::Dialect;
//! use choicewise_proto::upstream::RequestWriting;
//! for dialect in Dialect::ALL {
//!     let api = dialect.api();
//!     assert_eq!(api.name().parse::<Dialect>(), Ok(dialect));
//!     let by_field = api.request_writing() == RequestWriting::ByField;
//!     println!("{}: {}, one request per choice: {}, by field: {by_field}",
//!         api.name(), api.endpoint_for("m"), !api.has_n());
//! }
//! ```

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

pub use crate::api::RequestError;
use crate::api::{Dialect, MessagesError};
use crate::dialect::{Decoded, EventReader};
use crate::error::{Error, ErrorDetail};
use crate::event::WarningKind;

mod anthropic;
mod bedrock;
mod chat;
mod dialect;
mod gemini;
mod responses;

/// One upstream API: what choicewise needs to ask it and to read its answer. Sealed: the
/// implementations are choicewise's own, one per [`Dialect`], given by [`Dialect::api`].
///
/// ```
/// use choicewise_proto::{Dialect, UpstreamApi};
/// let api: &dyn UpstreamApi = Dialect::Anthropic.api();
/// assert_eq!((api.dialect(), api.name(), api.endpoint()), (Dialect::Anthropic, "anthropic", "messages"));
/// assert_eq!(api.key_header(), Some("x-api-key"));
/// assert!(!api.has_n());
/// assert!(api.recognises("content_block_delta") && !api.recognises("response.completed"));
/// let body = serde_json::json!({"messages": [{"role": "user", "content": "hi"}]});
/// let request = api.request_from_chat(body.as_object().unwrap()).unwrap();
/// assert_eq!(request["max_tokens"], choicewise_proto::DEFAULT_ANTHROPIC_MAX_TOKENS);
/// ```
pub trait UpstreamApi: sealed::Sealed + fmt::Debug + Send + Sync + 'static {
    /// Its name in choicewise ([`Dialect`]).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::ALL.iter().all(|d| d.api().dialect() == *d));
    /// ```
    fn dialect(&self) -> Dialect;

    /// Its name: `chat`, `responses`, `anthropic`, `gemini` (configuration, flags, labels).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Gemini.api().name(), "gemini");
    /// ```
    fn name(&self) -> &'static str;

    /// Its streaming endpoint's path under the API's base URL (`…/v1`, `…/v1beta`); for an
    /// API whose path names the model, the root of those paths
    /// ([`endpoint_for`](Self::endpoint_for)).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Responses.api().endpoint(), "responses");
    /// ```
    fn endpoint(&self) -> &'static str;

    /// Its streaming endpoint's path for `model`: [`endpoint`](Self::endpoint), unless the
    /// API's path names the model (Gemini's `models/{model}:streamGenerateContent`).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Gemini.api().endpoint_for("m"), "models/m:streamGenerateContent");
    /// assert_eq!(Dialect::Chat.api().endpoint_for("m"), "chat/completions");
    /// ```
    fn endpoint_for(&self, model: &str) -> String {
        let _ = model;
        self.endpoint().to_string()
    }

    /// The header an API key is sent in, when it is not `Authorization: Bearer KEY`:
    /// Anthropic's `x-api-key`, Gemini's `x-goog-api-key`.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Gemini.api().key_header(), Some("x-goog-api-key"));
    /// assert_eq!(Dialect::Chat.api().key_header(), None);
    /// ```
    fn key_header(&self) -> Option<&'static str> {
        None
    }

    /// Whether one request asks for several choices (Chat Completions' `n`, Gemini's
    /// `candidateCount`); the others take one request per choice.
    ///
    /// ```
    /// assert!(choicewise_proto::Dialect::Chat.api().has_n());
    /// ```
    fn has_n(&self) -> bool;

    /// The request field that holds the conversation in its shape (`messages`, `input`,
    /// `contents`).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Gemini.api().messages_field(), "contents");
    /// ```
    fn messages_field(&self) -> &'static str {
        "messages"
    }

    /// The request field a Chat Completions system message's content goes in (`system`,
    /// `instructions`, `systemInstruction`); None when it stays a message.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Responses.api().system_field(), Some("instructions"));
    /// ```
    fn system_field(&self) -> Option<&'static str> {
        None
    }

    /// How a request to it is best written from a client's request in Chat Completions'
    /// shape ([`RequestWriting`]).
    ///
    /// ```
    /// use choicewise_proto::{Dialect, RequestWriting};
    /// assert_eq!(Dialect::Chat.api().request_writing(), RequestWriting::AsSent);
    /// assert_eq!(Dialect::Anthropic.api().request_writing(), RequestWriting::ByField);
    /// ```
    fn request_writing(&self) -> RequestWriting {
        RequestWriting::ByField
    }

    /// A request in Chat Completions' shape in this API's shape ([`Dialect::request_from_chat`]
    /// says how, for each API).
    ///
    /// ```
    /// let body = serde_json::json!({"messages": [], "max_tokens": 9});
    /// let responses = choicewise_proto::Dialect::Responses.api()
    ///     .request_from_chat(body.as_object().unwrap()).unwrap();
    /// assert_eq!(responses["max_output_tokens"], 9);
    /// ```
    ///
    /// # Errors
    ///
    /// A field the API cannot take, or a message or tool that does not translate
    /// ([`RequestError`]: the field, and why).
    fn request_from_chat(&self, body: &Map<String, Value>) -> Result<Value, RequestError>;

    /// A Chat Completions `messages`, as JSON text, written in this API's shape at the end of
    /// `out` ([`Dialect::write_messages_from_chat_json`]): the first system message's
    /// content, as JSON text, when the API takes it in a field of its own.
    ///
    /// ```
    /// let mut out = Vec::new();
    /// let system = choicewise_proto::Dialect::Chat.api()
    ///     .write_messages_from_chat_json(br#"[{"role": "system", "content": "x"}]"#, &mut out).unwrap();
    /// assert_eq!((out.as_slice(), system), (&br#"[{"role": "system", "content": "x"}]"#[..], None));
    /// ```
    ///
    /// # Errors
    ///
    /// [`MessagesError`]: not a list, or a message that does not translate.
    fn write_messages_from_chat_json(
        &self,
        messages: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, MessagesError>;

    /// A Chat Completions `tools`, as JSON text, written in this API's shape at the end of
    /// `out` ([`Dialect::write_tools_from_chat_json`]).
    ///
    /// ```
    /// let mut out = Vec::new();
    /// choicewise_proto::Dialect::Gemini.api()
    ///     .write_tools_from_chat_json(br#"[{"type": "function", "function": {"name": "f"}}]"#, &mut out)
    ///     .unwrap();
    /// let tools: serde_json::Value = serde_json::from_slice(&out).unwrap();
    /// assert_eq!(tools[0]["functionDeclarations"][0]["name"], "f");
    /// ```
    ///
    /// # Errors
    ///
    /// Not a list, a tool that is not a function, a function without a name.
    fn write_tools_from_chat_json(
        &self,
        tools: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RequestError>;

    /// Whether an event of this `type` is one of this API's (how a stream of no given API
    /// is recognised from its first event, and an event of another API told from an unknown
    /// one). Chat Completions' chunks and Gemini's records have no `type`: none is theirs.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Responses.api().recognises("response.output_text.delta"));
    /// assert!(!Dialect::Chat.api().recognises("message_start"));
    /// ```
    fn recognises(&self, kind: &str) -> bool {
        let _ = kind;
        false
    }

    /// The top-level keys of which any marks an event with no `type` as one of its records
    /// (Gemini's `candidates`, `usageMetadata`, `promptFeedback`); none for an API whose
    /// events are typed, or Chat Completions' chunks (a stream's default).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Gemini.api().record_keys().contains(&"candidates"));
    /// assert!(Dialect::Anthropic.api().record_keys().is_empty());
    /// ```
    fn record_keys(&self) -> &'static [&'static str] {
        &[]
    }

    /// Where the API is served when no base URL is given: its provider's.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Anthropic.api().default_base_url(), "https://api.anthropic.com/v1");
    /// assert_eq!(Dialect::Chat.api().default_base_url(), "https://api.openai.com/v1");
    /// ```
    fn default_base_url(&self) -> &'static str {
        "https://api.openai.com/v1"
    }

    /// The environment variables its key and its base URL are read from, as its provider's
    /// own tools read them (`OPENAI_API_KEY`, `OPENAI_BASE_URL`).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Gemini.api().env_vars(), ("GEMINI_API_KEY", "GEMINI_BASE_URL"));
    /// ```
    fn env_vars(&self) -> (&'static str, &'static str) {
        ("OPENAI_API_KEY", "OPENAI_BASE_URL")
    }

    /// The model asked of it when none is given.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Gemini.api().default_model(), "gemini-2.5-flash");
    /// ```
    fn default_model(&self) -> &'static str {
        "gpt-4o-mini"
    }

    /// Whether, with no model given, a server other than the provider's is asked its model
    /// list for one (Chat Completions': a local server serves one model or a few); else
    /// [`default_model`](Self::default_model) is asked.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Chat.api().model_from_list() && !Dialect::Anthropic.api().model_from_list());
    /// ```
    fn model_from_list(&self) -> bool {
        false
    }

    /// Whether a base URL given as a bare host (`http://host:8080`) means the API's `/v1`
    /// under it, as a local server serves it; not for an API whose users give its version's
    /// path themselves (Gemini's `…/v1beta`).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Chat.api().bare_host_is_v1() && !Dialect::Gemini.api().bare_host_is_v1());
    /// ```
    fn bare_host_is_v1(&self) -> bool {
        true
    }

    /// Whether its streaming endpoint's path names the model, so that a client of it needs
    /// the model before its first request ([`endpoint_for`](Self::endpoint_for)).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Gemini.api().path_names_model() && !Dialect::Chat.api().path_names_model());
    /// ```
    fn path_names_model(&self) -> bool {
        false
    }

    /// The query parameter its streaming endpoint's URL carries (Gemini's `alt=sse`).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Gemini.api().stream_query(), Some(("alt", "sse")));
    /// ```
    fn stream_query(&self) -> Option<(&'static str, &'static str)> {
        None
    }

    /// Whether a streamed request says so in its body (`"stream": true`); Gemini's says so
    /// by its URL, and refuses the field.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Chat.api().stream_field() && !Dialect::Gemini.api().stream_field());
    /// ```
    fn stream_field(&self) -> bool {
        true
    }

    /// Whether its stream reports usage only when the request asks
    /// (`stream_options.include_usage`: Chat Completions').
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Chat.api().usage_when_asked() && !Dialect::Anthropic.api().usage_when_asked());
    /// ```
    fn usage_when_asked(&self) -> bool {
        false
    }

    /// The header of the API's version that every request carries unless the caller sets
    /// it, with its value (Anthropic's `anthropic-version`).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Anthropic.api().version_header(), Some(("anthropic-version", "2023-06-01")));
    /// assert_eq!(Dialect::Chat.api().version_header(), None);
    /// ```
    fn version_header(&self) -> Option<(&'static str, &'static str)> {
        None
    }

    /// Its endpoint counting a request's input tokens, under its base URL, if it has one
    /// (Anthropic's `messages/count_tokens`).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Anthropic.api().count_endpoint(), Some("messages/count_tokens"));
    /// assert_eq!(Dialect::Gemini.api().count_endpoint(), None);
    /// ```
    fn count_endpoint(&self) -> Option<&'static str> {
        None
    }

    /// The limit of an answer's tokens sent when the client states none, for an API that
    /// requires one (Anthropic's `max_tokens`).
    ///
    /// ```
    /// use choicewise_proto::{DEFAULT_ANTHROPIC_MAX_TOKENS, Dialect};
    /// assert_eq!(Dialect::Anthropic.api().default_max_tokens(), Some(DEFAULT_ANTHROPIC_MAX_TOKENS));
    /// assert_eq!(Dialect::Chat.api().default_max_tokens(), None);
    /// ```
    fn default_max_tokens(&self) -> Option<u64> {
        None
    }

    /// Whether a client field its translation does not know passes through as the client
    /// sent it (not for Gemini, whose request has a place for none of them as they are:
    /// each is written in its shape, left out or refused by name).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Anthropic.api().passes_other_fields());
    /// assert!(!Dialect::Gemini.api().passes_other_fields());
    /// ```
    fn passes_other_fields(&self) -> bool {
        true
    }

    /// Whether its choices carry log-probabilities (Chat Completions' `logprobs`), which a
    /// confidence-guided pick reads.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Chat.api().has_logprobs() && !Dialect::Responses.api().has_logprobs());
    /// ```
    fn has_logprobs(&self) -> bool {
        false
    }

    /// Its provider's name in OpenTelemetry's conventions (`gen_ai.provider.name`):
    /// `openai`, `anthropic`, `gcp.gemini`.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Gemini.api().provider_name(), "gcp.gemini");
    /// ```
    fn provider_name(&self) -> &'static str {
        "openai"
    }

    /// How its stream is framed ([`Framing`]): server-sent events but for Bedrock's binary
    /// event stream.
    ///
    /// ```
    /// use choicewise_proto::{Dialect, Framing};
    /// assert_eq!(Dialect::Gemini.api().framing(), Framing::ServerSentEvents);
    /// ```
    fn framing(&self) -> Framing {
        Framing::ServerSentEvents
    }

    /// How a request to it is authorised ([`Authorisation`]): its key in a header
    /// ([`key_header`](Self::key_header)), else as a bearer token; Bedrock's signed.
    ///
    /// ```
    /// use choicewise_proto::{Authorisation, Dialect};
    /// assert_eq!(Dialect::Gemini.api().authorisation(), Authorisation::KeyHeader("x-goog-api-key"));
    /// ```
    fn authorisation(&self) -> Authorisation {
        match self.key_header() {
            Some(header) => Authorisation::KeyHeader(header),
            None => Authorisation::Bearer,
        }
    }

    /// Its base URL in a region, for an API served per region (Bedrock's
    /// `https://bedrock-runtime.{region}.amazonaws.com`); None for the others.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Bedrock.api().regional_base_url("eu-west-1").as_deref(),
    ///     Some("https://bedrock-runtime.eu-west-1.amazonaws.com"));
    /// assert_eq!(Dialect::Chat.api().regional_base_url("eu-west-1"), None);
    /// ```
    fn regional_base_url(&self, region: &str) -> Option<String> {
        let _ = region;
        None
    }
}

/// How a request to an upstream API is written from a client's request in Chat Completions'
/// shape ([`UpstreamApi::request_writing`]); each way gives the same request as
/// [`UpstreamApi::request_from_chat`].
///
/// ```
/// use choicewise_proto::{Dialect, RequestWriting};
/// let by_field = Dialect::ALL.into_iter().filter(|d| d.api().request_writing() == RequestWriting::ByField);
/// assert_eq!(by_field.collect::<Vec<_>>(), [Dialect::Responses, Dialect::Anthropic, Dialect::Gemini]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestWriting {
    /// The client's fields as they came, but for the few a caller decides itself (the
    /// model, streaming, the number of choices, a limit): Chat Completions.
    AsSent,
    /// Field by field: the messages and the tools translated from their text, one message
    /// and one tool at a time ([`UpstreamApi::write_messages_from_chat_json`],
    /// [`UpstreamApi::write_tools_from_chat_json`]), the other fields parsed and translated
    /// as [`UpstreamApi::request_from_chat`] does, so that a request of many messages is
    /// never a tree.
    ByField,
    /// Whole: every field parsed and the request translated as one tree
    /// ([`UpstreamApi::request_from_chat`]), for an API whose request nests what a Chat
    /// Completions request keeps at its top (Bedrock's `toolConfig`, `inferenceConfig`).
    Whole,
}

/// How an upstream API's stream is framed ([`UpstreamApi::framing`]).
///
/// ```
/// use choicewise_proto::{Dialect, Framing};
/// assert_eq!(Dialect::Chat.api().framing(), Framing::ServerSentEvents);
/// assert_eq!(Dialect::Bedrock.api().framing(), Framing::EventStream);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Framing {
    /// Server-sent events (`text/event-stream`): every API's but Bedrock's.
    ServerSentEvents,
    /// AWS's binary event stream (`application/vnd.amazon.eventstream`): each message
    /// framed by its length and CRCs, its event type in its `:event-type` header, its JSON
    /// in its payload.
    EventStream,
}

/// How a request to an upstream API is authorised ([`UpstreamApi::authorisation`]).
///
/// ```
/// use choicewise_proto::{Authorisation, Dialect};
/// assert_eq!(Dialect::Chat.api().authorisation(), Authorisation::Bearer);
/// assert_eq!(Dialect::Anthropic.api().authorisation(), Authorisation::KeyHeader("x-api-key"));
/// assert_eq!(Dialect::Bedrock.api().authorisation(), Authorisation::SigV4 { service: "bedrock" });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Authorisation {
    /// `Authorization: Bearer KEY`.
    Bearer,
    /// The key as the value of this header (Anthropic's `x-api-key`, Gemini's
    /// `x-goog-api-key`).
    KeyHeader(&'static str),
    /// AWS Signature Version 4 over each request (method, path, headers, body) with an
    /// access key, its secret and a session token, for this service in a region.
    SigV4 {
        /// The service signed for (`bedrock`).
        service: &'static str,
    },
}

pub(crate) mod sealed {
    /// Only choicewise's own upstream APIs implement [`UpstreamApi`](super::UpstreamApi).
    pub trait Sealed {}
}

/// An upstream API's event reader: the type whose value reads one stream of its events.
pub(crate) trait ReadsEvents {
    /// The reader ([`EventReader`]); `dialect::Chunks` for Chat Completions, whose chunks
    /// the splitter reads itself.
    type Reader: EventReader;
}

/// The one list of upstream APIs: each [`Dialect`] and its implementation. It makes
/// [`Dialect::api`] and [`Reader`] (one variant per API, holding that API's reader).
macro_rules! upstream_apis {
    ($($dialect:ident => $api:path),+ $(,)?) => {
        impl Dialect {
            /// Its implementation: what choicewise asks of this API and reads of it.
            ///
            /// ```
            /// use choicewise_proto::Dialect;
            /// assert_eq!(Dialect::Anthropic.api().name(), "anthropic");
            /// ```
            pub fn api(self) -> &'static dyn UpstreamApi {
                match self {
                    $(Dialect::$dialect => &$api,)+
                }
            }

            /// Whether this API's events are read by a reader of its own (every API's but
            /// Chat Completions', whose chunks the splitter reads itself).
            pub(crate) const fn has_reader(self) -> bool {
                match self {
                    $(Dialect::$dialect => <<$api as ReadsEvents>::Reader as EventReader>::TYPED,)+
                }
            }
        }

        /// The event reader of one stream, by its API.
        #[derive(Debug)]
        pub(crate) enum ApiReader {
            $($dialect(<$api as ReadsEvents>::Reader),)+
        }

        impl ApiReader {
            fn new(dialect: Dialect, custom_tools: &Arc<[String]>) -> Option<ApiReader> {
                match dialect {
                    $(Dialect::$dialect => {
                        <<$api as ReadsEvents>::Reader as EventReader>::new(custom_tools)
                            .map(ApiReader::$dialect)
                    })+
                }
            }

            fn event(
                &mut self,
                typed: Option<&str>,
                event: &str,
                data: &Value,
                at: (u64, u64),
            ) -> Result<(Dialect, Decoded), Error> {
                match self {
                    $(ApiReader::$dialect(r) => Ok((Dialect::$dialect, r.event(typed, event, data, at)?)),)+
                }
            }
        }
    };
}

upstream_apis! {
    Chat => chat::Chat,
    Responses => responses::Responses,
    Anthropic => anthropic::Anthropic,
    Gemini => gemini::Gemini,
    Bedrock => bedrock::Bedrock,
}

/// The reader of one stream's events, of the API the stream speaks: its API's reader, and
/// the event types it met that no API knows (warned about once each).
#[derive(Debug)]
pub(crate) struct Reader {
    api: ApiReader,
    unknown: std::collections::BTreeSet<String>,
}

impl Reader {
    /// The reader of a stream of `dialect`; `custom_tools` the request's custom tools. None
    /// for Chat Completions, whose chunks the splitter reads itself.
    pub(crate) fn new(dialect: Dialect, custom_tools: &Arc<[String]>) -> Option<Reader> {
        Some(Reader {
            api: ApiReader::new(dialect, custom_tools)?,
            unknown: std::collections::BTreeSet::new(),
        })
    }

    /// One event, its data parsed: `typed` the `type` in its data, `event` its `event:` line.
    /// An event type of another API is an error naming it; one of no API is skipped with a
    /// warning (the first time).
    pub(crate) fn event(
        &mut self,
        typed: Option<&str>,
        event: &str,
        data: &Value,
        at: (u64, u64),
    ) -> Result<Decoded, Error> {
        let (mine, mut decoded) = self.api.event(typed, event, data, at)?;
        if decoded.unknown {
            let kind = typed.unwrap_or(event);
            match dialect_of(kind) {
                Some(other) if other != mine => {
                    return Err(Error::from(ErrorDetail::WrongDialect {
                        expected: mine,
                        found: kind.to_string(),
                        line: at.0,
                    }));
                }
                _ => {
                    if self.unknown.insert(kind.to_string()) {
                        decoded.warning = Some(WarningKind::UnknownEvent {
                            kind: kind.to_string(),
                        });
                    }
                }
            }
        }
        Ok(decoded)
    }
}

/// The API whose records have no `type` and carry a key that `has_key` finds
/// ([`UpstreamApi::record_keys`]).
pub(crate) fn dialect_of_record(has_key: impl Fn(&str) -> bool) -> Option<Dialect> {
    Dialect::ALL
        .into_iter()
        .find(|d| d.api().record_keys().iter().any(|k| has_key(k)))
}

/// The API an event's type belongs to, if it is one of an API's ([`UpstreamApi::recognises`]).
pub(crate) fn dialect_of(kind: &str) -> Option<Dialect> {
    Dialect::ALL.into_iter().find(|d| d.api().recognises(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_gives_each_dialect_its_own_api() {
        for dialect in Dialect::ALL {
            let api = dialect.api();
            assert_eq!(api.dialect(), dialect, "{api:?}");
            assert_eq!(api.name().parse::<Dialect>(), Ok(dialect));
            assert_eq!(dialect.has_reader(), dialect != Dialect::Chat, "{dialect}");
            let reader = Reader::new(dialect, &Arc::from(Vec::new()));
            assert_eq!(reader.is_some(), dialect.has_reader(), "{dialect}");
        }
    }

    #[test]
    fn an_event_type_belongs_to_one_api_at_most() {
        let cases = [
            ("response.output_text.delta", Some(Dialect::Responses)),
            ("response.whatever_comes_next", Some(Dialect::Responses)),
            ("message_stop", Some(Dialect::Anthropic)),
            ("ping", Some(Dialect::Anthropic)),
            ("chat.completion.chunk", None),
            ("error", None),
            ("", None),
        ];
        for (kind, owner) in cases {
            assert_eq!(dialect_of(kind), owner, "{kind}");
            let owners = Dialect::ALL.iter().filter(|d| d.api().recognises(kind));
            assert!(owners.count() <= 1, "{kind}");
        }
    }

    #[test]
    fn another_apis_event_is_an_error_and_an_unknown_one_a_warning_once() {
        let mut reader = Reader::new(Dialect::Anthropic, &Arc::from(Vec::new())).unwrap();
        let data = serde_json::json!({"type": "whatever"});
        let first = reader.event(Some("whatever"), "", &data, (1, 0)).unwrap();
        assert!(
            matches!(first.warning, Some(WarningKind::UnknownEvent { ref kind }) if kind == "whatever")
        );
        let again = reader.event(Some("whatever"), "", &data, (2, 0)).unwrap();
        assert!(again.warning.is_none() && again.updates.is_empty());
        let data = serde_json::json!({"type": "response.completed"});
        let e = reader
            .event(Some("response.completed"), "", &data, (3, 0))
            .unwrap_err();
        assert!(
            matches!(e.detail(), ErrorDetail::WrongDialect { expected: Dialect::Anthropic, found, line: 3 } if found == "response.completed"),
            "{e}"
        );
        let mut gemini = Reader::new(Dialect::Gemini, &Arc::from(Vec::new())).unwrap();
        let e = gemini
            .event(Some("message_start"), "", &data, (4, 0))
            .unwrap_err();
        assert!(
            matches!(
                e.detail(),
                ErrorDetail::WrongDialect {
                    expected: Dialect::Gemini,
                    ..
                }
            ),
            "{e}"
        );
    }
}
