//! The router driven through random interleavings of reads, cancels, failures, panics,
//! retirements and the upstream's end, with a model of the choice actors and their logs
//! (no runtime): every choice settles once, nothing is sent to a retiring or stopped
//! actor, nothing is routed to a choice after its end nor written to its log after it
//! settled, replacements are reserved once and for each choice the upstream's failure
//! fails, the upstream is dropped exactly when no choice is wanted.

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use proptest::prelude::*;

use super::*;
use crate::lifecycle::{Close, Closed};

struct Fake {
    id: u64,
    applied: Rc<Cell<u64>>,
}

impl Child for Fake {
    type Id = u64;
    fn id(&self) -> u64 {
        self.id
    }
    fn applied(&self) -> u64 {
        self.applied.get()
    }
}

/// A choice actor as the model runs it.
struct ModelActor {
    slot: usize,
    core: Option<Box<ChoiceCore>>,
    mailbox: VecDeque<ChoiceMsg>,
    applied: Rc<Cell<u64>>,
    /// The log's writer epoch it was started with.
    epoch: u64,
    retire_asked: bool,
    /// Stopped (ended, retired, panicked or killed): what is sent to it is lost.
    stopped: bool,
}

/// What reaches the reader's mailbox.
enum Input {
    Stopped(u64, Option<Box<ChoiceCore>>),
    Panicked(u64),
    Failed(usize),
    Cancel(usize, CancelReason),
    Close(Close),
}

#[derive(Debug, Clone)]
enum Op {
    Appear,
    Batch(usize),
    Finish(usize),
    Cancel(usize, u8),
    Close(u8, u8),
    /// An actor handles its next message; a batch carries a bad update when `true`.
    Deliver(usize, bool),
    Inbox,
    Quiet,
    Panic(usize),
    Kill(usize),
    SpawnFails(bool),
    End(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Appear),
        4 => any::<usize>().prop_map(Op::Batch),
        1 => any::<usize>().prop_map(Op::Finish),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(s, r)| Op::Cancel(s, r)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(m, r)| Op::Close(m, r)),
        6 => (any::<usize>(), prop::bool::weighted(0.1)).prop_map(|(a, f)| Op::Deliver(a, f)),
        5 => Just(Op::Inbox),
        2 => Just(Op::Quiet),
        1 => any::<usize>().prop_map(Op::Panic),
        1 => any::<usize>().prop_map(Op::Kill),
        1 => prop::bool::weighted(0.2).prop_map(Op::SpawnFails),
        1 => any::<bool>().prop_map(Op::End),
    ]
}

struct Model {
    router: Router<Fake>,
    actors: BTreeMap<u64, ModelActor>,
    next_id: u64,
    inbox: VecDeque<Input>,
    finished: Vec<bool>,
    /// Each slot's log: the phase published, its writer epoch, how often it settled.
    published: Vec<Phase>,
    epochs: Vec<u64>,
    settles: Vec<u32>,
    end_sent: Vec<u32>,
    cancel_sent: Vec<u32>,
    reserves: u32,
    /// Per slot, what the router was told makes it unwanted: a cancel it accepted, a
    /// failure, an orphan it published (failed), a close that did not keep it.
    closed_known: Vec<bool>,
    /// The router took a cancel (a refused one does not count).
    cancel_taken: bool,
    closing: Option<Close>,
    /// Every reason a cancel or a close was sent for: a choice cancelled closes with one.
    reasons_sent: Vec<CancelReason>,
    /// Per slot, whether the reservation for the upstream's failure counted it.
    counted: Option<Vec<bool>>,
    drops: u32,
    stops: u32,
    spawn_fails: bool,
    violations: Vec<String>,
}

fn error(message: &str) -> Error {
    Error::from(ErrorDetail::ActorFailed {
        choice: None,
        message: message.to_string(),
    })
}

/// Every reason a cancel can carry.
const REASONS: [CancelReason; 7] = [
    CancelReason::Asked,
    CancelReason::LowConfidence,
    CancelReason::Decided,
    CancelReason::Closing,
    CancelReason::ReaderGone,
    CancelReason::Deadline,
    CancelReason::ShuttingDown,
];

/// The upstream's failure, as the model's stream ends with it.
const UPSTREAM: &str = "the model's upstream failed";

impl Model {
    fn new(expected: Option<u32>) -> Self {
        Model {
            router: Router::new(expected, None),
            actors: BTreeMap::new(),
            next_id: 0,
            inbox: VecDeque::new(),
            finished: Vec::new(),
            published: Vec::new(),
            epochs: Vec::new(),
            settles: Vec::new(),
            end_sent: Vec::new(),
            cancel_sent: Vec::new(),
            reserves: 0,
            closed_known: Vec::new(),
            cancel_taken: false,
            closing: None,
            reasons_sent: Vec::new(),
            counted: None,
            drops: 0,
            stops: 0,
            spawn_fails: false,
            violations: Vec::new(),
        }
    }

    fn publish(&mut self, slot: usize, phase: Phase) {
        if self.published[slot].is_settled() {
            // A settled log would refuse it; nothing should try.
            self.violations
                .push(format!("a write to slot {slot} after it settled"));
            return;
        }
        if phase.is_settled() {
            self.settles[slot] += 1;
        }
        self.published[slot] = phase;
    }

    /// Executes the router's commands, as the reader does.
    fn run(&mut self) {
        while let Some(command) = self.router.next_command() {
            match command {
                Command::Spawn { slot, core } => {
                    self.epochs[slot] += 1;
                    if self.spawn_fails {
                        let orphan = Box::new(ChoiceCore::orphan(
                            slot as u32,
                            self.published[slot].clone(),
                        ));
                        self.router
                            .start_failed(slot, orphan, "could not start".into())
                            .unwrap();
                    } else {
                        let id = self.next_id;
                        self.next_id += 1;
                        let applied = Rc::new(Cell::new(0));
                        self.actors.insert(
                            id,
                            ModelActor {
                                slot,
                                core: Some(core),
                                mailbox: VecDeque::new(),
                                applied: applied.clone(),
                                epoch: self.epochs[slot],
                                retire_asked: false,
                                stopped: false,
                            },
                        );
                        self.router.started(slot, Fake { id, applied }).unwrap();
                    }
                }
                Command::Send { slot, msg } => {
                    let Some(id) = self.router.live(slot).map(|a| a.id) else {
                        self.violations
                            .push(format!("a send to slot {slot}, not live"));
                        continue;
                    };
                    match &msg {
                        ChoiceMsg::End(_) => self.end_sent[slot] += 1,
                        ChoiceMsg::Cancel(_) => self.cancel_sent[slot] += 1,
                        ChoiceMsg::Retire => {
                            self.violations.push("a retire sent as a message".into())
                        }
                        ChoiceMsg::Batch(_) => {}
                    }
                    if self.end_sent[slot] > 1 || self.cancel_sent[slot] > 1 {
                        self.violations.push(format!("slot {slot} told twice"));
                    }
                    if self.end_sent[slot] > 0 && !matches!(msg, ChoiceMsg::End(_)) {
                        self.violations
                            .push(format!("a write to slot {slot} after its end"));
                    }
                    let actor = self.actors.get_mut(&id).unwrap();
                    if actor.retire_asked {
                        self.violations
                            .push(format!("a send to slot {slot}'s retiring actor"));
                    }
                    if actor.stopped {
                        let batch = matches!(msg, ChoiceMsg::Batch(_));
                        self.router.undelivered(slot, batch);
                    } else {
                        actor.mailbox.push_back(msg);
                    }
                }
                Command::Retire { slot } => {
                    let Some(Held::Retiring { actor, .. }) =
                        self.router.slot(slot).and_then(Slot::held)
                    else {
                        self.violations
                            .push(format!("a retire to slot {slot}, not retiring"));
                        continue;
                    };
                    let actor = self.actors.get_mut(&actor.id).unwrap();
                    actor.retire_asked = true;
                    if !actor.stopped {
                        actor.mailbox.push_back(ChoiceMsg::Retire);
                    }
                }
                Command::PublishOrphan { slot, phase, .. } => {
                    self.epochs[slot] += 1;
                    self.closed_known[slot] = true;
                    self.publish(slot, phase);
                }
                Command::Reserve(n) => {
                    self.reserves += 1;
                    // Exactly the choices still wanted and not finished, and those missing.
                    let counted: Vec<bool> = (0..self.finished.len())
                        .map(|s| !self.finished[s] && !self.closed_known[s])
                        .collect();
                    let missing = (self.router.expected())
                        .map_or(0, |n| (n as usize).saturating_sub(self.finished.len()));
                    let want = counted.iter().filter(|c| **c).count() + missing;
                    if n != want {
                        self.violations
                            .push(format!("{n} replacements reserved, {want} failing"));
                    }
                    self.counted = Some(counted);
                }
                Command::DropUpstream => {
                    self.drops += 1;
                    if !self.unwanted() {
                        self.violations
                            .push("the upstream dropped while a choice was wanted".into());
                    }
                    let finished = self.finished.clone();
                    self.router.end(Ok(()), |s| finished[s]).unwrap();
                }
                Command::Stop => {
                    self.stops += 1;
                    if !self.router.done() {
                        self.violations.push("stopped before done".into());
                    }
                }
            }
        }
    }

    /// Whether no choice is wanted, as the model knows it: the completion is closing, or
    /// a cancel was taken and every expected choice appeared; and each choice finished or is
    /// known closed.
    fn unwanted(&self) -> bool {
        let appeared = (self.router.expected()).is_none_or(|n| self.finished.len() >= n as usize);
        self.router.is_reading()
            && (self.closing.is_some() || (self.cancel_taken && appeared))
            && (0..self.finished.len()).all(|s| self.finished[s] || self.closed_known[s])
    }

    /// What the reader does after each input.
    fn after_input(&mut self) {
        self.run();
        let finished = self.finished.clone();
        self.router.after_input(|s| finished[s]);
        self.run();
        if self.unwanted() {
            self.violations
                .push("no choice wanted, the upstream kept".into());
        }
    }

    /// A refusal the model's races may cause; any other is a violation.
    fn refused(&mut self, result: Result<(), Refused>, races: &[fn(Refused) -> bool]) {
        if let Err(refused) = result
            && !races.iter().any(|race| race(refused))
        {
            self.violations.push(format!("refused: {refused:?}"));
        }
    }

    fn cancel(&mut self, slot: usize, reason: CancelReason) {
        let result = self.router.cancel(slot, reason);
        if result.is_ok() {
            // Only a cancel taken counts: a refused one drops no upstream.
            self.cancel_taken = true;
            self.closed_known[slot] = true;
        }
        self.refused(
            result,
            &[
                |r| matches!(r, Refused::AlreadyClosed(_)),
                |r| matches!(r, Refused::Ended(_)),
                |r| r == Refused::Draining,
            ],
        );
    }

    fn handle_input(&mut self, input: Input) {
        let published = &self.published;
        let orphan = |s: usize| Box::new(ChoiceCore::orphan(s as u32, published[s].clone()));
        match input {
            Input::Stopped(id, core) => {
                let result = self.router.child_stopped(id, core, orphan);
                self.refused(result, &[]);
            }
            Input::Panicked(id) => {
                let result = self.router.child_failed(id, "panicked".into(), orphan);
                self.refused(result, &[]);
            }
            Input::Failed(slot) => {
                self.closed_known[slot] = true;
                let result = self.router.failed(slot);
                self.refused(
                    result,
                    &[
                        |r| matches!(r, Refused::AlreadyClosed(_)),
                        |r| matches!(r, Refused::Ended(_)),
                    ],
                );
            }
            Input::Cancel(slot, reason) => self.cancel(slot, reason),
            Input::Close(close) => {
                if self.router.is_reading() {
                    for s in 0..self.finished.len() {
                        if !self.finished[s] && !close.keeps(s as u32) {
                            self.closed_known[s] = true;
                        }
                    }
                    self.closing = Some(close.clone());
                }
                let finished = &self.finished;
                let result = self.router.close(close, |s| finished[s]);
                self.refused(result, &[|r| r == Refused::Draining]);
            }
        }
        self.after_input();
    }

    /// An actor handles its next message.
    fn deliver(&mut self, id: u64, bad: bool) {
        let actor = self.actors.get_mut(&id).unwrap();
        let Some(msg) = actor.mailbox.pop_front() else {
            return;
        };
        let slot = actor.slot;
        let core = actor.core.as_mut().unwrap();
        let was_open = matches!(core.phase(), Phase::Open);
        let mut stop = false;
        match msg {
            ChoiceMsg::Batch(_) => {
                if bad {
                    core.fail(error("a bad update"));
                }
                actor.applied.set(actor.applied.get() + 1);
            }
            ChoiceMsg::Cancel(reason) => {
                core.cancel(reason, &mut Vec::new());
            }
            ChoiceMsg::End(outcome) => {
                core.settle(outcome, &mut Vec::new());
                stop = true;
            }
            ChoiceMsg::Retire => {
                core.release_buffers();
                stop = true;
                if !actor.mailbox.is_empty() {
                    self.violations
                        .push(format!("slot {slot}'s actor got messages after its retire"));
                }
            }
        }
        let phase = core.phase().clone();
        let failed_now = was_open && matches!(phase.closed(), Some(Closed::Failed(_)));
        if actor.epoch == self.epochs[slot] {
            self.publish(slot, phase);
        }
        if failed_now {
            self.inbox.push_back(Input::Failed(slot));
        }
        if stop {
            let actor = self.actors.get_mut(&id).unwrap();
            actor.stopped = true;
            actor.mailbox.clear();
            let core = actor.core.take();
            self.inbox.push_back(Input::Stopped(id, core));
        }
    }

    fn running(&self) -> Vec<u64> {
        (self.actors.iter())
            .filter(|(_, a)| !a.stopped)
            .map(|(id, _)| *id)
            .collect()
    }

    fn apply(&mut self, op: Op) {
        let len = self.router.len();
        match op {
            Op::Appear if self.router.is_reading() => {
                let slot = len;
                self.finished.push(false);
                self.published.push(Phase::Open);
                self.epochs.push(0);
                self.settles.push(0);
                self.end_sent.push(0);
                self.cancel_sent.push(0);
                let unkept = (self.closing.as_ref()).is_some_and(|c| !c.keeps(slot as u32));
                self.closed_known.push(unkept);
                self.router.add(Box::new(ChoiceCore::new(slot as u32, 0)));
                self.router.batch(slot, Batch::default()).unwrap();
                self.router.cancel_new(slot);
                self.after_input();
            }
            Op::Batch(s) if self.router.is_reading() && len > 0 => {
                self.router.batch(s % len, Batch::default()).unwrap();
                self.after_input();
            }
            Op::Finish(s) if self.router.is_reading() && len > 0 => {
                self.finished[s % len] = true;
            }
            Op::Cancel(s, r) if len > 0 => {
                let reason = REASONS[r as usize % REASONS.len()];
                self.reasons_sent.push(reason);
                self.inbox.push_back(Input::Cancel(s % len, reason));
            }
            Op::Close(mask, r) => {
                let keep: Vec<u32> = (0..8).filter(|i| mask & (1 << i) != 0).collect();
                let reason = REASONS[r as usize % REASONS.len()];
                self.reasons_sent.push(reason);
                self.inbox.push_back(Input::Close(Close::new(keep, reason)));
            }
            Op::Deliver(a, bad) => {
                let running = self.running();
                if !running.is_empty() {
                    self.deliver(running[a % running.len()], bad);
                }
            }
            Op::Inbox => {
                if let Some(input) = self.inbox.pop_front() {
                    self.handle_input(input);
                }
            }
            Op::Quiet if self.router.is_reading() && self.router.any_live() => {
                self.router.quiet();
                self.after_input();
                self.router.release_buffers();
            }
            Op::Panic(a) | Op::Kill(a) => {
                let running = self.running();
                if running.is_empty() {
                    return;
                }
                let id = running[a % running.len()];
                let actor = self.actors.get_mut(&id).unwrap();
                actor.stopped = true;
                actor.mailbox.clear();
                self.inbox.push_back(match op {
                    Op::Panic(_) => Input::Panicked(id),
                    _ => Input::Stopped(id, None),
                });
            }
            Op::SpawnFails(fails) => self.spawn_fails = fails,
            Op::End(ok) if self.router.is_reading() => {
                let outcome = if ok { Ok(()) } else { Err(error(UPSTREAM)) };
                let finished = self.finished.clone();
                self.router.end(outcome, |s| finished[s]).unwrap();
                self.after_input();
            }
            _ => {}
        }
    }

    /// Ends the stream if it is not over, and runs every actor and the reader's mailbox
    /// until nothing is left to do.
    fn finish(&mut self) {
        self.spawn_fails = false;
        if self.router.is_reading() {
            self.apply(Op::End(false));
        }
        loop {
            let busy: Vec<u64> = (self.actors.iter())
                .filter(|(_, a)| !a.stopped && !a.mailbox.is_empty())
                .map(|(id, _)| *id)
                .collect();
            for id in &busy {
                self.deliver(*id, false);
            }
            let input = self.inbox.pop_front();
            let had_input = input.is_some();
            if let Some(input) = input {
                self.handle_input(input);
            }
            if busy.is_empty() && !had_input {
                break;
            }
        }
    }
}

fn check(expected: Option<u32>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut model = Model::new(expected);
    for op in ops {
        model.apply(op);
    }
    model.finish();
    prop_assert!(model.violations.is_empty(), "{:?}", model.violations);
    prop_assert!(model.router.done(), "the reader's work is done");
    prop_assert_eq!(model.stops, 1, "stopped once");
    prop_assert!(model.reserves <= 1, "replacements reserved once at most");
    prop_assert!(model.drops <= 1, "the upstream dropped once at most");
    // Each replacement reserved is for a choice that failed, and every choice the
    // upstream's failure failed has one (but the stream's finished ones: it has them).
    if let Some(counted) = &model.counted {
        for (slot, counted) in counted.iter().enumerate() {
            let failed = match model.published[slot].closed() {
                Some(Closed::Failed(e)) => Some(e.to_string().contains(UPSTREAM)),
                _ => None,
            };
            if *counted {
                prop_assert!(failed.is_some(), "slot {} replaced, not failed", slot);
            } else if !model.finished[slot] {
                prop_assert!(
                    failed != Some(true),
                    "slot {} failed by the upstream, not replaced",
                    slot
                );
            }
        }
    }
    for (slot, settles) in model.settles.iter().enumerate() {
        prop_assert_eq!(*settles, 1, "slot {} settled once", slot);
    }
    // A choice cancelled says why: the reason of a cancel or a close that was sent.
    for (slot, phase) in model.published.iter().enumerate() {
        if let Some(reason) = phase.cancel_reason() {
            prop_assert!(
                model.reasons_sent.contains(&reason),
                "slot {} cancelled for {:?}, never sent",
                slot,
                reason
            );
        }
    }
    let running = model.running();
    prop_assert!(running.is_empty(), "no actor left running: {:?}", running);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_interleaving_keeps_the_invariants(
        expected in prop::option::of(0..6u32),
        ops in prop::collection::vec(op(), 0..80),
    ) {
        check(expected, ops)?;
    }
}

fn fake(id: u64) -> Fake {
    Fake {
        id,
        applied: Rc::new(Cell::new(0)),
    }
}

fn core(index: u32) -> Box<ChoiceCore> {
    Box::new(ChoiceCore::new(index, 0))
}

fn commands(router: &mut Router<Fake>) -> Vec<String> {
    std::iter::from_fn(|| router.next_command())
        .map(|c| match c {
            Command::Spawn { slot, .. } => format!("spawn {slot}"),
            Command::Send { slot, msg } => match msg {
                ChoiceMsg::Batch(_) => format!("batch {slot}"),
                ChoiceMsg::Cancel(reason) => format!("cancel {slot} {reason:?}"),
                ChoiceMsg::End(_) => format!("end {slot}"),
                ChoiceMsg::Retire => format!("retire-msg {slot}"),
            },
            Command::Retire { slot } => format!("retire {slot}"),
            Command::PublishOrphan { slot, .. } => format!("orphan {slot}"),
            Command::Reserve(n) => format!("reserve {n}"),
            Command::DropUpstream => "drop".into(),
            Command::Stop => "stop".into(),
        })
        .collect()
}

#[test]
fn a_retired_choice_waits_in_its_slot_and_restarts_with_the_next_message() {
    let mut router = Router::new(None, None);
    router.add(core(0));
    router.started(0, fake(7)).unwrap();
    router.batch(0, Batch::default()).unwrap();
    assert_eq!(commands(&mut router), ["spawn 0", "batch 0"]);
    assert!(router.busy(0), "one batch sent, none applied");
    router.quiet();
    assert_eq!(commands(&mut router), ["retire 0"]);
    router.batch(0, Batch::default()).unwrap();
    assert!(
        commands(&mut router).is_empty(),
        "nothing goes to a retiring actor"
    );
    router
        .child_stopped(7, Some(core(0)), |_| unreachable!())
        .unwrap();
    assert_eq!(commands(&mut router), ["spawn 0"]);
    router.started(0, fake(8)).unwrap();
    assert_eq!(
        commands(&mut router),
        ["batch 0"],
        "the held batch, to the new actor"
    );
}

#[test]
fn a_cancel_keeps_its_reason_and_a_second_is_refused() {
    let mut router = Router::new(Some(1), None);
    router.add(core(0));
    router.started(0, fake(1)).unwrap();
    router.cancel(0, CancelReason::LowConfidence).unwrap();
    assert!(!router.slot(0).unwrap().wanted());
    assert_eq!(
        router.cancel(0, CancelReason::Asked),
        Err(Refused::AlreadyClosed(0))
    );
    assert_eq!(router.failed(0), Err(Refused::AlreadyClosed(0)));
    assert!(router.after_input(|_| false));
    assert!(!router.after_input(|_| false), "dropped once");
    assert_eq!(
        commands(&mut router),
        ["spawn 0", "cancel 0 LowConfidence", "drop"]
    );
}

#[test]
fn a_refused_cancel_is_not_counted_as_a_cancel() {
    let mut router = Router::new(Some(2), None);
    router.add(core(0));
    router.add(core(1));
    router.started(0, fake(1)).unwrap();
    router.started(1, fake(2)).unwrap();
    router.failed(0).unwrap();
    assert_eq!(
        router.cancel(0, CancelReason::Asked),
        Err(Refused::AlreadyClosed(0))
    );
    assert!(!router.cancelled_any, "the cancel was not taken");
    // Choice 0 failed, 1 finished, none cancelled: the upstream is read to its end (its
    // usage), not dropped.
    assert!(!router.unwanted(|slot| slot == 1));
    assert!(!router.after_input(|slot| slot == 1));
    assert_eq!(commands(&mut router), ["spawn 0", "spawn 1"]);
}

#[test]
fn a_failed_upstream_reserves_replacements_for_its_open_choices_first() {
    let mut router = Router::new(Some(3), None);
    for i in 0..2 {
        router.add(core(i));
        router.started(i as usize, fake(i as u64)).unwrap();
    }
    router.failed(1).unwrap();
    router.end(Err(error(UPSTREAM)), |_| false).unwrap();
    // Choice 0 open, choice 1 failed, choice 2 never appeared.
    assert_eq!(
        commands(&mut router),
        ["spawn 0", "spawn 1", "reserve 2", "end 0", "end 1"]
    );
    assert_eq!(router.batch(0, Batch::default()), Err(Refused::Ended(0)));
    assert_eq!(router.end(Ok(()), |_| false), Err(Refused::Draining));
}

#[test]
fn a_panicked_actor_leaves_an_orphan_that_settles_at_the_end() {
    let mut router = Router::new(None, None);
    router.add(core(0));
    router.started(0, fake(1)).unwrap();
    router
        .child_failed(1, "panicked".into(), |_| {
            Box::new(ChoiceCore::orphan(0, Phase::Open))
        })
        .unwrap();
    router.batch(0, Batch::default()).unwrap();
    assert!(!router.slot(0).unwrap().wanted());
    assert!(!router.done());
    router.end(Ok(()), |_| false).unwrap();
    assert_eq!(
        commands(&mut router),
        ["spawn 0", "orphan 0", "orphan 0", "stop"]
    );
    assert!(router.orphan(0).unwrap().phase().is_settled());
    assert_eq!(
        router.child_failed(1, "again".into(), |_| unreachable!()),
        Err(Refused::UnknownChild)
    );
}

#[test]
fn a_failed_start_leaves_its_choice_failed_and_unwanted() {
    let mut router = Router::new(Some(2), None);
    for i in 0..2 {
        router.add(core(i));
    }
    router.started(0, fake(0)).unwrap();
    router
        .start_failed(1, core(1), "could not start".into())
        .unwrap();
    assert!(!router.slot(1).unwrap().wanted());
    assert_eq!(router.failed(1), Err(Refused::AlreadyClosed(1)));
    router.end(Err(error(UPSTREAM)), |_| false).unwrap();
    // Only choice 0 is failed by the upstream; choice 1 had failed already.
    assert_eq!(
        commands(&mut router),
        [
            "spawn 0",
            "spawn 1",
            "orphan 1",
            "reserve 1",
            "end 0",
            "orphan 1"
        ]
    );
    assert!(router.orphan(1).unwrap().phase().is_settled());
    assert_eq!(router.batch(1, Batch::default()), Err(Refused::Ended(1)));
}
