//! The options of a [`Client`]: [`ClientBuilder`], the [`Dialect`] it speaks, the defaults, and
//! the endpoint URLs it builds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT,
};
use url::Url;

use crate::transport::{Route, Target, Transport, authorize_from_url};

use choicewise_core::Dialect;
use choicewise_core::upstream::{Authorisation, Framing};

use crate::sigv4::{AwsCredentials, Signer};
use crate::{Client, ClientError, ClientErrorKind, Inner};

#[cfg(doc)]
use choicewise_core::Completions;

/// The default base URL, OpenAI's API.
///
/// ```
/// assert!(choicewise_client::DEFAULT_BASE_URL.starts_with("https://"));
/// ```
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The default connect timeout.
///
/// ```
/// assert_eq!(choicewise_client::DEFAULT_CONNECT_TIMEOUT.as_secs(), 10);
/// ```
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default idle timeout.
///
/// ```
/// assert_eq!(choicewise_client::DEFAULT_IDLE_TIMEOUT.as_secs(), 60);
/// ```
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default number of retries.
///
/// ```
/// assert_eq!(choicewise_client::DEFAULT_MAX_RETRIES, 2);
/// ```
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// The default cap on one wait before a retry.
///
/// ```
/// assert_eq!(choicewise_client::DEFAULT_MAX_RETRY_WAIT.as_secs(), 20);
/// ```
pub const DEFAULT_MAX_RETRY_WAIT: Duration = Duration::from_secs(20);

/// The most idle connections a client keeps for reuse
/// ([`ClientBuilder::max_idle_connections`]).
///
/// ```
/// assert_eq!(choicewise_client::DEFAULT_MAX_IDLE_CONNECTIONS, 32);
/// ```
pub const DEFAULT_MAX_IDLE_CONNECTIONS: usize = 32;

/// How long an idle connection is kept for reuse. The pool looks for expired connections
/// once per lifetime, so one closes between one and two lifetimes after it went idle.
///
/// ```
/// assert_eq!(choicewise_client::IDLE_CONNECTION_LIFETIME.as_secs(), 60);
/// ```
pub const IDLE_CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// The Anthropic API version sent with [`Dialect::Anthropic`] requests (`anthropic-version`),
/// unless a [`header`](ClientBuilder::header) of that name is given.
///
/// ```
/// use choicewise_client::Dialect;
/// assert_eq!(choicewise_client::ANTHROPIC_VERSION, "2023-06-01");
/// let header = Dialect::Anthropic.api().version_header();
/// assert_eq!(header, Some(("anthropic-version", choicewise_client::ANTHROPIC_VERSION)));
/// ```
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Options of a [`Client`].
///
/// ```
/// use std::time::Duration;
/// use choicewise_client::Client;
///
/// let client = Client::builder()
///     .base_url("https://example-resource.openai.azure.com/openai/deployments/gpt-4o")
///     .azure("2024-10-21")
///     .api_key("...")
///     .header("x-ms-client-request-id", "7a0f...")
///     .connect_timeout(Duration::from_secs(5))
///     .idle_timeout(Duration::from_secs(30))
///     .max_retries(3)
///     .max_retry_wait(Duration::from_secs(10))
///     .build()
///     .unwrap();
/// assert_eq!(client.url(),
///     "https://example-resource.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21");
/// ```
#[derive(Clone)]
pub struct ClientBuilder {
    api: Dialect,
    /// `None`: the API's provider's.
    base_url: Option<String>,
    api_key: Option<String>,
    azure: Option<String>,
    headers: Vec<(String, String)>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_retries: u32,
    max_retry_wait: Duration,
    retry_server_errors: bool,
    max_concurrent: Option<usize>,
    max_idle: usize,
    model: Option<String>,
    /// The credentials of an API whose requests are signed (Bedrock's).
    aws: Option<AwsCredentials>,
    /// The region its requests are signed for (and its base URL's, when none is given).
    region: Option<String>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("azure", &self.azure)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_retries", &self.max_retries)
            .field("max_retry_wait", &self.max_retry_wait)
            .field("retry_server_errors", &self.retry_server_errors)
            .field("max_concurrent", &self.max_concurrent)
            .field("model", &self.model)
            .field("aws", &self.aws)
            .field("region", &self.region)
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            api: Dialect::Chat,
            base_url: None,
            api_key: None,
            azure: None,
            headers: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            max_retry_wait: DEFAULT_MAX_RETRY_WAIT,
            retry_server_errors: false,
            max_concurrent: None,
            max_idle: DEFAULT_MAX_IDLE_CONNECTIONS,
            model: None,
            aws: None,
            region: None,
        }
    }
}

impl ClientBuilder {
    /// Which API to speak (default [`Dialect::Chat`]): the endpoint under the base URL
    /// and how the key is sent.
    ///
    /// ```
    /// # use choicewise_client::{Client, Dialect};
    /// let client = Client::builder().api(Dialect::Responses).build().unwrap();
    /// assert_eq!(client.url(), "https://api.openai.com/v1/responses");
    /// ```
    pub fn api(mut self, api: Dialect) -> Self {
        self.api = api;
        self
    }

    /// The API's base URL; requests go to `{base_url}/chat/completions` (default: the API's
    /// provider's, [`DEFAULT_BASE_URL`] for OpenAI's APIs). In Azure mode, the deployment's URL,
    /// `https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT`.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().base_url("http://localhost:8000/v1/").build().unwrap();
    /// assert_eq!(client.url(), "http://localhost:8000/v1/chat/completions");
    /// ```
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// The model of an API that names it in its URL rather than in the request's body:
    /// Gemini's ([`Dialect::Gemini`]), whose requests go to
    /// `{base_url}/models/{model}:streamGenerateContent?alt=sse`; required for it, unused by
    /// the others.
    ///
    /// ```
    /// # use choicewise_client::{Client, Dialect};
    /// let client = Client::builder()
    ///     .api(Dialect::Gemini)
    ///     .base_url("https://generativelanguage.googleapis.com/v1beta")
    ///     .model("gemini-2.5-flash")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(client.url(), "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    /// assert!(Client::builder().api(Dialect::Gemini).build().is_err(), "no model");
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The API key: sent as `Authorization: Bearer KEY`, as `api-key: KEY` in Azure mode, as
    /// `x-api-key: KEY` to the Anthropic API ([`Dialect::Anthropic`]), or as
    /// `x-goog-api-key: KEY` to the Gemini API ([`Dialect::Gemini`]) (default: none).
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().api_key("sk-...").build().unwrap();
    /// assert!(!format!("{client:?}").contains("sk-"));
    /// ```
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Azure OpenAI mode: the key goes in an `api-key` header and every request carries
    /// `?api-version=API_VERSION`; [`base_url`](Self::base_url) is then the deployment's URL.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder()
    ///     .base_url("https://r.openai.azure.com/openai/deployments/gpt-4o")
    ///     .azure("2024-10-21")
    ///     .build()
    ///     .unwrap();
    /// assert!(client.url().ends_with("/gpt-4o/chat/completions?api-version=2024-10-21"));
    /// ```
    pub fn azure(mut self, api_version: impl Into<String>) -> Self {
        self.azure = Some(api_version.into());
        self
    }

    /// The AWS credentials that sign every request of an API whose requests are signed
    /// (Bedrock's: SigV4), with the [`region`](Self::region) they are signed for. Without
    /// them such an API's requests carry the [`api_key`](Self::api_key) as a bearer token
    /// (a Bedrock API key), or nothing.
    ///
    /// ```
    /// use choicewise_client::{AwsCredentials, Client, Dialect};
    /// let client = Client::builder()
    ///     .api(Dialect::Bedrock)
    ///     .model("anthropic.claude-3-5-haiku-20241022-v1:0")
    ///     .region("eu-west-1")
    ///     .aws_credentials(AwsCredentials::new("AKIDEXAMPLE", "secret"))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(client.url(), "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream");
    /// ```
    pub fn aws_credentials(mut self, credentials: AwsCredentials) -> Self {
        self.aws = Some(credentials);
        self
    }

    /// The region of an API served per region (Bedrock's): where its requests are signed
    /// for, and its base URL when none is given.
    ///
    /// ```
    /// use choicewise_client::{AwsCredentials, Client, Dialect};
    /// let signed = Client::builder().api(Dialect::Bedrock).model("m")
    ///     .aws_credentials(AwsCredentials::new("AKID", "secret"));
    /// assert!(signed.clone().build().is_err(), "no region to sign for");
    /// assert!(signed.region("us-west-2").build().is_ok());
    /// ```
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into()).filter(|r| !r.is_empty());
        self
    }

    /// An extra header sent with every request (e.g. `OpenAI-Organization`); checked by
    /// [`build`](Self::build).
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().header("OpenAI-Organization", "org-123").build();
    /// assert!(client.is_ok());
    /// ```
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// How long establishing a connection (TCP and TLS) may take (default 10 s); a timeout
    /// counts as a failed connection and is retried.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_client::Client;
    /// let client = Client::builder().connect_timeout(Duration::from_secs(3)).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The longest silence allowed (default 60 s): waiting this long for the response headers
    /// fails the request with a [`ClientErrorKind::Timeout`] error; receiving no byte of the body for this
    /// long ends the stream with [`choicewise_core::ErrorDetail::IdleTimeout`] (keep-alive comments
    /// count as bytes).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_client::Client;
    /// let client = Client::builder().idle_timeout(Duration::from_secs(20)).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How many times a request is retried (default 2; see [the retry policy](crate#retries)).
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().max_retries(0).build();   // never retry
    /// assert!(client.is_ok());
    /// ```
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Also retries a request answered `408`, `500`, `502`, `504` or `529` (beside `429`
    /// and `503`), as a gateway does between its upstreams: such a status comes before any
    /// answer, though the server may have begun work it then dropped (default `false`: the
    /// library retries only what certainly produced nothing; see
    /// [the retry policy](crate#retries)). `choicewise chat --retries` turns it on.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().max_retries(2).retry_server_errors(true).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn retry_server_errors(mut self, on: bool) -> Self {
        self.retry_server_errors = on;
        self
    }

    /// The longest wait before a retry (default 20 s): caps the backoff, and a response
    /// whose `Retry-After` asks for longer is returned at once rather than retried (the
    /// server said no try passes sooner).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_client::Client;
    /// let client = Client::builder().max_retry_wait(Duration::from_secs(5)).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn max_retry_wait(mut self, wait: Duration) -> Self {
        self.max_retry_wait = wait;
        self
    }

    /// The most requests of this client (and its clones) streaming at once (default: no
    /// limit): a request waits for a free slot before it is sent and keeps it until its
    /// answer's body is dropped (its stream ended, or nobody wants it). A fan-out of many
    /// sources then runs `limit` at a time.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().max_concurrent_requests(4).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn max_concurrent_requests(mut self, limit: usize) -> Self {
        self.max_concurrent = Some(limit.max(1));
        self
    }

    /// The most idle connections kept open for reuse (default 32). A burst of many requests
    /// opens as many connections; past the burst, only this many stay open (each for at most
    /// 60 s), so that a server or gateway comes back to its idle memory.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().max_idle_connections(8).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn max_idle_connections(mut self, count: usize) -> Self {
        self.max_idle = count;
        self
    }

    /// Checks the settings and builds the client.
    ///
    /// ```
    /// # use choicewise_client::{Client, ClientErrorKind};
    /// assert!(Client::builder().build().is_ok());
    /// assert!(Client::builder().base_url("").build().is_err_and(|e| e.kind() == ClientErrorKind::InvalidUrl));
    /// ```
    pub fn build(self) -> Result<Client, ClientError> {
        let api = self.api.api();
        let regional = (self.region.as_deref()).and_then(|r| api.regional_base_url(r));
        let base_url = (self.base_url.as_deref())
            .or(regional.as_deref())
            .unwrap_or(api.default_base_url());
        if self.azure.is_some() && self.api != Dialect::Chat {
            return Err(ClientError::invalid(
                ClientErrorKind::InvalidUrl,
                format!(
                    "{base_url:?}: Azure mode serves Chat Completions only, not {}",
                    self.api
                ),
            ));
        }
        let url = match (api.path_names_model(), self.model.as_deref()) {
            (true, None | Some("")) => {
                return Err(ClientError::invalid(
                    ClientErrorKind::InvalidUrl,
                    format!(
                        "{:?}: the {} API names the model in the URL: give the model",
                        base_url, self.api
                    ),
                ));
            }
            (true, Some(model)) => endpoint(base_url, None, &api.endpoint_for(model))?,
            (false, _) => endpoint(base_url, self.azure.as_deref(), api.endpoint())?,
        };
        let url = match api.stream_query() {
            Some((name, value)) => {
                let mut url = url;
                url.query_pairs_mut().append_pair(name, value);
                url
            }
            None => url,
        };
        let models_url = endpoint(base_url, self.azure.as_deref(), "models")?;
        let count_url = (api.count_endpoint())
            .map(|path| endpoint(base_url, None, path))
            .transpose()?;
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ClientError::invalid(ClientErrorKind::InvalidHeader, format!("name {name:?}"))
            })?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                ClientError::invalid(ClientErrorKind::InvalidHeader, format!("value of {name}"))
            })?;
            headers.append(name, value);
        }
        if let Some((name, value)) = api.version_header()
            && !headers.contains_key(name)
        {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        // A signed API's requests are signed at each try, with the credentials given, for
        // the region given.
        let signer = match (api.authorisation(), &self.aws) {
            (Authorisation::SigV4 { service }, Some(credentials)) => {
                let Some(region) = self.region.as_deref() else {
                    return Err(ClientError::invalid(
                        ClientErrorKind::InvalidRequest,
                        format!(
                            "the {} API signs its requests for a region: give the region",
                            self.api
                        ),
                    ));
                };
                Some(Signer::new(credentials, region, service))
            }
            _ => None,
        };
        if let Some(key) = self.api_key.as_ref().filter(|_| signer.is_none()) {
            // The API's own key header (Anthropic's `x-api-key`, Gemini's `x-goog-api-key`),
            // else `Authorization: Bearer` (a signed API's key too: Bedrock's API keys).
            let (name, value) = match (self.azure.as_ref(), api.authorisation()) {
                (Some(_), _) => (HeaderName::from_static("api-key"), key.clone()),
                (None, Authorisation::KeyHeader(header)) => {
                    (HeaderName::from_static(header), key.clone())
                }
                (None, _) => (AUTHORIZATION, format!("Bearer {key}")),
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                ClientError::invalid(ClientErrorKind::InvalidHeader, "the API key".to_string())
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        if !headers.contains_key(USER_AGENT) {
            headers.insert(
                USER_AGENT,
                HeaderValue::from_static(concat!("choicewise-client/", env!("CARGO_PKG_VERSION"))),
            );
        }
        // A base URL's `user:password@` is sent as Basic authorization, never in the URI.
        authorize_from_url(&mut headers, &url);
        let target = |url: Url| {
            Target::new(url).ok_or_else(|| {
                ClientError::invalid(
                    ClientErrorKind::InvalidUrl,
                    format!("{base_url:?}: not a URI HTTP can send"),
                )
            })
        };
        let url = target(url)?;
        // The proxy the environment names for the server, as curl reads it.
        let route = Route::from_env(url.uri());
        if let Some((name, value)) = route.request_header() {
            headers.insert(name, value);
        }
        let mut stream_headers = headers.clone();
        let accept = match api.framing() {
            Framing::EventStream => "application/vnd.amazon.eventstream",
            _ => "text/event-stream",
        };
        stream_headers.insert(ACCEPT, HeaderValue::from_static(accept));
        stream_headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        // Only the configured server is ever called: a redirect would re-send the prompt,
        // and its key, to another host. A 3xx is the server's failure, with its status.
        let transport = Transport::new(
            route,
            self.connect_timeout,
            self.max_idle,
            IDLE_CONNECTION_LIFETIME,
        )
        .map_err(|e| ClientError::request(None, e))?;
        Ok(Client {
            inner: Arc::new(Inner {
                transport,
                url,
                models_url: target(models_url)?,
                count_url: count_url.map(target).transpose()?,
                headers,
                stream_headers,
                azure: self.azure,
                api: self.api,
                has_key: self.api_key.is_some() || signer.is_some(),
                signer,
                idle_timeout: self.idle_timeout,
                max_retries: self.max_retries,
                max_retry_wait: self.max_retry_wait,
                retry_server_errors: self.retry_server_errors,
                slots: (self.max_concurrent).map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
            }),
        })
    }

    /// A builder set from the environment: `OPENAI_BASE_URL` (if set and not empty) and
    /// `OPENAI_API_KEY` (if set and not empty).
    ///
    /// ```no_run
    /// # use choicewise_client::ClientBuilder;
    /// let client = ClientBuilder::from_env().build().unwrap();
    /// ```
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut builder = ClientBuilder::default();
        if let Some(url) = var("OPENAI_BASE_URL") {
            builder = builder.base_url(url.trim());
        }
        if let Some(key) = var("OPENAI_API_KEY") {
            builder = builder.api_key(key.trim());
        }
        builder
    }
}

/// `{base}/PATH` (`chat/completions`, `models`), with `?api-version=` in Azure mode.
fn endpoint(base: &str, azure: Option<&str>, path: &str) -> Result<Url, ClientError> {
    let invalid =
        |why: &str| ClientError::invalid(ClientErrorKind::InvalidUrl, format!("{base:?}: {why}"));
    let mut url = Url::parse(base.trim()).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("not http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    if url.cannot_be_a_base() {
        return Err(invalid("not a base URL"));
    }
    // The endpoint's path as the API writes it: a segment it percent-encoded itself
    // (Bedrock's model id, `v1%3A0`) is sent so, not encoded again.
    let joined = format!("{}/{path}", url.path().trim_end_matches('/'));
    url.set_path(&joined);
    if let Some(version) = azure {
        url.query_pairs_mut().append_pair("api-version", version);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let url =
            |base: &str, azure| endpoint(base, azure, "chat/completions").map(|u| u.to_string());
        assert_eq!(
            url("https://api.openai.com/v1", None).unwrap(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            url("http://h:1/v1/", None).unwrap(),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            url(
                "https://r.openai.azure.com/openai/deployments/d",
                Some("2024-10-21")
            )
            .unwrap(),
            "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21"
        );
        for bad in ["", "api.openai.com/v1", "ftp://x/v1", "mailto:a@b"] {
            assert!(
                url(bad, None).is_err_and(|e| e.kind() == ClientErrorKind::InvalidUrl),
                "{bad}"
            );
        }
    }

    #[test]
    fn each_api_has_its_endpoint_and_key_header() {
        let build = |api| {
            Client::builder()
                .api(api)
                .base_url("http://h:1/v1")
                .api_key("k")
                .build()
                .unwrap()
        };
        let chat = build(Dialect::Chat);
        assert_eq!(chat.url(), "http://h:1/v1/chat/completions");
        assert_eq!(chat.inner.headers["authorization"], "Bearer k");
        let responses = build(Dialect::Responses);
        assert_eq!(responses.url(), "http://h:1/v1/responses");
        assert_eq!(responses.inner.headers["authorization"], "Bearer k");
        let messages = build(Dialect::Anthropic);
        assert_eq!(messages.url(), "http://h:1/v1/messages");
        assert_eq!(messages.inner.headers["x-api-key"], "k");
        assert_eq!(
            messages.inner.headers["anthropic-version"],
            ANTHROPIC_VERSION
        );
        assert!(!messages.inner.headers.contains_key("authorization"));
        let gemini = Client::builder()
            .api(Dialect::Gemini)
            .base_url("http://h:1/v1beta/")
            .model("gemini-2.5-pro")
            .api_key("k")
            .build()
            .unwrap();
        assert_eq!(
            gemini.url(),
            "http://h:1/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        assert_eq!(gemini.inner.headers["x-goog-api-key"], "k");
        assert!(!gemini.inner.headers.contains_key("authorization"));
        let e = Client::builder().api(Dialect::Gemini).build().unwrap_err();
        assert_eq!(e.kind(), ClientErrorKind::InvalidUrl);
        assert!(e.to_string().contains("names the model in the URL"), "{e}");
        let pinned = Client::builder()
            .api(Dialect::Anthropic)
            .header("anthropic-version", "2024-01-01")
            .build()
            .unwrap();
        assert_eq!(pinned.inner.headers["anthropic-version"], "2024-01-01");
        let azure = Client::builder()
            .api(Dialect::Responses)
            .azure("2024-10-21")
            .build();
        assert!(azure.is_err_and(|e| e.kind() == ClientErrorKind::InvalidUrl));
    }

    #[test]
    fn without_a_base_url_each_api_goes_to_its_provider() {
        let url = |api| {
            let client = Client::builder().api(api).model("m").build().unwrap();
            client.url().to_string()
        };
        assert_eq!(
            url(Dialect::Chat),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            url(Dialect::Responses),
            "https://api.openai.com/v1/responses"
        );
        assert_eq!(
            url(Dialect::Anthropic),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            url(Dialect::Gemini),
            "https://generativelanguage.googleapis.com/v1beta/models/m:streamGenerateContent?alt=sse"
        );
    }
}
