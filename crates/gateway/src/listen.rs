//! Serving connections: the accept loop and each connection's bounds.
//!
//! `axum::serve` sets none of the bounds a server facing the network needs, so the gateway
//! drives hyper itself ([`Gateway::serve_on`]):
//! - at most `max_connections` connections are open; one more is closed at once, and logged;
//! - a request head larger than `max_header_bytes` is answered 431 (hyper's read buffer
//!   bound), and one not complete within `header_read_timeout_s` closes its connection;
//! - a connection with no request in flight that receives nothing for
//!   `idle_connection_timeout_s` is closed;
//! - a write the client takes nothing of for `client_stall_timeout_s` fails, which ends the
//!   connection and drops its answer (its samples cancelled, its slot freed), and is
//!   counted in `choicewise_client_stalls_total`;
//! - a client that takes less than `client_min_bytes_per_s` of its answer, over each
//!   `client_stall_timeout_s` the answer spent waiting for it, ends the same way (a slow
//!   drain holds a slot as a stall does), counted in `choicewise_client_slow_drains_total`.
//!
//! The body's own deadline (`body_read_timeout_s`) is the handler's ([`crate::admission::layers`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Sleep;
use tower::ServiceExt;

use crate::admission::Guarded;
use crate::config::Limits;
use crate::state::Gateway;

/// A connection's bounds, in the form the connections use them.
#[derive(Clone, Copy)]
struct Bounds {
    header_read: Duration,
    idle: Duration,
    stall: Duration,
    /// Bytes per second of waiting a client must take (0: no minimum).
    min_rate: f64,
    max_header_bytes: usize,
}

impl Bounds {
    fn of(limits: &Limits) -> Bounds {
        Bounds {
            header_read: Duration::from_secs_f64(limits.header_read_timeout_s),
            idle: Duration::from_secs_f64(limits.idle_connection_timeout_s),
            stall: Duration::from_secs_f64(limits.client_stall_timeout_s),
            min_rate: limits.client_min_bytes_per_s,
            max_header_bytes: limits.max_header_bytes,
        }
    }
}

/// Accepts connections until `stop` resolves, then asks each open one to end once its
/// answer in flight is done, and resolves when the last has closed.
pub(crate) async fn accept_until(
    gateway: Gateway,
    listener: TcpListener,
    stop: impl Future<Output = ()>,
) {
    let limits = &gateway.inner.limits;
    let bounds = Bounds::of(limits);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let router = gateway.service();
    let (ending_tx, ending) = watch::channel(false);
    // Each connection's task holds a sender: `recv` answers `None` once all have ended.
    let (alive, mut all_ended) = mpsc::channel::<()>(1);
    let mut stop = std::pin::pin!(stop);
    loop {
        let tcp = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => (tcp, peer),
                Err(e) => {
                    // Out of file descriptors, or a connection that failed before it was
                    // taken: said once, and the loop goes on after a pause rather than
                    // spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (tcp, peer) = tcp;
        let Ok(slot) = open.clone().try_acquire_owned() else {
            gateway.inner.metrics.connection_refused();
            tracing::warn!(
                max_connections = limits.max_connections,
                "refused a connection: max_connections are open"
            );
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let io = TokioIo::new(Watched::new(
            tcp,
            bounds,
            in_flight.clone(),
            gateway.clone(),
        ));
        let router = router.clone();
        let connection = Arc::new(crate::admission::auth::Connection::new(peer.ip()));
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            in_flight.fetch_add(1, Ordering::AcqRel);
            request
                .extensions_mut()
                .insert(crate::admission::auth::Peer(connection.clone()));
            let guard = InFlight(in_flight.clone());
            let answer = router.clone().oneshot(request.map(Body::new));
            async move {
                let response = answer.await?;
                // The request stays in flight until its answer's body is dropped.
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| Body::new(Guarded { body, guard })),
                )
            }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(bounds.header_read)
            .max_buf_size(bounds.max_header_bytes)
            .keep_alive(true)
            .serve_connection(io, service);
        let mut ending = ending.clone();
        let alive = alive.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _alive = alive;
            let mut connection = std::pin::pin!(connection);
            let ending = async move {
                let _ = ending.wait_for(|e| *e).await;
            };
            tokio::select! {
                _ = connection.as_mut() => {}
                () = ending => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(listener);
    ending_tx.send_replace(true);
    drop(alive);
    let _ = all_ended.recv().await;
}

/// One request in flight on a connection, until dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A client connection with its read and write deadlines.
struct Watched {
    tcp: TcpStream,
    bounds: Bounds,
    in_flight: Arc<AtomicUsize>,
    gateway: Gateway,
    /// Armed while hyper waits to read with no request in flight.
    idle: Option<Pin<Box<Sleep>>>,
    /// Armed while a write waits for the client to take something.
    stalled: Option<Pin<Box<Sleep>>>,
    /// The drain: since when the pending write waits, how long writes waited and how many
    /// bytes the client took since the rate was last checked.
    waiting_since: Option<std::time::Instant>,
    waited: Duration,
    taken: u64,
}

impl Watched {
    fn new(tcp: TcpStream, bounds: Bounds, in_flight: Arc<AtomicUsize>, gateway: Gateway) -> Self {
        Watched {
            tcp,
            bounds,
            in_flight,
            gateway,
            idle: None,
            stalled: None,
            waiting_since: None,
            waited: Duration::ZERO,
            taken: 0,
        }
    }

    /// A write was taken after `Pending`s or not: counts the drain, and fails once the
    /// client took less than the minimum rate over a stall bound's worth of waiting.
    fn taken(&mut self, written: &io::Result<usize>) -> Option<io::Error> {
        self.stalled = None;
        if let Some(since) = self.waiting_since.take() {
            self.waited += since.elapsed();
        }
        if let Ok(n) = written {
            self.taken += *n as u64;
        }
        let (stall, min_rate) = (self.bounds.stall, self.bounds.min_rate);
        if min_rate <= 0.0 || self.waited < stall {
            return None;
        }
        let rate = self.taken as f64 / self.waited.as_secs_f64();
        self.waited = Duration::ZERO;
        self.taken = 0;
        if rate >= min_rate {
            return None;
        }
        self.gateway.inner.metrics.client_drained_slowly();
        tracing::warn!(
            client_min_bytes_per_s = min_rate,
            bytes_per_s = rate as u64,
            "closed a connection whose client drained its answer too slowly"
        );
        Some(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client took its answer slower than client_min_bytes_per_s",
        ))
    }

    /// A write is pending: fails once the client has taken nothing for the stall bound.
    fn poll_stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.waiting_since
            .get_or_insert_with(std::time::Instant::now);
        let stall = self.bounds.stall;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.gateway.inner.metrics.client_stalled();
                tracing::warn!(
                    client_stall_timeout_s = stall.as_secs_f64(),
                    "closed a connection whose client took nothing of its answer"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client took nothing of its answer (client_stall_timeout_s)",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.tcp).poll_read(cx, buf) {
            Poll::Ready(done) => {
                this.idle = None;
                Poll::Ready(done)
            }
            Poll::Pending if this.in_flight.load(Ordering::Acquire) > 0 => {
                this.idle = None;
                Poll::Pending
            }
            Poll::Pending => {
                let idle = this.bounds.idle;
                let timer = this
                    .idle
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request for idle_connection_timeout_s",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.tcp).poll_write(cx, buf) {
            Poll::Ready(done) => match this.taken(&done) {
                Some(slow) => Poll::Ready(Err(slow)),
                None => Poll::Ready(done),
            },
            Poll::Pending => this.poll_stall(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs) {
            Poll::Ready(done) => match this.taken(&done) {
                Some(slow) => Poll::Ready(Err(slow)),
                None => Poll::Ready(done),
            },
            Poll::Pending => this.poll_stall(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Raises the process's soft limit of open files to its hard limit, and warns when
/// `max_connections` could still not all be open.
pub(crate) fn raise_fd_limit(max_connections: usize) {
    #[cfg(unix)]
    {
        match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(limit) => {
                if max_connections as u64 > limit {
                    tracing::warn!(
                        max_connections,
                        open_files_limit = limit,
                        "max_connections exceeds the open-files limit: connections beyond it will fail to be accepted"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not raise the open-files limit"),
        }
    }
    #[cfg(not(unix))]
    let _ = max_connections;
}
