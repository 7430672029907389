//! An upstream that refuses connections, for the tests of failures to connect.

/// An upstream that refuses connections: its base URL (`http://127.0.0.1:PORT/v1`) and the
/// socket holding its port, bound and never listened on. Keep the socket alive for as long
/// as the URL is used: no server started later is then given the same port. (A port found
/// free and let go could be handed to the next server bound to port 0, which would answer in
/// place of the refusal.)
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let (url, _held) = choicewise_test_support::refusing();
/// let addr = url.trim_start_matches("http://").trim_end_matches("/v1");
/// let refused = tokio::net::TcpStream::connect(addr).await.unwrap_err();
/// assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
/// # }
/// ```
pub fn refusing() -> (String, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("a port of 127.0.0.1");
    let port = socket
        .local_addr()
        .expect("a bound socket's address")
        .port();
    (format!("http://127.0.0.1:{port}/v1"), socket)
}
