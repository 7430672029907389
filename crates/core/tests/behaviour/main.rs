//! The core's behaviour tests, one module per subject, in one test binary: one link rather
//! than one per file (faster to build, a smaller target/). The tests that read process-wide
//! figures (the live actors, the heap, the resident memory) keep binaries of their own
//! (`tests/drop_releases_everything.rs`, `hibernation.rs`, `hostile.rs`, `load.rs`), since
//! other tests running beside them in one process would move those figures.

#[path = "../common/mod.rs"]
mod common;

mod arguments;
mod ballot;
mod busy_choice;
mod cancel;
mod confidence;
mod dialects;
mod documented_states;
mod errors;
mod every_pick_ends;
mod fan_out;
mod fault_isolation;
mod first;
mod interleaving;
mod lifecycle;
mod policy;
mod quirks_and_faults;
mod reads;
mod replace;
mod root;
mod samples;
mod sdk_conformance;
mod usage;
