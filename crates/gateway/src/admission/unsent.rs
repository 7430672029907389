//! What one key may hold of the memory ceiling for bodies it has not sent yet
//! (`max_unsent_bytes_per_key`).
//!
//! A body is charged as it arrives ([`super::layers`]): its head's share before any byte,
//! more as its bytes come. A request whose body is still arriving holds that charge however
//! slowly it sends, so one key's many idle uploads could hold the whole ceiling and leave
//! every other key a 503. Each key's (without `[auth]`, each peer address's) charges of
//! bodies not yet received are counted here: past the cap, that key's next request, or its
//! upload whose charge would grow past it, is refused with 429 and `Retry-After`, naming the
//! limit, while the other keys' requests are admitted as before. A request alone is never
//! refused by the cap (its body's size is `max_body_bytes`' to bound), only one beside the
//! key's other unsent bodies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;

use crate::error::ApiError;
use crate::upstream::resilience::ClientId;

/// Every key's charges of bodies not yet received.
#[derive(Debug)]
pub(crate) struct Unsent {
    /// The most one key may hold (0: no cap).
    cap: u64,
    /// Hashed with foldhash: an insert and a removal every request.
    held: Mutex<HashMap<ClientId, u64, foldhash::fast::RandomState>>,
}

/// Why a request was refused: what its key held besides it, and the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverCap {
    pub held: u64,
    pub asked: u64,
    pub cap: u64,
}

/// One request's share of its key's unsent charges, released when dropped (its body
/// received, or the request gone).
#[derive(Debug)]
pub(crate) struct Hold {
    unsent: Arc<Unsent>,
    client: ClientId,
    bytes: u64,
}

impl Unsent {
    /// A count whose keys may each hold at most `cap` bytes unsent (0: no cap).
    pub(crate) fn new(cap: u64) -> Unsent {
        Unsent {
            cap,
            held: Mutex::new(HashMap::default()),
        }
    }

    /// `client`'s request holds `bytes` of unsent charge, or is refused for it.
    pub(crate) fn hold(self: &Arc<Self>, client: ClientId, bytes: u64) -> Result<Hold, OverCap> {
        let mut hold = Hold {
            unsent: self.clone(),
            client,
            bytes: 0,
        };
        hold.grow(bytes)?;
        Ok(hold)
    }

    /// What `client` holds now.
    #[cfg(test)]
    fn of(&self, client: ClientId) -> u64 {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(&client).copied().unwrap_or(0)
    }
}

impl Hold {
    /// The request now holds `bytes` in all (more or less than before): more is refused when
    /// its key's other unsent charges and it would pass the cap.
    pub(crate) fn grow(&mut self, bytes: u64) -> Result<(), OverCap> {
        let unsent = &self.unsent;
        let mut held = unsent.held.lock().unwrap_or_else(|e| e.into_inner());
        let total = held.entry(self.client).or_insert(0);
        let others = *total - self.bytes;
        if bytes > self.bytes && unsent.cap > 0 && others > 0 && others + bytes > unsent.cap {
            if *total == 0 {
                held.remove(&self.client);
            }
            return Err(OverCap {
                held: others,
                asked: bytes,
                cap: unsent.cap,
            });
        }
        *total = others + bytes;
        self.bytes = bytes;
        if *total == 0 {
            held.remove(&self.client);
        }
        Ok(())
    }
}

impl Hold {
    /// The bytes it holds.
    pub(crate) fn held(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = (self.unsent.held.lock()).unwrap_or_else(|e| e.into_inner());
        if let Some(total) = held.get_mut(&self.client) {
            *total = total.saturating_sub(self.bytes);
            if *total == 0 {
                held.remove(&self.client);
            }
        }
    }
}

impl OverCap {
    /// The client's 429, with `Retry-After`.
    pub(crate) fn error(&self) -> ApiError {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            format!(
                "this key's requests whose bodies have not arrived yet hold {} bytes of the \
                 gateway's memory, and this one would take {} more: above \
                 max_unsent_bytes_per_key ({}). Finish or close those uploads, or retry later",
                self.held, self.asked, self.cap
            ),
        )
        .code("unsent_bytes_per_key")
        .wait(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_the_cap_beside_its_other_uploads() {
        let unsent = Arc::new(Unsent::new(100));
        let (a, b) = (1, 2);
        // Alone, any size.
        let big = unsent.hold(a, 500).unwrap();
        assert_eq!(unsent.hold(a, 1).unwrap_err().held, 500);
        drop(big);
        assert_eq!(unsent.of(a), 0);
        let first = unsent.hold(a, 60).unwrap();
        let mut second = unsent.hold(a, 40).unwrap();
        let refused = unsent.hold(a, 1).unwrap_err();
        assert_eq!((refused.held, refused.asked, refused.cap), (100, 1, 100));
        assert_eq!(refused.error().status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            refused
                .error()
                .message
                .contains("max_unsent_bytes_per_key (100)")
        );
        // Another key is not counted with it.
        let other = unsent.hold(b, 100).unwrap();
        // A hold grows within the cap, and shrinks at once.
        assert!(second.grow(41).is_err());
        assert_eq!(unsent.of(a), 100);
        second.grow(10).unwrap();
        assert_eq!(unsent.of(a), 70);
        drop((first, second, other));
        assert_eq!((unsent.of(a), unsent.of(b)), (0, 0));
        assert!(
            unsent.held.lock().unwrap().is_empty(),
            "no key is kept once it holds nothing"
        );
        // No cap.
        let open = Arc::new(Unsent::new(0));
        let _held: Vec<Hold> = (0..10).map(|_| open.hold(a, 1 << 30).unwrap()).collect();
    }
}
