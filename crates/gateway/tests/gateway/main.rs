//! The gateway's tests over real loopback HTTP, one module per subject, in one test binary
//! (one link rather than one per file, one set of builders in `common`). The tests that read
//! process-wide figures (the heap, the resident set) are in `tests/memory`, a binary of
//! their own, since tests running beside them in one process would move those figures.
//!
//! The tests that need outside programs are ignored by a plain `cargo test`; CI runs them by
//! module: `cargo test -p choicewise-gateway --test gateway -- --ignored arith::` (the
//! arithmetic model's llama.cpp server), `clients::` (the official SDKs), `agents::` (the
//! coding agents).

// One test a core, libtest's default: these tests hold real sockets, real delays and the
// order things arrive in, and two a core at once (`waiting_tests!`) gave two of them, each
// once, a machine slower than their margins in CI.

#[path = "../common/mod.rs"]
mod common;

mod after_finish;
mod agents;
mod arith;
mod bedrock_upstream;
mod clients;
mod console;
mod custom_tools;
mod finishes;
mod gemini;
mod gemini_upstream;
mod hardening;
mod ingress;
mod keys;
mod layers;
mod message_checks;
mod policy;
mod record;
mod records;
mod relay;
mod resilience;
mod serving;
mod traces;
mod translation;
mod warnings;
mod wire;
