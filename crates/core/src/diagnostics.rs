//! Counts of the crate's actors, for leak and lifecycle tests (feature `diagnostics`).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Live actors of this crate in the process.
static LIVE_ACTORS: AtomicUsize = AtomicUsize::new(0);

/// Actors of this crate started in the process so far.
static ACTORS_STARTED: AtomicUsize = AtomicUsize::new(0);

/// Counts one live actor for as long as it is held.
#[derive(Debug)]
pub(crate) struct LiveActor(());

impl LiveActor {
    pub fn new() -> Self {
        LIVE_ACTORS.fetch_add(1, Ordering::AcqRel);
        ACTORS_STARTED.fetch_add(1, Ordering::Relaxed);
        LiveActor(())
    }
}

impl Drop for LiveActor {
    fn drop(&mut self) {
        LIVE_ACTORS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How many of this crate's actors (readers and choice actors) are alive in the process.
pub fn live_actors() -> usize {
    LIVE_ACTORS.load(Ordering::Acquire)
}

/// How many of this crate's actors were started in the process so far.
pub fn actors_started() -> usize {
    ACTORS_STARTED.load(Ordering::Acquire)
}
