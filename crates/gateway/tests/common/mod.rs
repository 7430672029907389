//! What the gateway's loopback tests share: a gateway served on 127.0.0.1, and an upstream
//! sample that stalls.

use std::net::SocketAddr;

use choicewise_gateway::{Config, Gateway};
use choicewise_testserver::{TestServer, TestServerBuilder, answer};

/// A gateway of this configuration (TOML), its environment read from `env`, served on a free
/// port of 127.0.0.1 with its connection bounds ([`Gateway::serve_on`]); and the gateway
/// itself.
pub async fn serve(toml: &str, env: impl Fn(&str) -> Option<String>) -> (SocketAddr, Gateway) {
    let config = Config::from_toml(toml).unwrap();
    let gateway = Gateway::with_env(&config, env).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = gateway.clone();
    tokio::spawn(async move { served.serve_on(listener, std::future::pending()).await });
    (addr, gateway)
}

/// A sample that sends `events` events, then stalls as long as the client stays.
#[allow(dead_code)] // not every test binary that shares this module stalls an upstream
pub fn stalled(events: usize) -> TestServerBuilder {
    TestServer::builder()
        .body(answer("let me think about it"))
        .stall_after_events(events)
}

/// An upstream that refuses connections, its port held (the workspace's test kit).
#[allow(unused_imports)] // not every test binary that shares this module needs one
pub use choicewise_test_support::refusing;

/// An upstream that takes connections and never answers (no first byte): its base URL.
#[allow(dead_code)] // not every test binary that shares this module needs one
pub async fn silent() -> String {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0; 65536];
                while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    format!("http://{addr}/v1")
}

/// An upstream that reads each request, answers `head` (a status line and its headers,
/// without the blank line that ends them) and then sends nothing more while the connection
/// stays: its base URL.
#[allow(dead_code)] // not every test binary that shares this module needs one
pub async fn head_then_silent(head: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut byte = [0u8; 1];
                while !seen.ends_with(b"\r\n\r\n") {
                    if !matches!(tcp.read(&mut byte).await, Ok(1)) {
                        return;
                    }
                    seen.push(byte[0]);
                }
                let _ = tcp.write_all(head.as_bytes()).await;
                let _ = tcp.write_all(b"\r\n\r\n").await;
                let mut buf = vec![0; 65536];
                while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    format!("http://{addr}/v1")
}

/// A line of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`); 0 where there is none.
#[allow(dead_code)] // not every test binary that shares this module reads its memory
pub fn status_bytes(key: &str) -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Resets the resident set's peak (`VmHWM`) to the resident set now; whether it could.
#[allow(dead_code)] // not every test binary that shares this module reads its memory
pub fn reset_rss_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}
