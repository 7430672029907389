//! Admission: what a request passes before it is served. The client's key ([`auth`]), the
//! layers around every route ([`layers`]: the request's id, the body's charge, the memory
//! mark), the gateway's load ([`overload`]) and what one key may hold unsent ([`unsent`]).

pub(crate) mod auth;
pub(crate) mod layers;
pub(crate) mod overload;
pub(crate) mod request_id;
pub(crate) mod unsent;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::sync::Semaphore;

use crate::Limits;
use crate::keyring::KeyRing;
use crate::metrics::Metrics;

/// What the admission layers read of a gateway (their axum state): written once when it is
/// built, its shared parts (limits, keys, metrics) the same as the rest of the gateway reads.
pub(crate) struct Admission {
    pub(crate) limits: Arc<Limits>,
    /// The keys clients may send now; none: no key needed.
    pub(crate) keys: Arc<KeyRing>,
    pub(crate) metrics: Arc<Metrics>,
    /// One per request being served (`max_concurrent_requests`).
    pub(crate) slots: Arc<Semaphore>,
    /// The process-wide memory ceiling (`memory_high_watermark_mb`).
    pub(crate) ceiling: Arc<overload::Ceiling>,
    /// Each key's charges of bodies not yet received (`max_unsent_bytes_per_key`).
    pub(crate) unsent: Arc<unsent::Unsent>,
    /// Without `[auth]`: the web origins whose pages may call the gateway.
    pub(crate) allowed_origins: Vec<String>,
    /// The address the gateway listens on, once it does: a keyless gateway's own `Host`.
    pub(crate) listening: OnceLock<SocketAddr>,
    /// The refusals of the layers and routes, logged at most once a while each kind.
    pub(crate) warnings: crate::upstream::resilience::Warnings,
}

pin_project_lite::pin_project! {
    /// A body that holds `guard` (a slot, a request in flight) until it is dropped.
    pub(crate) struct Guarded<G> {
        #[pin]
        pub(crate) body: Body,
        pub(crate) guard: G,
    }
}

impl<G> http_body::Body for Guarded<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
