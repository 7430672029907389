//! The upstream side: opening a request's samples over its model's upstreams ([`open`]),
//! running and picking among them ([`engine`]), reading no further ahead of the client
//! than it takes ([`pace`]), and keeping each upstream's health, retries
//! and budget ([`resilience`]).

pub(crate) mod engine;
pub(crate) mod open;
pub(crate) mod pace;
pub(crate) mod resilience;
