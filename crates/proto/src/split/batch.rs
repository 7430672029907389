//! What the splitter hands over: each choice's batch of raw updates (and the pool their
//! buffers go back to), the reader's slot per choice, and the completion's facts.

use std::ops::Range;

use serde_json::Value;

use crate::usage::ReportedUsage;
use crate::wire::ChunkChoice;

/// One choice's update, as the reader hands it over: raw or already parsed.
#[derive(Debug)]
pub(crate) struct RawUpdate {
    /// The line of the data line the choice's update starts on.
    pub line: u64,
    /// The byte offset of its event in the stream.
    pub offset: u64,
    pub body: Body,
}

#[derive(Debug)]
pub(crate) enum Body {
    /// The JSON object of the choice's element of `choices`, in the batch's text.
    Json(Range<usize>),
    /// A chunk choice parsed by the caller (`Completions::from_chunks`).
    Parsed(Box<ChunkChoice<'static>>),
    /// An update of a typed dialect's one choice, decoded by the reader (see `dialect`).
    Update(Box<crate::merge::ChoiceUpdate>),
}

/// The updates of one choice from one read, in arrival order: what one actor message carries.
#[derive(Debug, Default)]
pub struct Batch {
    /// The raw JSON of every [`Body::Json`] update, one after the other.
    pub(crate) text: String,
    /// The updates, in arrival order.
    pub(crate) updates: Vec<RawUpdate>,
}

impl Batch {
    /// How many updates it holds.
    pub fn len(&self) -> usize {
        self.updates.len()
    }

    /// The line of its first update.
    pub fn first_line(&self) -> Option<u64> {
        self.updates.first().map(|u| u.line)
    }

    /// Bytes of raw JSON it holds.
    pub fn text_len(&self) -> usize {
        self.text.len()
    }

    /// Whether it holds no update.
    pub fn is_empty(&self) -> bool {
        self.updates.is_empty()
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.text.clear();
        self.updates.clear();
    }

    /// An empty batch with room for one like `like`: a batch the reader could not recycle
    /// starts at its predecessor's size rather than growing to it read by read.
    pub fn sized_like(like: &Batch) -> Batch {
        Batch {
            text: String::with_capacity(like.text.len()),
            updates: Vec::with_capacity(like.updates.len()),
        }
    }

    /// How many of its first updates fit in `room` bytes of raw JSON (updates parsed before
    /// they came count nothing), and the bytes they take.
    pub(crate) fn fitting(&self, room: usize) -> (usize, usize) {
        let mut used = 0usize;
        for (k, u) in self.updates.iter().enumerate() {
            let size = match &u.body {
                Body::Json(range) => range.len(),
                Body::Parsed(_) | Body::Update(_) => 0,
            };
            if used + size > room {
                return (k, used);
            }
            used += size;
        }
        (self.updates.len(), used)
    }

    /// Drops its updates from the `k`-th on: their count, and the first one's line and
    /// offset.
    pub(crate) fn cut_at(&mut self, k: usize) -> (u64, Option<(u64, u64)>) {
        let at = self.updates.get(k).map(|u| (u.line, u.offset));
        let dropped = self.updates.len().saturating_sub(k) as u64;
        self.updates.truncate(k);
        (dropped, at)
    }

    /// Appends one choice's update: the JSON object of its element of `choices`.
    pub(super) fn push_json(&mut self, element: &str, line: u64, offset: u64) {
        let start = self.text.len();
        self.text.push_str(element);
        self.updates.push(RawUpdate {
            line,
            offset,
            body: Body::Json(start..self.text.len()),
        });
    }
}

#[cfg(feature = "fault-injection")]
impl Batch {
    /// The JSON text of the batch's updates, in order (`None` for an update parsed before it
    /// came: a typed dialect's, or one of `Source::parsed`): what a test's fault hook looks at.
    pub fn update_texts(&self) -> impl Iterator<Item = Option<&str>> {
        self.updates.iter().map(|u| match &u.body {
            Body::Json(range) => Some(&self.text[range.clone()]),
            Body::Parsed(_) | Body::Update(_) => None,
        })
    }

    /// Keeps the first `len` updates, dropping the others.
    pub fn truncate(&mut self, len: usize) {
        self.updates.truncate(len);
    }
}

/// The emptied batches of one choice, handed back by whoever parsed them for the reader to
/// fill again: the reader allocates a choice's batch buffers once, not once per read, and they
/// are freed neither on the parsing thread nor read by read. Holds at most two
/// batches, each of at most 256 KiB of text (a burst's large batch is freed).
#[derive(Debug, Default)]
pub struct BatchPool(Vec<Batch>);

impl BatchPool {
    /// Batches kept: one being parsed while the reader fills the next.
    pub(super) const KEEP: usize = 2;
    /// The largest text buffer kept.
    pub(super) const KEEP_BYTES: usize = 256 * 1024;

    /// Keeps an emptied batch for the reader, if there is room.
    pub fn put(&mut self, mut batch: Batch) {
        if self.0.len() < Self::KEEP && batch.text.capacity() <= Self::KEEP_BYTES {
            // Empty already when it was parsed or skipped; one whose parse panicked is
            // emptied here.
            batch.clear();
            self.0.push(batch);
        }
    }

    /// An emptied batch to fill, if one was handed back.
    pub fn take(&mut self) -> Option<Batch> {
        self.0.pop()
    }

    /// Frees the batches kept (the choice went quiet, or its stream is over).
    pub fn clear(&mut self) {
        self.0 = Vec::new();
    }
}

/// A choice as the reader knows it.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The choice's index, as the stream numbers it.
    pub index: u32,
    /// Updates split off since the last flush.
    pub batch: Batch,
    /// A non-empty `finish_reason` string was seen for this choice.
    pub finished: bool,
}

/// Completion-level facts gathered by the reader.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    /// The completion's id.
    pub(crate) id: Option<String>,
    /// The model that answered.
    pub(crate) model: Option<String>,
    /// When it was created (Unix seconds).
    pub(crate) created: Option<i64>,
    /// The provider's system fingerprint.
    pub(crate) system_fingerprint: Option<String>,
    /// The provider's service tier.
    pub(crate) service_tier: Option<String>,
    /// Azure's prompt filter results, as sent.
    pub(crate) prompt_filter_results: Vec<Value>,
    /// The usage the stream reported.
    pub(crate) usage: ReportedUsage,
}

impl Meta {
    /// The completion's id, once the stream said it.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The model that answered, once the stream said it.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Names the model (a fan-out's completion keeps the first upstream's when a later one
    /// says none).
    pub fn set_model(&mut self, model: Option<String>) {
        self.model = model;
    }

    /// The usage the stream reported.
    pub fn usage(&self) -> &ReportedUsage {
        &self.usage
    }
}
