//! Parked wakers of the readers of a shared state, one slot per reader.

use std::task::Waker;

/// Parked wakers, one slot per reader.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Waiters {
    pub fn register(&mut self) -> usize {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        }
    }

    pub fn unregister(&mut self, id: usize) {
        if let Some(slot) = self.slots.get_mut(id) {
            *slot = None;
            self.free.push(id);
        }
    }

    pub fn park(&mut self, id: usize, waker: &Waker) {
        if let Some(slot) = self.slots.get_mut(id) {
            match slot {
                Some(w) if w.will_wake(waker) => {}
                _ => *slot = Some(waker.clone()),
            }
        }
    }

    pub fn wake_all(&mut self) {
        for slot in &mut self.slots {
            if let Some(w) = slot.take() {
                w.wake();
            }
        }
    }
}
