//! The HTTP exchange under [`Client`](crate::Client): hyper's pooled HTTP/1.1 client over
//! rustls (the ring provider, webpki-roots' Mozilla roots), and nothing between it and the
//! client's own policies. The client decides its retries, timeouts and redirects (none) and
//! knows its URLs when it is built, so each request is one `http::Request` handed to the
//! pool: no URL parsed, no layer of redirect or retry policy crossed, per request.
//!
//! A proxy the environment names for the server (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
//! `NO_PROXY`, read as curl reads them, when the client is built) is used as curl uses it: an
//! `https` server through a `CONNECT` tunnel, an `http` server by requests in absolute form
//! sent to the proxy; the proxy's `user:password@` as `Proxy-Authorization`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tower_service::Service;
use url::Url;

/// Silence on a connection before the kernel's first keep-alive probe, and between probes.
const KEEPALIVE: Duration = Duration::from_secs(15);

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
    /// The `Host` header its requests carry, made once: what hyper's client would write for
    /// `uri` on every request (its host, and its port unless the scheme's default).
    host: Option<HeaderValue>,
}

impl Target {
    /// The URI requests are sent to.
    pub(crate) fn uri(&self) -> &Uri {
        &self.uri
    }

    /// `url` as a target; `None` if it is not a URI HTTP can send.
    pub(crate) fn new(url: Url) -> Option<Self> {
        let mut bare = url.clone();
        let _ = bare.set_username("");
        let _ = bare.set_password(None);
        let uri = bare.as_str().parse().ok()?;
        let shown = redact(&url).into();
        let host = host_header(&uri);
        Some(Target {
            url,
            uri,
            shown,
            host,
        })
    }
}

/// The `Host` header for `uri`, as hyper's pooled client writes it when a request has none:
/// the host, with `:port` unless the port is the scheme's default (443 for `https` and
/// `wss`, 80 otherwise).
fn host_header(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let secure = matches!(uri.scheme_str(), Some("https" | "wss"));
    let value = match uri.port_u16() {
        Some(443) if secure => host.to_owned(),
        Some(80) if !secure => host.to_owned(),
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    HeaderValue::from_str(&value).ok()
}

/// `url` without what may be a secret: its user name and password, its query (`?api-key=`)
/// and its fragment.
fn redact(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

/// The `Authorization: Basic` header of a URL's `user:password@`, if it has a user name.
fn basic_authorization(url: &Url) -> Option<HeaderValue> {
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

/// How the client's connections reach its server.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Route {
    /// Straight to the server.
    Direct,
    /// An `https` server through a `CONNECT` tunnel of the proxy at `proxy`.
    Tunnel {
        /// The proxy.
        proxy: Uri,
        /// Its `Proxy-Authorization`, from its `user:password@`.
        auth: Option<HeaderValue>,
    },
    /// An `http` server by requests in absolute form to the proxy at `proxy` (their
    /// `Proxy-Authorization` is a header of each request: [`Route::request_header`]).
    Forward {
        /// The proxy.
        proxy: Uri,
        /// Its `Proxy-Authorization`, from its `user:password@`.
        auth: Option<HeaderValue>,
    },
    /// A proxy this client cannot use (not `http://`): every connection fails, naming it
    /// (without its credentials), rather than going around it.
    Unusable(String),
}

impl Route {
    /// The route the environment's proxy variables give to `server`, as curl reads them.
    pub(crate) fn from_env(server: &Uri) -> Route {
        Route::by(&Matcher::from_env(), server)
    }

    /// The route `proxies` give to `server`.
    fn by(proxies: &Matcher, server: &Uri) -> Route {
        let Some(intercept) = proxies.intercept(server) else {
            return Route::Direct;
        };
        let proxy = intercept.uri().clone();
        if proxy.scheme_str() != Some("http") {
            let shown = format!(
                "{}://{}",
                proxy.scheme_str().unwrap_or("?"),
                proxy.host().unwrap_or("?")
            );
            return Route::Unusable(shown);
        }
        let auth = intercept.basic_auth().cloned().map(|mut v| {
            v.set_sensitive(true);
            v
        });
        match server.scheme_str() {
            Some("https") => Route::Tunnel { proxy, auth },
            _ => Route::Forward { proxy, auth },
        }
    }

    /// The header each request carries on this route: a forwarding proxy's
    /// `Proxy-Authorization`.
    pub(crate) fn request_header(&self) -> Option<(http::HeaderName, HeaderValue)> {
        match self {
            Route::Forward {
                auth: Some(auth), ..
            } => Some((http::header::PROXY_AUTHORIZATION, auth.clone())),
            _ => None,
        }
    }
}

/// A connection, and whether it goes to a forwarding proxy (to which hyper's client then
/// sends requests in absolute form).
pub(crate) struct Conn {
    io: TokioIo<TcpStream>,
    forwarded: bool,
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.forwarded)
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// TCP connections along a [`Route`]. Runs once a new connection, never on a pooled one.
#[derive(Clone)]
pub(crate) struct Connector {
    tcp: HttpConnector,
    route: Route,
}

impl Service<Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each call works on a clone of the TCP connector, which is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, server: Uri) -> Self::Future {
        let mut tcp = self.tcp.clone();
        match self.route.clone() {
            Route::Direct => Box::pin(async move {
                let io = tcp.call(server).await?;
                Ok(Conn {
                    io,
                    forwarded: false,
                })
            }),
            Route::Tunnel { proxy, auth } => Box::pin(async move {
                let mut tunnel = Tunnel::new(proxy, tcp);
                if let Some(auth) = auth {
                    tunnel = tunnel.with_auth(auth);
                }
                std::future::poll_fn(|cx| tunnel.poll_ready(cx)).await?;
                let io = tunnel.call(server).await?;
                Ok(Conn {
                    io,
                    forwarded: false,
                })
            }),
            Route::Forward { proxy, .. } => Box::pin(async move {
                let io = tcp.call(proxy).await?;
                Ok(Conn {
                    io,
                    forwarded: true,
                })
            }),
            Route::Unusable(proxy) => Box::pin(async move {
                Err(
                    format!("the proxy {proxy} the environment names is not an http:// proxy")
                        .into(),
                )
            }),
        }
    }
}

/// The connection pool the client's requests share.
#[derive(Clone)]
pub(crate) struct Transport {
    pool: Pool<HttpsConnector<Connector>, Full<Bytes>>,
}

impl Transport {
    /// A pool that connects along `route` within `connect_timeout`, keeps at most `max_idle`
    /// idle connections to a host, each for `idle_lifetime`; an error if TLS cannot be set up.
    pub(crate) fn new(
        route: Route,
        connect_timeout: Duration,
        max_idle: usize,
        idle_lifetime: Duration,
    ) -> Result<Self, BoxError> {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(connect_timeout));
        // A peer gone without a word (a NAT's forgotten mapping, a dead host) is found by
        // the kernel: keep-alive probes after 15 s of silence, every 15 s, 3 of them; data
        // sent and not acknowledged for 30 s ends the connection.
        tcp.set_keepalive(Some(KEEPALIVE));
        tcp.set_keepalive_interval(Some(KEEPALIVE));
        tcp.set_keepalive_retries(Some(3));
        tcp.set_tcp_user_timeout(Some(Duration::from_secs(30)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(Connector { tcp, route });
        let pool = Pool::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_max_idle_per_host(max_idle)
            .pool_idle_timeout(idle_lifetime)
            .build(https);
        Ok(Transport { pool })
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
        if let Some(host) = &target.host {
            // Made once for the target, rather than formatted by the pool on each request.
            (request.headers_mut().entry(http::header::HOST)).or_insert_with(|| host.clone());
        }
        self.pool.request(request).await.map_err(|e| {
            if e.is_connect() {
                Failure::Connect {
                    timed_out: timed_out(&e),
                    source: Box::new(e),
                }
            } else {
                Failure::Request(Box::new(e))
            }
        })
    }
}

/// Whether `error`, or one of its causes, is a timeout (the connect timeout's).
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    chain(error).any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    })
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
    fn the_host_header_is_the_one_the_pool_would_write() {
        let host = |url: &str| {
            let target = Target::new(Url::parse(url).unwrap()).unwrap();
            target.host.map(|h| h.to_str().unwrap().to_owned())
        };
        assert_eq!(host("http://127.0.0.1:8080/v1").unwrap(), "127.0.0.1:8080");
        assert_eq!(host("https://h.example/v1").unwrap(), "h.example");
        assert_eq!(host("https://h.example:443/v1").unwrap(), "h.example");
        assert_eq!(host("http://h.example:80/").unwrap(), "h.example");
        assert_eq!(host("https://h.example:8443/").unwrap(), "h.example:8443");
        assert_eq!(host("https://h.example:80/").unwrap(), "h.example:80");
        assert_eq!(host("http://h.example:443/").unwrap(), "h.example:443");
        assert_eq!(host("http://[::1]:9000/x").unwrap(), "[::1]:9000");
        assert_eq!(host("http://u:p@h.example:81/").unwrap(), "h.example:81");
    }

    #[test]
    fn credentials_and_queries_are_not_shown() {
        let url = Url::parse("https://user:pw@h.example:8443/v1/x?api-key=k#f").unwrap();
        assert_eq!(redact(&url), "https://h.example:8443/v1/x");
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
    fn the_route_follows_the_proxies_as_curl_does() {
        let proxies = Matcher::builder()
            .https("http://pu:pw@127.0.0.1:3128")
            .http("http://127.0.0.1:3129")
            .no("localhost, .internal")
            .build();
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        match Route::by(&proxies, &uri("https://api.example/v1")) {
            Route::Tunnel { proxy, auth } => {
                assert_eq!(proxy, uri("http://127.0.0.1:3128"));
                // base64("pu:pw")
                assert_eq!(auth.unwrap(), "Basic cHU6cHc=");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Route::by(&proxies, &uri("http://api.example/v1")),
            Route::Forward {
                proxy: uri("http://127.0.0.1:3129"),
                auth: None
            }
        );
        assert_eq!(
            Route::by(&proxies, &uri("http://localhost:8000/v1")),
            Route::Direct
        );
        assert_eq!(
            Route::by(&proxies, &uri("https://llm.internal/v1")),
            Route::Direct
        );
        let socks = Matcher::builder()
            .all("socks5://u:secret@10.0.0.1:1080")
            .build();
        match Route::by(&socks, &uri("https://api.example/v1")) {
            Route::Unusable(shown) => assert_eq!(shown, "socks5://10.0.0.1"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Route::by(&Matcher::builder().build(), &uri("https://a/")),
            Route::Direct
        );
    }

    #[test]
    fn a_timeout_is_found_among_the_causes() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("tcp connect error")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let timed = Outer(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let refused = Outer(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(timed_out(&timed));
        assert!(!timed_out(&refused));
    }

    #[test]
    fn a_chain_is_said_once_each() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let outer = std::io::Error::other(inner);
        // `io::Error::other` says its source's text itself: said once.
        assert_eq!(describe(&outer), "refused");
    }
}
