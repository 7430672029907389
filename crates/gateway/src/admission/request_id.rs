//! The id of each request: the client's `x-request-id`, or one made here.

use axum::http::{HeaderName, HeaderValue};

/// Makes the id of a request that came without an `x-request-id`: `req-` then the time
/// and a counter, in hexadecimal (unique within a gateway's life).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RequestIds;

/// The header of a request's id.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

impl RequestIds {
    /// A new id.
    pub(crate) fn made() -> Option<HeaderValue> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut id = String::with_capacity(40);
        id.push_str("req-");
        choicewise_core::chunks::push_hex(&mut id, (nanos & 0xffff_ffff_ffff) as u64, 0);
        choicewise_core::chunks::push_hex(&mut id, n, 4);
        HeaderValue::try_from(id).ok()
    }
}

impl tower_http::request_id::MakeRequestId for RequestIds {
    fn make_request_id<B>(
        &mut self,
        _: &axum::http::Request<B>,
    ) -> Option<tower_http::request_id::RequestId> {
        RequestIds::made().map(tower_http::request_id::RequestId::new)
    }
}
