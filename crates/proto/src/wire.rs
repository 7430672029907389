//! Wire types of the OpenAI `chat.completion.chunk` object and its compatible dialects.
//!
//! Every string field is a [`Cow`]: parsing a chunk from a `&str` borrows the strings that
//! contain no escapes, so the common path allocates nothing for them. [`ChatCompletionChunk::into_owned`]
//! detaches a chunk from its input (for `Completions::from_chunks`).
//!
//! Unknown fields are ignored everywhere, `null` is the same as an absent key, and the fields
//! of other providers that matter are modelled: `reasoning_content` (DeepSeek, llama.cpp,
//! SGLang) and `reasoning` (vLLM, OpenRouter), Azure's `prompt_filter_results` and
//! `content_filter_results`, and an `error` object in place of (or beside) the choices.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One `chat.completion.chunk` of a streamed chat completion.
///
/// ```
/// use choicewise_proto::wire::ChatCompletionChunk;
///
/// let chunk: ChatCompletionChunk = serde_json::from_str(
///     r#"{"id":"c1","choices":[{"index":1,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
/// ).unwrap();
/// assert_eq!(chunk.choices[0].index, Some(1));
/// assert_eq!(chunk.choices[0].delta.as_ref().unwrap().content.as_deref(), Some("Hi"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionChunk<'a> {
    /// The completion id, the same on every chunk (Azure's first chunk has `""`).
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<Cow<'a, str>>,
    /// `"chat.completion.chunk"`.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub object: Option<Cow<'a, str>>,
    /// Unix time of creation, in seconds.
    #[serde(
        default,
        deserialize_with = "lenient_i64",
        skip_serializing_if = "Option::is_none"
    )]
    pub created: Option<i64>,
    /// The model that produced the chunk.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub model: Option<Cow<'a, str>>,
    /// Backend configuration fingerprint.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub system_fingerprint: Option<Cow<'a, str>>,
    /// The service tier that served the request.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub service_tier: Option<Cow<'a, str>>,
    /// The choices this chunk updates; `[]` on usage-only and prompt-filter chunks.
    #[serde(borrow, default, deserialize_with = "objects")]
    pub choices: Vec<ChunkChoice<'a>>,
    /// Token usage, when the provider reports it on this chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    /// Azure's prompt filter annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_filter_results: Option<Value>,
    /// An error reported by the provider in place of, or beside, the choices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// One choice's update inside a chunk.
///
/// ```
/// use choicewise_proto::wire::ChunkChoice;
///
/// let c: ChunkChoice = serde_json::from_str(r#"{"delta":{},"finish_reason":"stop"}"#).unwrap();
/// assert_eq!(c.index, None); // a missing index means choice 0
/// assert_eq!(c.finish_reason.as_deref(), Some("stop"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice<'a> {
    /// The choice index; absent means 0. Kept signed so that a negative index is
    /// reported as an error rather than a parse failure of the whole chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i64>,
    /// The new data for this choice; absent on Azure's annotation-only updates.
    #[serde(
        borrow,
        default,
        deserialize_with = "opt_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub delta: Option<Delta<'a>>,
    /// Why the choice ended; `null` and `""` mean it has not.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub finish_reason: Option<Cow<'a, str>>,
    /// Log probabilities of the tokens in this update (boxed: rare, and it keeps the
    /// struct small to move).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Box<Value>>,
    /// Azure's content filter annotations for this choice (boxed: rare).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_filter_results: Option<Box<Value>>,
}

/// The new message data of one choice in one chunk.
///
/// ```
/// use choicewise_proto::wire::Delta;
///
/// let d: Delta = serde_json::from_str(r#"{"role":"assistant","reasoning":"hmm"}"#).unwrap();
/// assert_eq!(d.reasoning_text(), Some("hmm"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta<'a> {
    /// The author role, on the first update of a choice.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub role: Option<Cow<'a, str>>,
    /// Text to append to the message content.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub content: Option<Cow<'a, str>>,
    /// Text to append to the refusal.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub refusal: Option<Cow<'a, str>>,
    /// Reasoning text (DeepSeek, llama.cpp, SGLang).
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub reasoning_content: Option<Cow<'a, str>>,
    /// Reasoning text (vLLM 0.9 and later, OpenRouter).
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub reasoning: Option<Cow<'a, str>>,
    /// A fragment of the legacy single function call (boxed: rare).
    #[serde(
        borrow,
        default,
        deserialize_with = "opt_boxed_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub function_call: Option<Box<FunctionCallDelta<'a>>>,
    /// Fragments of tool calls, each naming its call by `index`.
    #[serde(
        borrow,
        default,
        deserialize_with = "opt_objects",
        skip_serializing_if = "Option::is_none"
    )]
    pub tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

impl Delta<'_> {
    /// The reasoning text of this update, under whichever key the provider used.
    ///
    /// ```
    /// use choicewise_proto::wire::Delta;
    /// let d: Delta = serde_json::from_str(r#"{"reasoning_content":"a"}"#).unwrap();
    /// assert_eq!(d.reasoning_text(), Some("a"));
    /// ```
    pub fn reasoning_text(&self) -> Option<&str> {
        self.reasoning_content
            .as_deref()
            .or(self.reasoning.as_deref())
    }
}

/// A fragment of a function call: the name (once) and a piece of the arguments.
///
/// ```
/// use choicewise_proto::wire::{Arguments, FunctionCallDelta};
/// let f: FunctionCallDelta = serde_json::from_str(r#"{"arguments":"{\"a\":"}"#).unwrap();
/// assert_eq!(f.arguments, Some(Arguments::Text("{\"a\":".into())));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallDelta<'a> {
    /// The function name, normally only on the first fragment.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<Cow<'a, str>>,
    /// A piece of the JSON arguments.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Arguments<'a>>,
}

/// A fragment of one tool call.
///
/// ```
/// use choicewise_proto::wire::ToolCallDelta;
/// let t: ToolCallDelta = serde_json::from_str(
///     r#"{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}"#,
/// ).unwrap();
/// assert_eq!(t.id.as_deref(), Some("call_1"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta<'a> {
    /// Which of the choice's tool calls this fragment belongs to (absent with some providers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i64>,
    /// The call id, normally only on the first fragment.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<Cow<'a, str>>,
    /// The tool type, `"function"`.
    #[serde(
        borrow,
        default,
        rename = "type",
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub kind: Option<Cow<'a, str>>,
    /// The function name and argument fragment.
    #[serde(
        borrow,
        default,
        deserialize_with = "opt_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub function: Option<FunctionCallDelta<'a>>,
    /// A custom tool's call (`"type": "custom"`): its name and a piece of its free-text
    /// input, which the merge keeps as the call's arguments.
    #[serde(
        borrow,
        default,
        deserialize_with = "opt_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub custom: Option<CustomCallDelta<'a>>,
}

/// A fragment of a custom tool's call: the name (once) and a piece of its free-text input.
///
/// ```
/// use choicewise_proto::wire::ToolCallDelta;
/// let t: ToolCallDelta = serde_json::from_str(
///     r#"{"index":0,"id":"call_1","type":"custom","custom":{"name":"apply_patch","input":"*** Begin"}}"#,
/// ).unwrap();
/// let custom = t.custom.unwrap();
/// assert_eq!((custom.name.as_deref(), custom.input.as_deref()), (Some("apply_patch"), Some("*** Begin")));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CustomCallDelta<'a> {
    /// The tool's name, normally only on the first fragment.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<Cow<'a, str>>,
    /// A piece of the input text.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub input: Option<Cow<'a, str>>,
}

/// A piece of function-call arguments.
///
/// The arguments are a JSON document sent as a string in fragments. Some servers send the
/// whole arguments as a JSON object instead; that object is kept in its compact serialisation.
///
/// ```
/// use choicewise_proto::wire::Arguments;
/// let a: Arguments = serde_json::from_str(r#"{"city": "Paris"}"#).unwrap();
/// assert_eq!(a, Arguments::Json(r#"{"city":"Paris"}"#.into()));
/// assert_eq!(a.as_str(), r#"{"city":"Paris"}"#);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments<'a> {
    /// A fragment of the arguments string, as the API documents it.
    Text(Cow<'a, str>),
    /// Arguments sent as a JSON value instead of a string, serialised compactly.
    Json(String),
}

impl<'a> Arguments<'a> {
    /// The text this fragment appends to the arguments.
    ///
    /// ```
    /// use choicewise_proto::wire::Arguments;
    /// assert_eq!(Arguments::Text("{}".into()).as_str(), "{}");
    /// ```
    pub fn as_str(&self) -> &str {
        match self {
            Arguments::Text(s) => s,
            Arguments::Json(s) => s,
        }
    }

    /// Detaches the fragment from the input it was parsed from.
    ///
    /// ```
    /// use choicewise_proto::wire::Arguments;
    /// let owned: Arguments<'static> = Arguments::Text("{".into()).into_owned();
    /// assert_eq!(owned.as_str(), "{");
    /// ```
    pub fn into_owned(self) -> Arguments<'static> {
        match self {
            Arguments::Text(s) => Arguments::Text(Cow::Owned(s.into_owned())),
            Arguments::Json(s) => Arguments::Json(s),
        }
    }
}

impl Serialize for Arguments<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Arguments<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ArgumentsVisitor;
        impl<'de> Visitor<'de> for ArgumentsVisitor {
            type Value = Arguments<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Arguments::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Arguments::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Arguments::Text(Cow::Owned(v)))
            }
            // A value is written as its canonical text as it is read, no tree between (what
            // a tree would write: keys sorted, compact).
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let mut text = String::new();
                Visitor::visit_map(crate::canonical::Buffered::new(&mut text), map)?;
                Ok(Arguments::Json(text))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                let mut text = String::new();
                Visitor::visit_seq(crate::canonical::Buffered::new(&mut text), seq)?;
                Ok(Arguments::Json(text))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Arguments::Json(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Arguments::Json(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Arguments::Json(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Arguments::Json(Value::from(v).to_string()))
            }
        }
        deserializer.deserialize_any(ArgumentsVisitor)
    }
}

impl ChatCompletionChunk<'_> {
    /// Detaches the chunk from the input it was parsed from.
    ///
    /// ```
    /// use choicewise_proto::wire::ChatCompletionChunk;
    /// let text = String::from(r#"{"choices":[{"delta":{"content":"x"}}]}"#);
    /// let owned: ChatCompletionChunk<'static> =
    ///     serde_json::from_str::<ChatCompletionChunk>(&text).unwrap().into_owned();
    /// drop(text);
    /// assert_eq!(owned.choices.len(), 1);
    /// ```
    pub fn into_owned(self) -> ChatCompletionChunk<'static> {
        ChatCompletionChunk {
            id: own(self.id),
            object: own(self.object),
            created: self.created,
            model: own(self.model),
            system_fingerprint: own(self.system_fingerprint),
            service_tier: own(self.service_tier),
            choices: self
                .choices
                .into_iter()
                .map(ChunkChoice::into_owned)
                .collect(),
            usage: self.usage,
            prompt_filter_results: self.prompt_filter_results,
            error: self.error,
        }
    }
}

impl ChunkChoice<'_> {
    /// Detaches the choice update from the input it was parsed from.
    ///
    /// ```
    /// use choicewise_proto::wire::ChunkChoice;
    /// let c: ChunkChoice<'static> = ChunkChoice::default().into_owned();
    /// assert!(c.delta.is_none());
    /// ```
    pub fn into_owned(self) -> ChunkChoice<'static> {
        ChunkChoice {
            index: self.index,
            delta: self.delta.map(Delta::into_owned),
            finish_reason: own(self.finish_reason),
            logprobs: self.logprobs,
            content_filter_results: self.content_filter_results,
        }
    }
}

impl Delta<'_> {
    /// Detaches the delta from the input it was parsed from.
    ///
    /// ```
    /// use choicewise_proto::wire::Delta;
    /// let d: Delta<'static> = Delta::default().into_owned();
    /// assert!(d.content.is_none());
    /// ```
    pub fn into_owned(self) -> Delta<'static> {
        Delta {
            role: own(self.role),
            content: own(self.content),
            refusal: own(self.refusal),
            reasoning_content: own(self.reasoning_content),
            reasoning: own(self.reasoning),
            function_call: self.function_call.map(|f| Box::new(f.into_owned())),
            tool_calls: self
                .tool_calls
                .map(|calls| calls.into_iter().map(ToolCallDelta::into_owned).collect()),
        }
    }
}

impl FunctionCallDelta<'_> {
    /// Detaches the fragment from the input it was parsed from.
    ///
    /// ```
    /// use choicewise_proto::wire::FunctionCallDelta;
    /// let f: FunctionCallDelta<'static> = FunctionCallDelta::default().into_owned();
    /// assert!(f.name.is_none());
    /// ```
    pub fn into_owned(self) -> FunctionCallDelta<'static> {
        FunctionCallDelta {
            name: own(self.name),
            arguments: self.arguments.map(Arguments::into_owned),
        }
    }
}

impl ToolCallDelta<'_> {
    /// Detaches the fragment from the input it was parsed from.
    ///
    /// ```
    /// use choicewise_proto::wire::ToolCallDelta;
    /// let t: ToolCallDelta<'static> = ToolCallDelta::default().into_owned();
    /// assert!(t.id.is_none());
    /// ```
    pub fn into_owned(self) -> ToolCallDelta<'static> {
        ToolCallDelta {
            index: self.index,
            id: own(self.id),
            kind: own(self.kind),
            function: self.function.map(FunctionCallDelta::into_owned),
            custom: self.custom.map(|c| CustomCallDelta {
                name: own(c.name),
                input: own(c.input),
            }),
        }
    }
}

fn own(s: Option<Cow<'_, str>>) -> Option<Cow<'static, str>> {
    s.map(|s| Cow::Owned(s.into_owned()))
}

/// An optional string that borrows from the input when it has no escapes. (serde borrows a
/// bare `Cow<str>` field but not one inside an `Option`.)
pub(crate) fn cow_str<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    struct CowVisitor;
    impl<'de> Visitor<'de> for CowVisitor {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_owned())))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v)))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(CowVisitor)
        }
    }
    deserializer.deserialize_option(CowVisitor)
}

/// A value that must be a JSON object: serde's derived impls also accept an array (the
/// fields by position), which no provider sends and which would turn garbage into data.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(ObjectVisitor(std::marker::PhantomData))
            .map(Object)
    }
}

pub(crate) fn opt_object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Object<T>>::deserialize(deserializer)?.map(|o| o.0))
}

fn opt_boxed_object<'de, D, T>(deserializer: D) -> Result<Option<Box<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Object<T>>::deserialize(deserializer)?.map(|o| Box::new(o.0)))
}

pub(crate) fn opt_objects<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let list = Option::<Vec<Object<T>>>::deserialize(deserializer)?;
    Ok(list.map(|v| v.into_iter().map(|o| o.0).collect()))
}

/// A list of objects where `null` means empty.
fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(opt_objects(deserializer)?.unwrap_or_default())
}

/// `created` is an integer by the API's word; accept a float (some servers send one) and
/// ignore anything else rather than reject the whole chunk over a timestamp.
pub(crate) fn lenient_i64<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    struct Lenient;
    impl<'de> Visitor<'de> for Lenient {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a timestamp")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(i64::try_from(v).ok())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v as i64))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Lenient)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                .is_some()
            {}
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    deserializer.deserialize_any(Lenient)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrows_plain_strings_and_owns_escaped_ones() {
        let text = r#"{"choices":[{"index":0,"delta":{"content":"plain","refusal":"esc\"aped"}}]}"#;
        let chunk: ChatCompletionChunk = serde_json::from_str(text).unwrap();
        let delta = chunk.choices[0].delta.as_ref().unwrap();
        assert!(matches!(delta.content, Some(Cow::Borrowed("plain"))));
        assert_eq!(delta.refusal.as_deref(), Some("esc\"aped"));
    }

    #[test]
    fn tolerates_unknown_fields_nulls_and_float_created() {
        let text = r#"{"id":"x","created":1.7e9,"obfuscation":"zz","service_tier":"default",
            "choices":null,"usage":null,"new_field":{"a":[1]}}"#;
        let chunk: ChatCompletionChunk = serde_json::from_str(text).unwrap();
        assert_eq!(chunk.created, Some(1_700_000_000));
        assert!(chunk.choices.is_empty());
        assert!(chunk.usage.is_none());
    }

    #[test]
    fn arguments_as_object_are_serialised_compactly() {
        let text = r#"{"index":0,"function":{"name":"f","arguments":{"a": [1, 2], "b": "c"}}}"#;
        let call: ToolCallDelta = serde_json::from_str(text).unwrap();
        let args = call.function.unwrap().arguments.unwrap();
        assert_eq!(args, Arguments::Json(r#"{"a":[1,2],"b":"c"}"#.to_string()));
    }

    #[test]
    fn negative_index_parses_for_a_typed_error_later() {
        let c: ChunkChoice = serde_json::from_str(r#"{"index":-1,"delta":{}}"#).unwrap();
        assert_eq!(c.index, Some(-1));
    }

    #[test]
    fn round_trips_through_serialize() {
        let text = r#"{"id":"c","choices":[{"index":2,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        let chunk: ChatCompletionChunk = serde_json::from_str(text).unwrap();
        let text = serde_json::to_string(&chunk).unwrap();
        let again: ChatCompletionChunk = serde_json::from_str(&text).unwrap();
        assert_eq!(chunk, again);
    }
}
