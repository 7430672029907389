//! What a completion publishes: its choices (in order of first appearance), its upstreams'
//! facts and ends, its warnings, and its one lifecycle ([`CompletionPhase`]). Each upstream's reader
//! writes its own upstream's part; the handles read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use choicewise_proto::driver::{Meta, assemble};
use choicewise_proto::{
    ChatCompletion, ChoiceSource, Error, ErrorDetail, ErrorKind, Usage, Warning,
};
use ractor::ActorRef;
use serde_json::Value;

use crate::config::Config;
use crate::log::{ChoiceLog, Watched, lock};
use crate::msg::ReaderMsg;
use crate::msg::{CancelReason, Close};
use crate::waiters::Waiters;

/// Where the completion is in its life.
///
/// ```text
/// Streaming ──cancel()──▶ Closing(close) ──every upstream ended──▶ Ended(result)
///     └────────────────every upstream ended─────────────────────┘
/// ```
#[derive(Debug, Clone)]
pub(crate) enum CompletionPhase {
    /// Its upstreams are read.
    Streaming,
    /// [`Completions::cancel`](crate::Completions::cancel) (or `cancel_except`) was called:
    /// every choice but those kept was cancelled, and those still to appear will be, for
    /// its reason; no upstream is added.
    Closing(Close),
    /// Every upstream ended: no more choices will appear. The first upstream's error, else
    /// `Ok`.
    Ended(Result<(), Error>),
}

impl CompletionPhase {
    /// What a reader starting now must close: nothing while streaming; the close once
    /// closing; every choice once ended (none can be wanted).
    pub(crate) fn closing(&self) -> Option<Close> {
        match self {
            CompletionPhase::Streaming => None,
            CompletionPhase::Closing(close) => Some(close.clone()),
            CompletionPhase::Ended(_) => Some(Close::new([], CancelReason::Closing)),
        }
    }
}

/// One choice of the completion: its published log, and where its commands go.
#[derive(Debug)]
pub(crate) struct ChoiceEntry {
    pub log: Arc<ChoiceLog>,
    /// The reader of its upstream and the choice's slot there (`None` for a declared choice
    /// that never appeared: nothing runs it).
    pub addr: Option<(ActorRef<ReaderMsg>, usize)>,
}

impl ChoiceEntry {
    pub fn index(&self) -> u32 {
        self.log.index
    }

    /// Asks the choice's actor to cancel the choice, for `reason`; whether it was open and
    /// not asked yet.
    pub fn cancel(&self, reason: CancelReason) -> bool {
        let Some((reader, slot)) = &self.addr else {
            return false;
        };
        if !self.log.ask_cancel() {
            return false;
        }
        let slot = *slot;
        reader
            .send_message(ReaderMsg::Cancel { slot, reason })
            .is_ok()
    }
}

/// How an upstream's choice indexes become the completion's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Indexing {
    /// A single upstream: the indexes as sent.
    AsSent,
    /// Upstream with `n` known, after `offset` choices of the upstreams before it: choice
    /// `i < n` is `offset + i`; any other is numbered as first seen.
    Block { offset: u32, n: u32 },
    /// Numbered in the order first seen, after every block given so far.
    FirstSeen,
}

/// One upstream of the completion, as the completion sees it.
#[derive(Debug)]
pub(crate) struct UpstreamState {
    pub indexing: Indexing,
    /// Its choices: index as sent → index in the completion.
    pub map: BTreeMap<u32, u32>,
    /// Its facts (id, model, usage), once it ended.
    pub meta: Meta,
    /// How it ended.
    pub end: Option<Result<(), Error>>,
    /// It was dropped early because no choice it serves was wanted any more.
    pub dropped: bool,
    /// The request it answers (for estimates).
    pub request: Option<Arc<Value>>,
    /// Its reader, while it runs.
    pub reader: Option<ActorRef<ReaderMsg>>,
}

impl UpstreamState {
    /// The completion's index of this upstream's choice `local`, if it has one: by the
    /// upstream's numbering, or as numbered in first-seen order (in `map`).
    pub fn global_of(&self, local: u32) -> Option<u32> {
        match self.indexing {
            Indexing::AsSent => Some(local),
            Indexing::Block { offset, n } if local < n => Some(offset + local),
            _ => self.map.get(&local).copied(),
        }
    }

    /// The usage it reported; zero when it failed before its stream began (see
    /// [`ErrorDetail::Open`]): a refused request used no tokens.
    pub fn reported_usage(&self) -> Option<Usage> {
        let never_opened = matches!(&self.end, Some(Err(e)) if e.kind() == ErrorKind::Open);
        match never_opened {
            true => Some(Usage::sum(Vec::new())),
            false => self.meta.usage().usage(),
        }
    }
}

/// The whole completion.
#[derive(Debug)]
pub(crate) struct CompletionShared {
    pub config: Config,
    state: Mutex<CompletionState>,
    /// The usage, once computed (counting an estimate is done once).
    pub usage: tokio::sync::OnceCell<Usage>,
}

/// What a completion reads, and whether more upstreams may still come.
#[derive(Debug)]
pub(crate) enum Mode {
    /// One upstream's choices, numbered as it numbers them.
    Single,
    /// Fixed upstreams, their choices numbered across them and their errors naming them.
    FanOut,
    /// Samples made on demand, numbered as a fan-out's: `Some` while more may start
    /// (sampling goes on), `None` once sampling stopped.
    Samples(Option<Sampling>),
}

/// Samples made on demand: sample `k` is `make(k)`, at most `max`.
pub(crate) struct Sampling {
    pub made: usize,
    pub max: usize,
    /// The caller's maker of samples: `None` while a caller runs it, outside the lock
    /// (see [`CompletionShared::start_samples`]).
    pub make: Option<MakeSample>,
    /// Samples asked for while the maker was out: the caller running it starts them too.
    pub queued: usize,
    /// Failed samples that may still be replaced (each replacement raises `max` by one).
    pub replacements: usize,
    /// Replacements reserved so far.
    pub reserved: usize,
    /// Who starts a reserved replacement: the reader once its upstream's end is recorded
    /// (`false`), or the pick, in the place it gives it (`true`: a windowed vote puts it in
    /// the failed sample's window, a confidence-guided vote in its warmup).
    pub pick_starts: bool,
    /// Starts a sample's source in the completion, from a reader (holding the completion's
    /// lifetime weakly: the handles own it; without one, nobody reads the sample).
    pub start: Arc<dyn Fn(crate::source::Source) + Send + Sync>,
}

/// Makes sample `k`'s source ([`CompletionsBuilder::samples`](crate::CompletionsBuilder::samples)).
pub(crate) type MakeSample = Box<dyn FnMut(usize) -> crate::source::Source + Send>;

impl Sampling {
    /// Samples `make` makes on demand, at most `max`; `replacements` failed ones may be
    /// replaced; `start` starts a sample's source in the completion.
    pub fn new(
        max: usize,
        make: MakeSample,
        replacements: usize,
        start: Arc<dyn Fn(crate::source::Source) + Send + Sync>,
    ) -> Self {
        Sampling {
            made: 0,
            max,
            make: Some(make),
            queued: 0,
            replacements,
            reserved: 0,
            pick_starts: false,
            start,
        }
    }
}

impl std::fmt::Debug for Sampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampling")
            .field("made", &self.made)
            .field("max", &self.max)
            .field("queued", &self.queued)
            .field("replacements", &self.replacements)
            .field("reserved", &self.reserved)
            .field("pick_starts", &self.pick_starts)
            .finish()
    }
}

#[derive(Debug)]
pub(crate) struct CompletionState {
    pub phase: CompletionPhase,
    /// In order of first appearance.
    pub choices: Vec<Arc<ChoiceEntry>>,
    pub warnings: Vec<Warning>,
    pub meta: Meta,
    pub waiters: Waiters,
    /// Every upstream, in the order added (one unless fanned out).
    pub upstreams: Vec<UpstreamState>,
    /// What it reads: one upstream, a fan-out, or samples made on demand.
    pub mode: Mode,
    /// Its constructor is still adding its sources: an upstream that ends before the next
    /// is added must not end the completion.
    pub adding: bool,
    /// The first index of the next block of choices.
    next_block: u32,
    /// The next index given to a choice numbered in first-seen order.
    next_index: u32,
    /// An upstream without a declared choice count was added: every later one is numbered
    /// in first-seen order.
    undeclared: bool,
    /// Each finished choice's place in the order the readers routed the choices' finish
    /// reasons (`0` first), recorded before the finish is sent to the choice's actor: the
    /// order "first finished" and a vote's ties follow.
    finish_order: Vec<u32>,
    finish_places: std::collections::HashMap<u32, u64>,
}

impl CompletionState {
    /// Whether its choices are numbered across several upstreams (a fan-out, or samples),
    /// and its errors name them.
    pub fn fan_out(&self) -> bool {
        !matches!(self.mode, Mode::Single)
    }

    /// Whether upstreams may still be added: the completion cannot end before they may not.
    pub fn open_ended(&self) -> bool {
        self.adding || matches!(self.mode, Mode::Samples(Some(_)))
    }

    /// Records that the stream finished the choice `index` (a reader routed its finish
    /// reason): it takes the next place in the finish order, once.
    pub fn record_finish(&mut self, index: u32) {
        let next = self.finish_order.len() as u64;
        if let std::collections::hash_map::Entry::Vacant(place) = self.finish_places.entry(index) {
            place.insert(next);
            self.finish_order.push(index);
        }
    }

    /// The choice `index`'s place in the finish order, once its finish was routed.
    pub fn finish_place(&self, index: u32) -> Option<u64> {
        self.finish_places.get(&index).copied()
    }

    /// The choices finished at places `from..`, in that order.
    pub fn finished_from(&self, from: usize) -> &[u32] {
        self.finish_order.get(from..).unwrap_or_default()
    }

    /// Its sampling while it goes on.
    pub fn sampling(&mut self) -> Option<&mut Sampling> {
        match &mut self.mode {
            Mode::Samples(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// No more samples will start (for a completion of samples): it ends once those started
    /// have. The maker is dropped by the caller running it, if one does.
    pub fn stop_sampling(&mut self) {
        if let Mode::Samples(sampling) = &mut self.mode {
            *sampling = None;
        }
        self.end_if_done();
    }

    /// Whether every upstream has ended.
    pub fn end(&self) -> Option<&Result<(), Error>> {
        match &self.phase {
            CompletionPhase::Ended(end) => Some(end),
            _ => None,
        }
    }

    /// Adds an upstream that declares `n` choices (or not); returns its number.
    pub fn add_upstream(&mut self, n: Option<u32>, request: Option<Arc<Value>>) -> usize {
        let indexing = match (self.fan_out(), n, self.undeclared) {
            (false, _, _) => Indexing::AsSent,
            (true, Some(n), false) => {
                let offset = self.next_block.max(self.next_index);
                self.next_block = offset.saturating_add(n);
                self.next_index = self.next_index.max(self.next_block);
                Indexing::Block { offset, n }
            }
            (true, _, _) => {
                self.undeclared = true;
                Indexing::FirstSeen
            }
        };
        self.upstreams.push(UpstreamState {
            indexing,
            map: BTreeMap::new(),
            meta: Meta::default(),
            end: None,
            dropped: false,
            request,
            reader: None,
        });
        self.upstreams.len() - 1
    }

    /// The completion's index of upstream `k`'s choice `local` (numbering it if new).
    pub fn global_index(&mut self, k: usize, local: u32) -> u32 {
        let upstream = &self.upstreams[k];
        if let Some(&global) = upstream.map.get(&local) {
            return global;
        }
        let global = match upstream.global_of(local) {
            Some(global) => global,
            None => {
                let next = self.next_index;
                self.next_index = self.next_index.saturating_add(1);
                self.next_block = self.next_block.max(self.next_index);
                next
            }
        };
        // A fan-out lists each upstream's choices (its usage parts); a single stream
        // numbered as sent needs no map.
        if self.fan_out() || global != local {
            self.upstreams[k].map.insert(local, global);
        }
        global
    }

    /// Where the completion's choice `global` came from: its upstream, with that upstream's
    /// id and model.
    pub fn source_of(&self, global: u32) -> Option<ChoiceSource> {
        let (k, upstream) = self.upstreams.iter().enumerate().find(|(_, u)| {
            u.map.values().any(|&g| g == global)
                || matches!(u.indexing, Indexing::Block { offset, n } if (offset..offset.saturating_add(n)).contains(&global))
        })?;
        let mut source = ChoiceSource::default();
        source.upstream = k;
        source.id = upstream.meta.id().map(str::to_string);
        source.model = upstream.meta.model().map(str::to_string);
        Some(source)
    }

    /// The error that ended upstream `k`, as its choices and the completion report it.
    pub fn upstream_error(&self, k: usize, error: Error) -> Error {
        if self.fan_out() {
            Error::from(ErrorDetail::UpstreamFailed { upstream: k, error })
        } else {
            error
        }
    }

    /// Records how upstream `k` ended (`outcome` already as its choices see it); once every
    /// upstream has ended and none will be added, the completion's end.
    pub fn end_upstream(&mut self, k: usize, meta: Meta, outcome: Result<(), Error>) {
        if self.upstreams[k].end.is_some() {
            return;
        }
        if !self.fan_out() || self.meta.id().is_none() {
            let model = self.meta.model().map(str::to_string);
            self.meta = meta.clone();
            let model = self.meta.model().map(str::to_string).or(model);
            self.meta.set_model(model);
        }
        let upstream = &mut self.upstreams[k];
        upstream.meta = meta;
        upstream.end = Some(outcome);
        upstream.reader = None;
        self.end_if_done();
    }

    /// Ends the completion if every upstream has ended and none will be added: the first
    /// upstream's error, else `Ok`.
    pub fn end_if_done(&mut self) {
        if self.open_ended()
            || self.end().is_some()
            || !self.upstreams.iter().all(|u| u.end.is_some())
        {
            return;
        }
        let end = self
            .upstreams
            .iter()
            .find_map(|u| u.end.clone().filter(Result::is_err))
            .unwrap_or(Ok(()));
        self.phase = CompletionPhase::Ended(end);
        self.waiters.wake_all();
    }

    /// Each choice's completion tokens as the upstreams reported them, by the completion's
    /// index.
    pub fn reported_per_choice(&self) -> BTreeMap<u32, u64> {
        if !self.fan_out() {
            return self.meta.usage().per_choice();
        }
        let mut all = BTreeMap::new();
        for u in &self.upstreams {
            for (local, tokens) in u.meta.usage().per_choice() {
                if let Some(global) = u.global_of(local) {
                    all.insert(global, tokens);
                }
            }
        }
        all
    }

    /// The usage every upstream reported, summed; `None` if any reported none.
    pub fn reported_usage(&self) -> Option<Usage> {
        if !self.fan_out() {
            return self.meta.usage().usage();
        }
        let parts: Option<Vec<Usage>> = self
            .upstreams
            .iter()
            .map(UpstreamState::reported_usage)
            .collect();
        parts.map(Usage::sum)
    }
}

impl CompletionShared {
    /// Reserves the replacements of `failed` failed samples (the choices of an upstream that
    /// failed), as many as may still be made: called by the upstream's reader before its
    /// choices learn of the failure, so that a pick counting them already counts the
    /// replacements. How many were reserved ([`after_upstream_end`](Self::after_upstream_end)
    /// starts them).
    pub fn reserve_replacements(&self, failed: usize) -> usize {
        let mut state = self.lock();
        if failed == 0 || !matches!(state.phase, CompletionPhase::Streaming) {
            return 0;
        }
        match state.sampling() {
            Some(s) => {
                let reserved = failed.min(s.replacements);
                s.replacements -= reserved;
                s.reserved += reserved;
                s.max += reserved;
                reserved
            }
            None => 0,
        }
    }

    /// After an upstream of a completion of samples ended: starts the `reserved`
    /// replacements its reader reserved (unless the pick starts them), or, when every
    /// planned sample has started and ended with none due, stops sampling so that the
    /// completion ends.
    pub fn after_upstream_end(&self, reserved: usize) {
        let mut state = self.lock();
        let upstreams = state.upstreams.len();
        let all_ended = state.upstreams.iter().all(|u| u.end.is_some());
        let Some(s) = state.sampling() else {
            return;
        };
        if reserved > 0 && s.made < s.max && !s.pick_starts {
            drop(state);
            self.start_samples(reserved);
            return;
        }
        // A sample being started is counted in `made` before its upstream is added, and a
        // replacement reserved raised `max` first: every planned sample has started and
        // ended only when the upstreams number `max`.
        if upstreams >= s.max && all_ended {
            state.stop_sampling();
        }
    }

    /// Starts up to `count` more samples of a completion of samples; how many it took on
    /// (none once all were started, sampling stopped, or the completion is closing). The
    /// caller's maker runs outside the lock, so that it may call back into the completion:
    /// samples asked for while it runs (by it, or on another thread) are queued, and
    /// started by the caller running it before it puts it back.
    pub fn start_samples(&self, count: usize) -> usize {
        let (mut make, admitted) = {
            let mut state = self.lock();
            if !matches!(state.phase, CompletionPhase::Streaming) {
                return 0;
            }
            let Some(s) = state.sampling() else {
                return 0;
            };
            let admitted = count.min(s.max.saturating_sub(s.made + s.queued));
            s.queued += admitted;
            match s.make.take() {
                Some(make) => (make, admitted),
                // Another caller runs the maker: it starts these.
                None => return admitted,
            }
        };
        // A maker that panics stops sampling: nobody could make a sample after it.
        let stop_on_panic = StopOnPanic(self);
        loop {
            let (k, start) = {
                let mut state = self.lock();
                let streaming = matches!(state.phase, CompletionPhase::Streaming);
                // Sampling stopped meanwhile: the maker is dropped here.
                let Some(s) = state.sampling() else {
                    break;
                };
                if s.queued == 0 || s.made >= s.max || !streaming {
                    s.queued = 0;
                    s.make = Some(make);
                    break;
                }
                s.queued -= 1;
                let k = s.made;
                s.made += 1;
                (k, s.start.clone())
            };
            start(make(k));
        }
        std::mem::forget(stop_on_panic);
        admitted
    }

    /// A completion without upstreams yet, of this `mode`, its constructor adding its
    /// sources (until [`CompletionState::adding`] is cleared).
    pub fn new(config: Config, mode: Mode) -> Self {
        let state = CompletionState {
            phase: CompletionPhase::Streaming,
            choices: Vec::new(),
            warnings: Vec::new(),
            meta: Meta::default(),
            waiters: Waiters::default(),
            upstreams: Vec::new(),
            mode,
            adding: true,
            next_block: 0,
            next_index: 0,
            undeclared: false,
            finish_order: Vec::new(),
            finish_places: std::collections::HashMap::new(),
        };
        CompletionShared {
            config,
            state: Mutex::new(state),
            usage: tokio::sync::OnceCell::new(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, CompletionState> {
        lock(&self.state)
    }

    /// The model to count with: the builder's, the first upstream's request's, or the
    /// stream's.
    pub fn model(&self) -> Option<String> {
        let state = self.lock();
        self.config
            .model
            .clone()
            .or_else(|| {
                let request = state.upstreams.first()?.request.as_deref()?;
                request.get("model")?.as_str().map(str::to_string)
            })
            .or_else(|| state.meta.model().map(str::to_string))
    }

    /// Cancels every choice but those in `keep`, and those still to appear: tells every
    /// running reader.
    pub fn close(&self, close: Close) {
        let mut state = self.lock();
        if matches!(state.phase, CompletionPhase::Streaming) {
            state.phase = CompletionPhase::Closing(close.clone());
        }
        // No sample starts any more.
        state.stop_sampling();
        for reader in state.upstreams.iter().filter_map(|u| u.reader.as_ref()) {
            let _ = reader.send_message(ReaderMsg::Close(close.clone()));
        }
        state.waiters.wake_all();
    }

    /// What a reader starting now must close: `None` while the completion streams; the
    /// close once it is closing; nothing kept once it ended.
    pub fn closing(&self) -> Option<Close> {
        self.lock().phase.closing()
    }

    /// Assembles the completion from the published choices; the first error met, if any. The
    /// usage is left out: it may need counting (see `Completions::usage`).
    pub fn assemble(&self) -> (ChatCompletion, Option<Error>) {
        let (choices, meta, end, per_choice) = {
            let state = self.lock();
            (
                state.choices.clone(),
                state.meta.clone(),
                state.end().cloned(),
                state.reported_per_choice(),
            )
        };
        let outcomes = choices.iter().map(|c| c.log.lock().outcome(c.index()));
        let (mut completion, error) = assemble(meta, &per_choice, end.as_ref(), outcomes);
        let state = self.lock();
        if state.fan_out() {
            for choice in &mut completion.choices {
                choice.source = state.source_of(choice.index);
            }
        }
        (completion, error)
    }
}

/// Stops sampling when dropped: held while a maker of samples runs, and forgotten after, so
/// that it acts only when the maker panics.
struct StopOnPanic<'a>(&'a CompletionShared);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        self.0.lock().stop_sampling();
    }
}

impl Watched for CompletionShared {
    type State = CompletionState;
    fn state(&self) -> &Mutex<CompletionState> {
        &self.state
    }
    fn waiters(state: &mut CompletionState) -> &mut Waiters {
        &mut state.waiters
    }
}
