//! Upstreams as the tests feed them: SSE events, and the bytes cut into reads.

use std::fmt::Display;

use futures::Stream;
use serde_json::json;

/// The event that ends a Chat Completions stream.
pub const DONE: &str = "data: [DONE]\n\n";

/// One SSE event carrying `data` (a chunk's JSON, usually): `data: DATA` and a blank line.
///
/// ```
/// use choicewise_test_support::sse_chunk;
/// let chunk = serde_json::json!({"choices": []});
/// assert_eq!(sse_chunk(&chunk), "data: {\"choices\":[]}\n\n");
/// ```
pub fn sse_chunk(data: impl Display) -> String {
    format!("data: {data}\n\n")
}

/// A whole stream: an event for each chunk, in order, then [`DONE`].
///
/// ```
/// use choicewise_test_support::sse_stream;
/// assert_eq!(sse_stream(["{}", "{}"]), "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n");
/// ```
pub fn sse_stream<D: Display>(chunks: impl IntoIterator<Item = D>) -> String {
    let mut out = String::new();
    for chunk in chunks {
        out.push_str(&sse_chunk(chunk));
    }
    out.push_str(DONE);
    out
}

/// The event of a chunk with one update of choice `index`: a piece of content and the finish
/// reason (`null` when `None`). The index is an `i64` so that a test can send one out of range.
///
/// ```
/// use choicewise_test_support::content_chunk;
/// let event = content_chunk(1, "hi", None);
/// let data = event.strip_prefix("data: ").unwrap().strip_suffix("\n\n").unwrap();
/// let chunk: serde_json::Value = serde_json::from_str(data).unwrap();
/// assert_eq!(chunk["choices"][0]["index"], 1);
/// assert_eq!(chunk["choices"][0]["delta"]["content"], "hi");
/// assert!(chunk["choices"][0]["finish_reason"].is_null());
/// ```
pub fn content_chunk(index: i64, text: &str, finish: Option<&str>) -> String {
    sse_chunk(
        json!({"choices": [{"index": index, "delta": {"content": text}, "finish_reason": finish}]}),
    )
}

/// Cuts `bytes` into reads of the given sizes, cycling through them.
///
/// ```
/// use choicewise_test_support::split;
/// assert_eq!(split(b"abcdef", &[1, 2]), [&b"a"[..], b"bc", b"d", b"ef"]);
/// ```
pub fn split(bytes: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut reads = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let n = sizes[i % sizes.len()].max(1).min(bytes.len() - at);
        reads.push(bytes[at..at + n].to_vec());
        at += n;
        i += 1;
    }
    reads
}

/// The read splits every fixture is also run under: whole, single bytes, and sizes that are
/// prime (so they cut lines, CRLFs and multi-byte characters at every phase).
pub const SPLITS: &[&[usize]] = &[&[usize::MAX], &[1], &[2, 3, 5], &[7, 64, 13], &[4096]];

/// The reads as an upstream byte stream that never fails, as `Source::sse`
/// takes it.
///
/// ```
/// use futures::StreamExt;
/// use choicewise_test_support::{split, upstream};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let reads: Vec<_> = upstream(split(b"data: x\n\n", &[4])).collect().await;
/// assert_eq!(reads.len(), 3);
/// # }
/// ```
pub fn upstream(
    reads: Vec<Vec<u8>>,
) -> impl Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + Unpin + 'static {
    futures::stream::iter(reads.into_iter().map(Ok))
}
