//! Per-choice streams from async-openai's chat stream (feature `async-openai`).

#[cfg(doc)]
use choicewise_core::Completions;
use choicewise_core::Source;
use choicewise_core::wire::ChatCompletionChunk;
use futures::{Stream, StreamExt};

use async_openai::types::chat::CreateChatCompletionStreamResponse;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// async-openai's chat stream (what `client.chat().create_stream(request).await?` returns, a
/// stream of `Result<CreateChatCompletionStreamResponse, OpenAIError>`) as a [`Source`], for
/// per-choice streams without changing the HTTP client (`Completions::new(source)`). Each chunk goes through a JSON round trip into
/// [`choicewise_core::wire::ChatCompletionChunk`]; fields async-openai does not model (vLLM's
/// `reasoning`, DeepSeek's `reasoning_content`, Azure's filter results) are lost on the way,
/// which is one reason to prefer [`Client`](crate::Client).
///
/// An error item of the stream ends the completion with
/// [`choicewise_core::ErrorDetail::Transport`]; the end of the stream is the end of the completion.
///
/// ```
/// use async_openai::types::chat::CreateChatCompletionStreamResponse;
/// use choicewise_client::async_openai_source;
/// use choicewise_core::Completions;
///
/// # #[tokio::main] async fn main() {
/// // In real code: `let stream = openai.chat().create_stream(request).await?;`
/// let chunks: Vec<CreateChatCompletionStreamResponse> = [
///     r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"content":"B"},"finish_reason":"stop"}]}"#,
///     r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"A"},"finish_reason":"stop"}]}"#,
/// ].iter().map(|c| serde_json::from_str(c).unwrap()).collect();
/// let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
///
/// let completions = Completions::new(async_openai_source(stream));
/// let whole = completions.collect().await.unwrap();
/// assert_eq!(whole.choices[0].message.content.as_deref(), Some("A"));
/// assert_eq!(whole.choices[1].message.content.as_deref(), Some("B"));
/// # }
/// ```
pub fn async_openai_source<S, E>(stream: S) -> Source
where
    S: Stream<Item = Result<CreateChatCompletionStreamResponse, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    Source::parsed(stream.map(|item| match item {
        Ok(chunk) => convert(&chunk),
        Err(e) => Err(Box::new(e) as BoxError),
    }))
}

/// One async-openai chunk as a choicewise chunk, through JSON.
fn convert(
    chunk: &CreateChatCompletionStreamResponse,
) -> Result<ChatCompletionChunk<'static>, BoxError> {
    let json = serde_json::to_string(chunk)?;
    let parsed: ChatCompletionChunk<'_> = serde_json::from_str(&json)?;
    Ok(parsed.into_owned())
}
