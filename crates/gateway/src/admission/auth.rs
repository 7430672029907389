//! Who a request comes from: a keyless gateway's own `Host`, and the client's identity for the
//! ejection rules (the keys themselves: [`crate::keys`]).

use std::net::{IpAddr, SocketAddr};

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::response::Response;

use crate::admission::Admission;
use crate::error::ApiError;
use crate::keys::{self, Keys, given_key};
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
            let peer = extensions.get::<Peer>().map(|p| p.0);
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

/// The peer address of a request's connection (its IP), set on every request the gateway's
/// own listener serves: who a keyless gateway's request comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) std::net::IpAddr);

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
    let caller = keys.authorize(request.headers(), request.uri())?;
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
