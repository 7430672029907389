//! The upstream side: opening a request's samples over its model's upstreams ([`open`]),
//! running and picking among them ([`engine`]), reading no further ahead of the client
//! than it takes ([`pace`]), keeping each upstream's health, retries
//! and budget ([`resilience`]), and who stopped a run's samples ([`stop`]).

pub(crate) mod engine;
pub(crate) mod open;
pub(crate) mod pace;
pub(crate) mod resilience;
pub(crate) mod stop;
