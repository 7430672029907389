//! The throughput baseline: a byte-for-byte streaming reverse proxy on the gateway's own HTTP
//! stack (axum on hyper serving, hyper-util's pooled client calling the upstream, as
//! `choicewise_client` does), that parses nothing. Each
//! request is forwarded as it came (method, path, headers, body); the upstream's answer comes
//! back with its status and headers, its body streamed through read by read. It runs as a
//! process of its own (`choicewise-bench gateway-proxy`), with as many worker threads as the
//! gateway's (`#[tokio::main]`: one per CPU).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

struct Proxy {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

async fn forward(State(proxy): State<Arc<Proxy>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = parts.headers;
    headers.remove(header::HOST);
    headers.remove(header::CONTENT_LENGTH);
    let Ok(uri) = format!("{}{path}", proxy.upstream).parse::<axum::http::Uri>() else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut request = axum::http::Request::new(Full::new(body));
    *request.method_mut() = parts.method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    let Ok(answer) = proxy.client.request(request).await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != header::TRANSFER_ENCODING
            && name != header::CONNECTION
            && name != header::CONTENT_LENGTH
        {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::new(answer.into_body()))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// Serves the proxy on `listen` in front of `upstream` (`http://HOST:PORT`) until the process
/// ends, saying `listening on http://ADDR` on stderr once it accepts connections.
/// Each accepted connection gets `TCP_NODELAY`, as the gateway's `serve` sets it.
pub fn serve(listen: &str, upstream: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    rt.block_on(async {
        let proxy = Arc::new(Proxy {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build({
                let mut tcp = HttpConnector::new();
                tcp.set_nodelay(true);
                tcp
            }),
        });
        let app = axum::Router::new().fallback(forward).with_state(proxy);
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("its address");
        eprintln!("listening on http://{addr}");
        use axum::serve::ListenerExt;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await.expect("serve the proxy");
    });
}
