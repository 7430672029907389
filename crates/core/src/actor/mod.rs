//! The actors: one reader per upstream, supervising one actor per choice. The reader's
//! decisions (who holds each choice, what it is sent, when the upstream is dropped, when
//! the reader stops) are the router's (`choicewise_proto::driver::Router`), a state machine
//! in the protocol crate, which has no runtime: the actor feeds it and executes its
//! commands. `flush` holds the reader's flush and hibernation rules, `orphan` what it
//! publishes as a choice's last writer, `wake` its waker and quiet timer.
//!
//! ```text
//!  upstream ──reads──▶ ReaderActor ──Batch──▶ ChoiceActor 0 ──publish──▶ log 0 ──▶ handles
//!                      (frame, scan,  ──Batch──▶ ChoiceActor 2 ──publish──▶ log 2 ──▶ handles
//!                       route;        ──End────▶ every ChoiceActor
//!                       supervise)   ◀──supervision events (stopped, failed)──
//! ```

pub(crate) mod choice;
mod flush;
mod orphan;
pub(crate) mod reader;
mod wake;
