//! The actors: one reader per upstream, supervising one actor per choice.
//!
//! ```text
//!  upstream ──reads──▶ ReaderActor ──Batch──▶ ChoiceActor 0 ──publish──▶ log 0 ──▶ handles
//!                      (frame, scan,  ──Batch──▶ ChoiceActor 2 ──publish──▶ log 2 ──▶ handles
//!                       route;        ──End────▶ every ChoiceActor
//!                       supervise)   ◀──supervision events (stopped, failed)──
//! ```

pub(crate) mod choice;
mod orphan;
mod policy;
pub(crate) mod reader;
pub(crate) mod router;
mod wake;
