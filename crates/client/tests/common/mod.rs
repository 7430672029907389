//! Servers of the transport's tests, on loopback.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::TcpListener;
use tokio_rustls::rustls;

/// An HTTPS server on `localhost` whose certificate (self-signed) no public root vouches for:
/// its port, and the count of handshakes begun (each a ClientHello that reached it).
pub async fn untrusted_tls_server() -> (u16, Arc<AtomicUsize>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hellos = Arc::new(AtomicUsize::new(0));
    let seen = hellos.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let config = config.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let start =
                    tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp)
                        .await;
                if let Ok(start) = start {
                    seen.fetch_add(1, Ordering::SeqCst);
                    // The client refuses the certificate: the handshake fails there.
                    let _ = start.into_stream(config).await;
                }
            });
        }
    });
    (port, hellos)
}
