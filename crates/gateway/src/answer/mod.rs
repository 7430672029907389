//! The answer: a request's picked samples written to its client, in any client API.
//!
//! Its parts: [`client`] is what a client API must provide ([`client::ClientApi`], the
//! streamed [`client::Encoder`]); [`respond`] answers a pick, streamed through [`write`]'s
//! loop or as one object, framed by its API ([`translated`]: the framing Messages and
//! Responses share); [`ending`] decides how each output and the answer ended; [`closing`]
//! cuts answers at their deadline or the gateway's shutdown; [`finish`] is the request's
//! record.

pub(crate) mod client;
pub(crate) mod closing;
pub(crate) mod ending;
pub(crate) mod finish;
pub(crate) mod respond;
pub(crate) mod translated;
pub(crate) mod write;
