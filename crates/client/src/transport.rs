//! The HTTP exchange under [`Client`](crate::Client): hyper's pooled HTTP/1.1 client over
//! rustls (the ring provider, webpki-roots' Mozilla roots), and nothing between it and the
//! client's own policies. The client decides its retries, timeouts and redirects (none) and
//! knows its URLs when it is built, so each request is one `http::Request` handed to the
//! pool: no URL parsed, no layer of redirect or retry policy crossed, per request.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use url::Url;

/// A boxed error: the cause a [`Failure`] carries.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An answer's head, its body still to be read.
pub(crate) type Response = http::Response<Incoming>;

/// Where requests go: the URL (what errors name, redacted) and the URI sent, which carries no
/// credentials (a URL's `user:password@` goes as a header instead).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The URL as configured.
    pub(crate) url: Url,
    /// `url` without its user name and password.
    uri: Uri,
    /// `url` as errors name it: without its credentials, query or fragment.
    pub(crate) shown: Arc<str>,
}

impl Target {
    /// `url` as a target; `None` if it is not a URI HTTP can send.
    pub(crate) fn new(url: Url) -> Option<Self> {
        let mut bare = url.clone();
        let _ = bare.set_username("");
        let _ = bare.set_password(None);
        let uri = bare.as_str().parse().ok()?;
        let shown = crate::error::redact(&url).into();
        Some(Target { url, uri, shown })
    }
}

/// The `Authorization: Basic` header of a URL's `user:password@`, if it has a user name.
pub(crate) fn basic_authorization(url: &Url) -> Option<HeaderValue> {
    use base64::Engine;
    if url.username().is_empty() {
        return None;
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let pair = format!(
        "{}:{}",
        decode(url.username()),
        url.password().map(decode).unwrap_or_default()
    );
    let text = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    );
    let mut value = HeaderValue::from_str(&text).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Adds the base URL's `user:password@` to `headers` as Basic authorization, unless they
/// already authorize (an API key's `Authorization: Bearer` wins).
pub(crate) fn authorize_from_url(headers: &mut HeaderMap, url: &Url) {
    if !headers.contains_key(AUTHORIZATION)
        && let Some(value) = basic_authorization(url)
    {
        headers.insert(AUTHORIZATION, value);
    }
}

/// Why an exchange failed before its answer's head arrived.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No connection: refused, no such host, a TLS failure, or the connect timeout
    /// (`timed_out`).
    Connect {
        /// The connect timeout passed.
        timed_out: bool,
        /// The cause, innermost last in its chain.
        source: BoxError,
    },
    /// The connection was made, and the exchange failed on it.
    Request(BoxError),
}

/// The connection pool the client's requests share.
#[derive(Clone)]
pub(crate) struct Transport {
    pool: Pool<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Transport {
    /// A pool that connects within `connect_timeout`, keeps at most `max_idle` idle
    /// connections to a host, each for `idle_lifetime`.
    pub(crate) fn new(connect_timeout: Duration, max_idle: usize, idle_lifetime: Duration) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(connect_timeout));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports rustls' default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let pool = Pool::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_max_idle_per_host(max_idle)
            .pool_idle_timeout(idle_lifetime)
            .build(https);
        Transport { pool }
    }

    /// `GET` (no `body`) or `POST` `body` to `target` with `headers`: the answer's head.
    pub(crate) async fn send(
        &self,
        target: &Target,
        headers: &HeaderMap,
        body: Option<Bytes>,
    ) -> Result<Response, Failure> {
        let method = match body {
            Some(_) => Method::POST,
            None => Method::GET,
        };
        let mut request = Request::new(Full::new(body.unwrap_or_default()));
        *request.method_mut() = method;
        *request.uri_mut() = target.uri.clone();
        *request.headers_mut() = headers.clone();
        self.pool.request(request).await.map_err(|e| {
            if e.is_connect() {
                let timed_out = chain(&e).any(|c| {
                    c.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
                });
                Failure::Connect {
                    timed_out,
                    source: Box::new(e),
                }
            } else {
                Failure::Request(Box::new(e))
            }
        })
    }
}

/// `error` and its sources, outermost first.
pub(crate) fn chain<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| e.source())
}

/// An error's chain in one line, each cause once: `client error (Connect): tcp connect
/// error: Connection refused (os error 111)`.
pub(crate) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    for cause in chain(error) {
        let said = cause.to_string();
        if said.is_empty() || text.contains(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_credentials_go_as_a_header_not_in_the_uri() {
        let url = Url::parse("https://us%40er:p%3Aw@h.example:8443/v1/x?api-key=k").unwrap();
        let target = Target::new(url).unwrap();
        assert_eq!(
            target.uri.to_string(),
            "https://h.example:8443/v1/x?api-key=k"
        );
        // base64("us@er:p:w")
        let value = basic_authorization(&target.url).unwrap();
        assert_eq!(value.to_str().unwrap(), "Basic dXNAZXI6cDp3");
        assert!(value.is_sensitive());
        assert!(basic_authorization(&Url::parse("http://h/").unwrap()).is_none());
    }

    #[test]
    fn a_key_wins_over_a_urls_credentials() {
        let url = Url::parse("http://u:p@h/").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer k"));
        authorize_from_url(&mut headers, &url);
        assert_eq!(headers[AUTHORIZATION], "Bearer k");
        let mut none = HeaderMap::new();
        authorize_from_url(&mut none, &url);
        assert_eq!(none[AUTHORIZATION], "Basic dTpw");
    }

    #[test]
    fn a_chain_is_said_once_each() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let outer = std::io::Error::other(inner);
        // `io::Error::other` says its source's text itself: said once.
        assert_eq!(describe(&outer), "refused");
    }
}
