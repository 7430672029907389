//! Who a request comes from: a keyless gateway's own `Host`, and the client's identity for the
//! ejection rules (the keys themselves: [`crate::keys`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::response::Response;

use crate::admission::Admission;
use crate::error::ApiError;
use crate::keys::{self, Caller, Keys, given_key};
use crate::upstream::resilience;

/// Whether `host` (a `Host` header) names a gateway listening on `listening` on loopback:
/// `localhost`, `127.0.0.1`, `[::1]` or the address it listens on, with the port it listens on
/// when it names one and the gateway knows its own.
pub(crate) fn loopback_host(listening: Option<&SocketAddr>, host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => (name, Some(port)),
        _ => (host, None),
    };
    // The listen address written out only for a name that is none of the loopback's.
    let own = || {
        listening.map(|a| match a.ip() {
            IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        })
    };
    let known = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .any(|n| n.eq_ignore_ascii_case(name))
        || own().as_deref() == Some(name);
    let port_ok = match (port, listening) {
        (Some(port), Some(addr)) => port.parse::<u16>().ok() == Some(addr.port()),
        (Some(port), None) => port.parse::<u16>().is_ok(),
        (None, _) => true,
    };
    known && port_ok
}

/// Who a request comes from ([`client_of`]), worked out once: the admission layer keeps it
/// in the request's extensions, where the handler's record finds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Client(pub(crate) resilience::ClientId);

/// Who the request of these `headers` and `extensions` comes from: as the admission layer
/// found it ([`Client`]), else [`client_of`] its key or its peer.
pub(crate) fn client(
    keys: &Keys,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    extensions: &axum::http::Extensions,
) -> resilience::ClientId {
    match extensions.get::<Client>() {
        Some(client) => client.0,
        None => {
            let peer = extensions.get::<Peer>().map(|p| p.0.ip);
            client_of(keys, headers, uri, peer)
        }
    }
}

/// Who a request comes from, for the ejection rules (`resilience::Health`): a hash of its key
/// when `keys` are configured, else of its connection's peer address (its IP: a client's
/// several connections are one client); one anonymous client for a router served without the
/// gateway's own listener.
pub(crate) fn client_of(
    keys: &Keys,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    peer: Option<IpAddr>,
) -> resilience::ClientId {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    if keys.is_empty() {
        peer.hash(&mut hasher);
    } else {
        given_key(headers, uri).hash(&mut hasher);
    }
    hasher.finish()
}

/// The connection a request came on, set on every request the gateway's own listener
/// serves: its peer's address (who a keyless gateway's request comes from), and the key its
/// last request was found to be ([`Connection`]).
#[derive(Debug, Clone)]
pub(crate) struct Peer(pub(crate) Arc<Connection>);

/// One client connection: its peer's address, and what the key sent on its last request
/// was found to be. A client sends the same key on every request of a kept-alive
/// connection; that key, sent again, is known by a comparison of its bytes (in constant
/// time) rather than found again by its SHA-256. What is remembered holds only while the
/// gateway's keys are the ones it was found among (they are swapped whole when any
/// changes), and a key past its expiry is never known.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) ip: IpAddr,
    known: Mutex<Option<Known>>,
}

/// A key sent on a connection, and who it was found to be.
struct Known {
    given: Box<[u8]>,
    /// The keys it was found among: their allocation, held so that no later keys take
    /// its address while this is kept.
    keys: Weak<Keys>,
    caller: Caller,
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Known")
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection from `ip`, no key known yet.
    pub(crate) fn new(ip: IpAddr) -> Connection {
        Connection {
            ip,
            known: Mutex::new(None),
        }
    }

    /// Who `given` is, if it is the key this connection's last request sent and `keys`
    /// are the ones it was found among (and, named, it has not expired since).
    fn known(&self, keys: &Arc<Keys>, given: &[u8]) -> Option<Caller> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let known = known.as_ref()?;
        let fresh =
            std::ptr::eq(known.keys.as_ptr(), Arc::as_ptr(keys)) && keys::same(&known.given, given);
        match &known.caller {
            _ if !fresh => None,
            Caller::Named(key) if key.expires_ms.is_some() && key.expired(keys::now_ms()) => None,
            caller => Some(caller.clone()),
        }
    }

    /// `given` found among `keys` to be `caller`.
    fn remember(&self, keys: &Arc<Keys>, given: &[u8], caller: &Caller) {
        let known = Known {
            given: given.into(),
            keys: Arc::downgrade(keys),
            caller: caller.clone(),
        };
        *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(known);
    }
}

/// The key of a request's answer ([`keys::Caller::label`]), set by the key's layer
/// for the count of [`count`](super::layers::count).
#[derive(Debug, Clone)]
pub(crate) struct KeyLabel(pub keys::Caller);

/// The key's check ([`auth`](super::layers::auth)): the caller, kept in the request's
/// extensions (none without keys), or why it is refused.
pub(crate) fn authorized(
    gate: &Admission,
    request: &mut Request,
) -> Result<Option<keys::Caller>, ApiError> {
    let keys = gate.keys.load();
    if keys.is_empty() {
        // No key to check, and nobody to name: the handler reads an absent caller as
        // `Caller::Open`.
        return Ok(None);
    }
    let connection = request.extensions().get::<Peer>().map(|p| p.0.clone());
    let given = given_key(request.headers(), request.uri());
    let caller = match (connection, given) {
        (Some(connection), Some(given)) => match connection.known(&keys, given.as_bytes()) {
            Some(caller) => caller,
            None => {
                let caller = keys.authorize(request.headers(), request.uri())?;
                connection.remember(&keys, given.as_bytes(), &caller);
                caller
            }
        },
        _ => keys.authorize(request.headers(), request.uri())?,
    };
    drop(keys);
    request.extensions_mut().insert(caller.clone());
    Ok(Some(caller))
}

/// An answer with its caller named, for its count by key.
pub(crate) fn labelled(mut response: Response, caller: Option<keys::Caller>) -> Response {
    if let Some(caller) = caller {
        response.extensions_mut().insert(KeyLabel(caller));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{NamedKey, now_ms, sha256};

    fn keys(later_ms: u64) -> Arc<Keys> {
        let mut soon = NamedKey::new("soon", sha256(b"sk-soon"), None, vec![]);
        soon.expires_ms = Some(later_ms);
        Arc::new(Keys::new(
            true,
            vec!["sk-old".into()],
            vec![NamedKey::new("team-a", sha256(b"sk-a"), None, vec![]), soon],
        ))
    }

    fn name(caller: Option<Caller>) -> Option<String> {
        caller.map(|c| c.label().to_string())
    }

    /// A connection whose last request sent `secret`, found among `keys` to be `named`.
    fn remembered(keys: &Arc<Keys>, named: &str, secret: &[u8]) -> Connection {
        let connection = Connection::new(IpAddr::from([127, 0, 0, 1]));
        let caller = Caller::Named(keys.get(named).unwrap().clone());
        connection.remember(keys, secret, &caller);
        connection
    }

    #[test]
    fn a_connection_knows_the_key_it_last_sent_while_the_keys_are_the_same() {
        let now = keys(now_ms() + 60_000);
        let fresh = Connection::new(IpAddr::from([127, 0, 0, 1]));
        assert!(fresh.known(&now, b"sk-a").is_none());
        let connection = remembered(&now, "team-a", b"sk-a");
        assert_eq!(name(connection.known(&now, b"sk-a")), Some("team-a".into()));
        // Another key, one byte apart or a prefix: not known.
        assert!(connection.known(&now, b"sk-b").is_none());
        assert!(connection.known(&now, b"sk-").is_none());
        assert!(connection.known(&now, b"sk-aa").is_none());
        // The same key among other keys (any change swaps them whole): not known, found
        // again by its digest.
        let changed = keys(now_ms() + 60_000);
        assert!(connection.known(&changed, b"sk-a").is_none());
        // An unnamed key is remembered as one.
        connection.remember(&now, b"sk-old", &Caller::Unnamed);
        assert_eq!(
            name(connection.known(&now, b"sk-old")),
            Some(crate::keys::UNNAMED.into())
        );
        assert!(connection.known(&now, b"sk-a").is_none());
    }

    #[test]
    fn a_key_past_its_expiry_is_never_known() {
        // Before its expiry, known; the same key past it (its keys as they were), not.
        let later = keys(now_ms() + 60_000);
        let connection = remembered(&later, "soon", b"sk-soon");
        assert_eq!(
            name(connection.known(&later, b"sk-soon")),
            Some("soon".into())
        );
        let past = keys(now_ms() - 1);
        let connection = remembered(&past, "soon", b"sk-soon");
        assert!(connection.known(&past, b"sk-soon").is_none());
    }

    #[test]
    fn what_a_connection_knows_never_shows_the_key() {
        let now = keys(now_ms() + 60_000);
        let connection = remembered(&now, "team-a", b"sk-a");
        let shown = format!("{connection:?}");
        assert!(shown.contains("team-a"), "{shown}");
        assert!(!shown.contains("sk-a"), "{shown}");
    }
}
