//! The proxy the environment names, over real loopback sockets: an `http` server reached by
//! requests in absolute form to the proxy, an `https` server through a `CONNECT` tunnel (its
//! TLS handshake made through it), each with the proxy's `Proxy-Authorization`, and a server
//! in `NO_PROXY` reached directly. A test binary of its own: it sets the process's proxy
//! variables before any thread starts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use choicewise_client::{Client, ClientErrorKind};
use choicewise_test_support::within;
use choicewise_testserver::TestServer;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod common;

const LIMIT: Duration = Duration::from_secs(15);

/// What a proxy was asked: each request's first line and its `Proxy-Authorization`.
type Asked = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A proxy on `listener` that tunnels `CONNECT host:port` and forwards a request in absolute
/// form to its host, recording each.
fn serve_proxy(listener: TcpListener) -> Asked {
    let asked: Asked = Arc::default();
    let record = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let first = text.lines().next().unwrap_or_default().to_string();
                let auth = text.lines().find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("proxy-authorization")
                        .then(|| value.trim().to_string())
                });
                record.lock().unwrap().push((first.clone(), auth));
                let mut words = first.split(' ');
                let (method, target) = (words.next().unwrap(), words.next().unwrap());
                let (address, forward) = match method {
                    "CONNECT" => (target.to_string(), None),
                    _ => {
                        let rest = target.strip_prefix("http://").unwrap();
                        let host = rest.split('/').next().unwrap().to_string();
                        (host, Some(head))
                    }
                };
                let Ok(mut server) = TcpStream::connect(address).await else {
                    return;
                };
                match forward {
                    None => {
                        let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
                        client.write_all(ok).await.unwrap();
                    }
                    Some(head) => server.write_all(&head).await.unwrap(),
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    asked
}

#[test]
fn the_environments_proxy_is_used_as_curl_uses_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The proxy's port is needed before its variables are set, and those before any thread
    // of the runtime reads the environment: the listener is bound here, served below.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // SAFETY: no other thread of this process reads or writes the environment now: the
    // runtime's workers run no task yet, and this binary has this one test.
    unsafe {
        std::env::set_var("HTTPS_PROXY", format!("http://pu:pw@127.0.0.1:{port}"));
        std::env::set_var("HTTP_PROXY", format!("http://fu:fw@127.0.0.1:{port}"));
        std::env::set_var("NO_PROXY", "127.0.0.1");
        for name in [
            "ALL_PROXY",
            "all_proxy",
            "https_proxy",
            "http_proxy",
            "no_proxy",
        ] {
            std::env::remove_var(name);
        }
    }
    runtime.block_on(async move {
        let asked = serve_proxy(TcpListener::from_std(listener).unwrap());
        let server = TestServer::builder()
            .fixture("demo.sse")
            .start()
            .await
            .unwrap();
        let request = json!({"model": "m", "n": 3, "messages": []});

        // `http` through the proxy: the request in absolute form, with the proxy's key.
        let via = server.base_url().replace("127.0.0.1", "localhost");
        let client = Client::builder().base_url(&via).build().unwrap();
        let completions = within(LIMIT, "chat", client.chat(request.clone()))
            .await
            .unwrap();
        let whole = within(LIMIT, "collect", completions.collect())
            .await
            .unwrap();
        assert_eq!(whole.choices.len(), 3);
        let seen = asked.lock().unwrap().clone();
        let server_port = server
            .base_url()
            .rsplit(':')
            .next()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        assert_eq!(
            seen,
            [(
                format!("POST http://localhost:{server_port}/v1/chat/completions HTTP/1.1"),
                // base64("fu:fw")
                Some("Basic ZnU6Znc=".to_string())
            )]
        );

        // `https` through a tunnel: the TLS handshake is made with the server through it.
        let (tls_port, hellos) = common::untrusted_tls_server().await;
        let client = Client::builder()
            .base_url(format!("https://localhost:{tls_port}/v1"))
            .max_retries(0)
            .build()
            .unwrap();
        let err = within(LIMIT, "chat", client.chat(request.clone()))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ClientErrorKind::Connect, "{err}");
        assert!(err.to_string().contains("TLS handshake failed"), "{err}");
        assert_eq!(hellos.load(std::sync::atomic::Ordering::SeqCst), 1);
        let seen = asked.lock().unwrap().clone();
        assert_eq!(
            seen[1],
            (
                format!("CONNECT localhost:{tls_port} HTTP/1.1"),
                // base64("pu:pw")
                Some("Basic cHU6cHc=".to_string())
            )
        );

        // A server in `NO_PROXY`: straight to it.
        let client = Client::builder()
            .base_url(server.base_url())
            .build()
            .unwrap();
        let completions = within(LIMIT, "chat", client.chat(request)).await.unwrap();
        within(LIMIT, "collect", completions.collect())
            .await
            .unwrap();
        assert_eq!(
            asked.lock().unwrap().len(),
            2,
            "the proxy was asked for a NO_PROXY host"
        );
        assert_eq!(server.request_count(), 2);
    });
}
