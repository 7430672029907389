//! Admission: what a request passes before it is served. The client's key ([`auth`]), the
//! layers around every route ([`layers`]: the request's id, the body's charge, the memory
//! mark), the gateway's load ([`overload`]) and what one key may hold unsent ([`unsent`]).

pub(crate) mod auth;
pub(crate) mod layers;
pub(crate) mod overload;
pub(crate) mod unsent;
