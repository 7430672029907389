//! A choice's append-only event log, in segments.
//!
//! Sub-streams read the log by position while the choice actor appends to it, so it must
//! never move what is written. A single `Vec` would copy the whole log each time it grows (a
//! multi-megabyte copy under the lock for a long answer, while every reader waits); segments of
//! fixed size are never copied once full. The first segment grows from the size of the first
//! append, so that the many short or idle choices hold no spare room.

use crate::event::ChoiceEvent;

/// Events per segment (26 KiB of events).
const SEGMENT: usize = 256;

/// A choice's events, appended in order and never moved.
#[derive(Debug, Default)]
pub struct EventLog {
    /// Every segment but the last holds exactly `SEGMENT` events.
    segments: Vec<Vec<ChoiceEvent>>,
}

impl EventLog {
    /// The event at `position`, if it has been appended.
    pub fn get(&self, position: usize) -> Option<&ChoiceEvent> {
        self.segments
            .get(position / SEGMENT)?
            .get(position % SEGMENT)
    }

    /// Moves every event of `events` to the end of the log, leaving `events` empty (with its
    /// capacity, for reuse).
    pub fn append(&mut self, events: &mut Vec<ChoiceEvent>) {
        let mut incoming = events.drain(..);
        while incoming.len() > 0 {
            let last = match self.segments.last_mut() {
                Some(last) if last.len() < SEGMENT => last,
                _ => {
                    let first = self.segments.is_empty();
                    // The first segment starts at the size of the first append; the others
                    // are filled, so they start full-size.
                    let capacity = if first {
                        incoming.len().min(SEGMENT)
                    } else {
                        SEGMENT
                    };
                    self.segments.push(Vec::with_capacity(capacity));
                    self.segments.last_mut().expect("just pushed")
                }
            };
            let room = SEGMENT - last.len();
            let take = room.min(incoming.len());
            if last.capacity() - last.len() < take {
                // Only the first segment grows: doubling, up to a full segment.
                let target = (last.capacity() * 2).max(last.len() + take).min(SEGMENT);
                last.reserve_exact(target - last.len());
            }
            last.extend(incoming.by_ref().take(take));
        }
    }

    /// Events appended so far.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.segments.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Text;

    fn content(i: usize) -> ChoiceEvent {
        ChoiceEvent::Content(Text::from(i.to_string().as_str()))
    }

    #[test]
    fn positions_survive_any_batch_sizes_across_segments() {
        let mut log = EventLog::default();
        let mut next = 0;
        for batch in [1, 3, 250, 2, 1, 600, 0, 255, 257, 1] {
            let mut events: Vec<_> = (next..next + batch).map(content).collect();
            log.append(&mut events);
            assert!(events.is_empty());
            next += batch;
            assert_eq!(log.len(), next);
            for (i, segment) in log.segments.iter().enumerate() {
                if i + 1 < log.segments.len() {
                    assert_eq!(segment.len(), SEGMENT, "segment {i} not full");
                }
                assert!(segment.capacity() <= SEGMENT, "segment {i} over-allocated");
            }
        }
        for i in 0..next {
            assert_eq!(log.get(i), Some(&content(i)), "position {i}");
        }
        assert_eq!(log.get(next), None);
    }

    #[test]
    fn a_short_choice_holds_no_spare_room() {
        let mut log = EventLog::default();
        log.append(&mut vec![content(0)]);
        assert_eq!(log.segments[0].capacity(), 1);
        log.append(&mut vec![content(1)]);
        assert_eq!(log.segments[0].capacity(), 2);
    }
}
