//! The messages of the actors: what a reader is told; what a choice actor is told is the
//! router's ([`ChoiceMsg`], in `choicewise_proto::driver`).

pub(crate) use choicewise_proto::driver::{CancelReason, ChoiceMsg, Close};

/// Messages of a reader actor (besides the supervision events of its choice actors).
#[derive(Debug)]
pub(crate) enum ReaderMsg {
    /// The upstream (or a timer of the reader's) may be ready: poll it.
    Poll,
    /// A handle asks to cancel the choice in this slot of the reader's, for this reason.
    Cancel { slot: usize, reason: CancelReason },
    /// [`Completions::cancel`](crate::Completions::cancel): cancel every choice, including
    /// those still to appear, except those kept (indexes of the completion), for its reason.
    Close(Close),
    /// The choice actor of this slot failed its choice (its own bad update): the choice is
    /// no longer wanted from the upstream. `bounded`: it passed its bound of bytes
    /// (`max_choice_bytes`), so the upstream may be dropped once no other choice is wanted.
    Failed { slot: usize, bounded: bool },
}
