//! [`TestServer`], a running server, and the [`RecordedRequest`]s it keeps.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::State;

/// A running server; dropping it stops the server and closes every connection.
///
/// ```
/// use choicewise_testserver::TestServer;
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let server = TestServer::builder().fixture("demo.sse").start().await?;
/// let url = server.base_url();         // http://127.0.0.1:PORT/v1
/// # assert!(url.ends_with("/v1"));
/// assert_eq!(server.request_count(), 0);
/// drop(server);                        // stops accepting, cuts open connections
/// # Ok(()) }
/// ```
pub struct TestServer {
    pub(crate) addr: SocketAddr,
    pub(crate) state: Arc<State>,
    pub(crate) task: JoinHandle<()>,
}

impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .field("requests", &self.request_count())
            .field("connections", &self.connections())
            .finish()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // The accept task owns the connections' tasks (a JoinSet): aborting it ends them all.
        self.task.abort();
    }
}

impl TestServer {
    /// The address it listens on.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_ne!(server.addr().port(), 0);
    /// # Ok(()) }
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI-style base URL, `http://127.0.0.1:PORT/v1`.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_eq!(server.base_url(), format!("http://{}/v1", server.addr()));
    /// # Ok(()) }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Azure-style base URL of a deployment,
    /// `http://127.0.0.1:PORT/openai/deployments/DEPLOYMENT`.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert!(server.azure_base_url("gpt4o").ends_with("/openai/deployments/gpt4o"));
    /// # Ok(()) }
    /// ```
    pub fn azure_base_url(&self, deployment: &str) -> String {
        format!("http://{}/openai/deployments/{deployment}", self.addr)
    }

    /// Every request received so far, in order.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert!(server.requests().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().expect("requests lock").clone()
    }

    /// How many requests were received so far.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_eq!(server.request_count(), 0);
    /// # Ok(()) }
    /// ```
    pub fn request_count(&self) -> usize {
        self.state.requests.lock().expect("requests lock").len()
    }

    /// How many TCP connections were accepted so far.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// let _tcp = tokio::net::TcpStream::connect(server.addr()).await?;
    /// # tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// assert_eq!(server.connections(), 1);
    /// # Ok(()) }
    /// ```
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// How many streamed answers ended because the client went away before their end
    /// (a dropped response, a closed connection), including stalled ones.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_eq!(server.disconnects(), 0);
    /// # Ok(()) }
    /// ```
    pub fn disconnects(&self) -> usize {
        *self.state.disconnects.borrow()
    }

    /// Waits until a client has gone away mid-stream at least once (see
    /// [`disconnects`](Self::disconnects)). Wrap it in a timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_testserver::TestServer;
    /// # use tokio::io::AsyncWriteExt;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().stall_after(0).start().await?;
    /// let mut tcp = tokio::net::TcpStream::connect(server.addr()).await?;
    /// tcp.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}").await?;
    /// # tokio::time::sleep(Duration::from_millis(50)).await;
    /// drop(tcp);
    /// tokio::time::timeout(Duration::from_secs(5), server.client_gone()).await.unwrap();
    /// assert_eq!(server.disconnects(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn client_gone(&self) {
        self.wait_disconnects(1).await;
    }

    /// Waits until [`disconnects`](Self::disconnects) reaches `count`.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// server.wait_disconnects(0).await; // at once
    /// # Ok(()) }
    /// ```
    pub async fn wait_disconnects(&self, count: usize) {
        let mut rx = self.state.disconnects.subscribe();
        // The sender lives in `self.state`, so this only ends when the count is reached.
        let _ = rx.wait_for(|n| *n >= count).await;
    }
}

/// One request as the server received it.
///
/// ```
/// use choicewise_testserver::RecordedRequest;
/// let r = RecordedRequest {
///     method: "POST".into(),
///     path: "/v1/chat/completions".into(),
///     query: Some("api-version=2024-10-21&x=1".into()),
///     headers: vec![("api-key".into(), "k".into())],
///     body: b"{}".to_vec(),
///     json: Some(serde_json::json!({})),
///     connection: 0,
/// };
/// assert_eq!(r.header("API-Key"), Some("k"));
/// assert_eq!(r.query_param("api-version"), Some("2024-10-21"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `POST`, normally.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query string, without `?`.
    pub query: Option<String>,
    /// Every header, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Vec<u8>,
    /// The body as JSON, if it is JSON.
    pub json: Option<Value>,
    /// The number of the connection it came on (0 for the first accepted).
    pub connection: usize,
}

impl RecordedRequest {
    /// The first value of a header (name case-insensitive).
    ///
    /// ```
    /// # use choicewise_testserver::RecordedRequest;
    /// # let r = RecordedRequest { method: "POST".into(), path: "/".into(), query: None,
    /// #     headers: vec![("authorization".into(), "Bearer k".into())], body: vec![], json: None, connection: 0 };
    /// assert_eq!(r.header("Authorization"), Some("Bearer k"));
    /// assert_eq!(r.header("api-key"), None);
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The raw value of a query parameter (not percent-decoded).
    ///
    /// ```
    /// # use choicewise_testserver::RecordedRequest;
    /// # let r = RecordedRequest { method: "POST".into(), path: "/".into(),
    /// #     query: Some("a=1&b=2".into()), headers: vec![], body: vec![], json: None, connection: 0 };
    /// assert_eq!(r.query_param("b"), Some("2"));
    /// assert_eq!(r.query_param("c"), None);
    /// ```
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then_some(v)
        })
    }
}
