//! The client's own HTTP transport over real loopback sockets: TLS verified against the
//! Mozilla roots (a server's self-signed certificate refused as a TLS failure, after a real
//! handshake), a base URL's `user:password@` sent as Basic authorization and never in the
//! request line, the user agent, a connection refused named as such, and the sockets' TCP
//! keep-alive read back from the kernel.

use std::sync::atomic::Ordering;
use std::time::Duration;

use choicewise_client::{Client, ClientErrorKind};
use choicewise_test_support::within;
use choicewise_testserver::TestServer;
use serde_json::json;

mod common;

const LIMIT: Duration = Duration::from_secs(15);

fn request() -> serde_json::Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
}

/// An HTTPS server on loopback whose certificate (for `localhost`, self-signed) no public root
/// vouches for: the client's handshake reaches it, and refuses the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_a_tls_failure_after_a_real_handshake() {
    let (port, hellos) = common::untrusted_tls_server().await;
    let client = Client::builder()
        .base_url(format!("https://localhost:{port}/v1"))
        .max_retries(0)
        .build()
        .unwrap();
    let err = within(LIMIT, "a refused certificate", client.chat(request()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Connect, "{err}");
    let text = err.to_string();
    assert!(text.contains("TLS handshake failed"), "{text}");
    assert!(text.to_ascii_lowercase().contains("certificate"), "{text}");
    assert!(
        hellos.load(Ordering::SeqCst) >= 1,
        "no ClientHello reached the server"
    );
}

/// `http://user:password@host/...`: the credentials go as `Authorization: Basic`, never in
/// the request line; an API key's `Authorization` wins over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_urls_credentials_go_as_basic_authorization() {
    let server = TestServer::builder()
        .fixture("demo.sse")
        .start()
        .await
        .unwrap();
    let base = server
        .base_url()
        .replacen("http://", "http://us%40er:p%3Aw@", 1);
    let client = Client::builder().base_url(&base).build().unwrap();
    let completions = within(LIMIT, "chat", client.chat(request())).await.unwrap();
    within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    let keyed = Client::builder()
        .base_url(&base)
        .api_key("sk-k")
        .build()
        .unwrap();
    let completions = within(LIMIT, "chat", keyed.chat(request())).await.unwrap();
    within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    let requests = server.requests();
    // base64("us@er:p:w")
    assert_eq!(
        requests[0].header("authorization"),
        Some("Basic dXNAZXI6cDp3")
    );
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk-k"));
    for r in &requests {
        assert_eq!(r.path, "/v1/chat/completions");
        let host = r.header("host").unwrap();
        assert!(!host.contains('@'), "{host}");
        // The server's own address and port.
        assert_eq!(Some(host), server.base_url().split('/').nth(2), "{host}");
        let agent = r.header("user-agent").unwrap();
        assert!(agent.starts_with("choicewise-client/"), "{agent}");
    }
}

/// A port nobody listens on: a `Connect` error that says the connection was refused and
/// names the URL without its credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let client = Client::builder()
        .base_url(format!(
            "http://u:secret@127.0.0.1:{port}/v1?api-key=secret"
        ))
        .max_retries(0)
        .build()
        .unwrap();
    let err = within(LIMIT, "a refused connection", client.chat(request()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Connect, "{err}");
    let text = format!("{err} {err:?}");
    assert!(text.contains("connection refused"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{port}/v1/chat/completions")),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
}

/// A connection's socket finds a silent peer gone as the kernel can: keep-alive probes after
/// 15 s of silence, every 15 s, 3 of them, and data unacknowledged for 30 s ends it. Read back
/// from the pooled connection's own socket (Linux: `/proc/self/fd`).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_kept_alive_by_the_kernel() {
    use std::os::fd::BorrowedFd;
    let server = TestServer::builder()
        .fixture("demo.sse")
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .build()
        .unwrap();
    let completions = within(LIMIT, "chat", client.chat(request())).await.unwrap();
    within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    let address = server.addr();
    let mut checked = 0;
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let Ok(fd) = entry.unwrap().file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: only read: the client's pooled connection stays open while `client` lives;
        // any other descriptor closed meanwhile makes these reads fail, and is skipped.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        let Ok(peer) = socket.peer_addr() else {
            continue;
        };
        if peer.as_socket() != Some(address) {
            continue;
        }
        assert!(socket.keepalive().unwrap());
        assert_eq!(
            socket.tcp_keepalive_time().unwrap(),
            Duration::from_secs(15)
        );
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(15)
        );
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 3);
        assert_eq!(
            socket.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(30))
        );
        assert!(socket.tcp_nodelay().unwrap());
        checked += 1;
    }
    assert_eq!(
        checked, 1,
        "the client's one pooled connection to the server"
    );
    drop(client);
}
