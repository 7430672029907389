//! The picks simulated offline from the same samples, one sample at a time, as DeepConf's
//! reference code does it (`deepconf-online`): the figures the gateway's are set beside.
//!
//! Written apart from the library's arithmetic (`choicewise_proto::confidence`), so that it
//! checks it rather than repeats it: token confidence = minus the mean of the top-k
//! log-probabilities (the `top_k` measure), or the sampled token's own log-probability (the
//! `sampled` measure, over the tokens a server sends it for: `<eos>` is the finish, not a
//! token); group confidence = their mean over a sliding window; a sample's
//! confidence = its lowest group confidence (the mean over all its tokens when it is shorter
//! than one window); the threshold = a percentile of the warmup's confidences (linear, as
//! NumPy's default); each later sample stops at the first full window below it; the vote is
//! weighted by confidence (`top_k`) or its exponential (`sampled`); sampling stops once the
//! leader holds `consensus` of the weight and, as in the gateway, [`MIN_VOTES`] votes (one
//! vote is no majority: DeepConf's code stops on it).
//!
//! The other picks are simulated as the replay runs them: every vote counts on the gateway's
//! own ballot ([`Ballot`]: most votes, then the key whose first voter finished earliest), in
//! the order the trace upstream finishes the samples ([`Schedule`]: one a tick, by due tick
//! and sample number, a sample started at the tick of the latest finish), with the gateway's
//! stops, the ballot's one rule ([`Ballot::verdict`]): a vote decided once its leader has
//! `min_votes` and cannot be caught, short once no key can reach `min_votes` and its answer
//! cannot change; an undecided vote answered by its leader; a windowed vote's next window
//! started as soon as the latest one can no longer be unanimous. A sample the pick no longer
//! waits for counts the tokens it had sent by the last finish the pick read.

use choicewise_proto::{Ballot, Measure, Verdict};

use crate::schedule::Schedule;
use crate::traces::{Problem, Sample};

/// The votes a key needs to win (the gateway's default `min_votes`).
pub const MIN_VOTES: usize = 2;

/// The answer after the last `#### ` of a text, digits only (`""` when none), as the set's
/// own `pred_answers` are read.
pub fn answer_of(text: &str) -> String {
    let Some(at) = text.rfind("#### ") else {
        return String::new();
    };
    let a = text[at + 5..].split('\n').next().unwrap_or("").trim();
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_digit()) {
        a.to_string()
    } else {
        String::new()
    }
}

/// What a pick gave on one problem: its answer and the tokens generated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// The answer picked (`""`: none).
    pub answer: String,
    /// Tokens generated.
    pub tokens: u64,
    /// Samples started.
    pub samples: u64,
}

/// Plurality of the non-empty answers, ties to the answer seen first (the set's `majority`).
pub fn majority<'a>(answers: impl IntoIterator<Item = &'a str>) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for a in answers.into_iter().filter(|a| !a.is_empty()) {
        match counts.iter_mut().find(|(k, _)| *k == a) {
            Some((_, c)) => *c += 1,
            None => counts.push((a, 1)),
        }
    }
    let mut best: Option<(&str, usize)> = None;
    for (k, c) in counts {
        if best.is_none_or(|(_, b)| c > b) {
            best = Some((k, c));
        }
    }
    best.map(|(k, _)| k.to_string()).unwrap_or_default()
}

/// The answer a finished sample votes with (`""`: none; an unfinished sample has none).
fn vote_key(s: &Sample) -> &str {
    if s.finished { &s.answer } else { "" }
}

/// The set's plain vote of the first `k` samples: every one to its end, plurality with ties
/// to the answer seen first by sample number (the set's `majority`; the vote curve's).
pub fn plain_vote(problem: &Problem, k: usize) -> Outcome {
    let samples = &problem.samples[..k.min(problem.samples.len())];
    Outcome {
        answer: majority(samples.iter().map(vote_key)),
        tokens: samples.iter().map(|s| s.len() as u64).sum(),
        samples: samples.len() as u64,
    }
}

/// A problem's samples replayed on the upstream's [`Schedule`]: which started when, which
/// finished.
struct Replay<'a> {
    samples: &'a [Sample],
    schedule: Schedule,
    /// Start tick of each sample started.
    start: Vec<Option<u64>>,
    finished: Vec<bool>,
    /// Finishes so far (the next one's place in the finish order).
    places: u64,
}

impl<'a> Replay<'a> {
    fn new(samples: &'a [Sample]) -> Self {
        Replay {
            samples,
            schedule: Schedule::new(),
            start: vec![None; samples.len()],
            finished: vec![false; samples.len()],
            places: 0,
        }
    }

    fn start(&mut self, k: usize) {
        self.start[k] = Some(self.schedule.start(k, self.samples[k].len()).0);
    }

    /// The next finish: (sample, its place in the finish order, its tick).
    fn next(&mut self) -> Option<(usize, u64, u64)> {
        let (k, tick) = self.schedule.finish_next()?;
        self.finished[k] = true;
        self.places += 1;
        Some((k, self.places - 1, tick))
    }

    /// Samples started.
    fn started(&self) -> u64 {
        self.start.iter().flatten().count() as u64
    }

    /// Tokens sent by tick `stop` (the last finish read; `None`: every sample to its end): a
    /// finished sample's all, a running one's up to that tick (its last waits for its finish).
    fn tokens(&self, stop: Option<u64>) -> u64 {
        (self.samples.iter().zip(&self.start).zip(&self.finished))
            .filter_map(|((s, start), &done)| Some((s, (*start)?, done)))
            .map(|(s, start, done)| match stop {
                Some(stop) if !done => {
                    (s.len().saturating_sub(1) as u64).min(stop.saturating_sub(start))
                }
                _ => s.len() as u64,
            })
            .sum()
    }
}

/// Whether a plain vote has stopped with `remaining` choices still to settle: the ballot's
/// one rule ([`Ballot::verdict`]), for a vote answered even undecided, as the gateway's is.
fn decides(ballot: &Ballot, remaining: usize, min_votes: usize) -> bool {
    ballot.verdict(remaining, min_votes, true) != Verdict::Open
}

/// The ballot's leader (`""`: none): the answer, decided or not.
fn leader(ballot: &Ballot) -> String {
    ballot.leader().map_or(String::new(), |l| l.key.to_string())
}

/// One sample: sample 0's answer, finished or not (the gateway returns it as it is).
pub fn single(problem: &Problem) -> Outcome {
    let Some(s) = problem.samples.first() else {
        return Outcome::default();
    };
    Outcome {
        answer: s.answer.clone(),
        tokens: s.len() as u64,
        samples: 1,
    }
}

/// The plain vote of the first `k` samples, started together, counted in finish order on the
/// ballot, stopped as the gateway stops it.
pub fn vote(problem: &Problem, k: usize) -> Outcome {
    let k = k.min(problem.samples.len());
    let mut replay = Replay::new(&problem.samples[..k]);
    (0..k).for_each(|j| replay.start(j));
    let mut ballot = Ballot::new();
    let mut stop = None;
    let mut settled = 0;
    while let Some((j, place, tick)) = replay.next() {
        settled += 1;
        let key = vote_key(&problem.samples[j]);
        if !key.is_empty() {
            ballot.vote(key, place);
        }
        if decides(&ballot, k - settled, MIN_VOTES) {
            stop = Some(tick);
            break;
        }
    }
    Outcome {
        answer: leader(&ballot),
        tokens: replay.tokens(stop),
        samples: replay.started(),
    }
}

/// `k` samples started together; the first to finish with `stop` answers and the others
/// stop then.
pub fn first_finished(problem: &Problem, k: usize) -> Outcome {
    let k = k.min(problem.samples.len());
    let mut replay = Replay::new(&problem.samples[..k]);
    (0..k).for_each(|j| replay.start(j));
    while let Some((j, _, tick)) = replay.next() {
        if problem.samples[j].finished {
            return Outcome {
                answer: problem.samples[j].answer.clone(),
                tokens: replay.tokens(Some(tick)),
                samples: replay.started(),
            };
        }
    }
    Outcome {
        answer: String::new(),
        tokens: replay.tokens(None),
        samples: replay.started(),
    }
}

/// The first sample to produce a token, on an upstream where none is slow: all `k` produce
/// at the first tick, the lowest number answers (sample 0) and the others stop after that
/// token; hedged, only sample 0 starts (its first token comes before any hedge). The
/// reference has no model of a slow first token: on a slow upstream it is one sample's.
pub fn first_token(problem: &Problem, k: usize, hedged: bool) -> Outcome {
    let mut o = single(problem);
    if !hedged {
        let others = problem.samples.iter().take(k).skip(1);
        o.tokens += others.map(|s| s.len().min(1) as u64).sum::<u64>();
        o.samples = k.min(problem.samples.len()) as u64;
    }
    o
}

/// The windowed vote (adaptive consistency) as the gateway runs it: windows of `w` samples
/// in number order, the next started as soon as the latest one can no longer be unanimous
/// (a sample of it finished without a vote, or two voted apart); the first unanimous window
/// answers; once every window is started, the plurality of all, decided as soon as it cannot
/// change; undecided, the ballot's leader.
pub fn adaptive(problem: &Problem, max: usize, w: usize) -> Outcome {
    let total = max.min(problem.samples.len());
    let w = w.max(1);
    let mut replay = Replay::new(&problem.samples[..total]);
    // Each settled sample's vote (`Some(None)`: settled without one).
    let mut keys: Vec<Option<Option<&str>>> = vec![None; total];
    let mut windows: Vec<usize> = Vec::new();
    let mut next = 0;
    let mut open = |replay: &mut Replay<'_>, windows: &mut Vec<usize>| {
        windows.push(next);
        (next..(next + w).min(total)).for_each(|k| replay.start(k));
        next += w;
        next
    };
    let mut opened = open(&mut replay, &mut windows);
    let mut ballot = Ballot::new();
    let mut winner = None;
    let mut stop = None;
    let mut settled = 0;
    while let Some((k, place, tick)) = replay.next() {
        settled += 1;
        let key = Some(vote_key(&problem.samples[k])).filter(|k| !k.is_empty());
        if let Some(key) = key {
            ballot.vote(key, place);
        }
        keys[k] = Some(key);
        let members = |start: usize| start..(start + w).min(total);
        let unanimous = windows.iter().find_map(|&start| {
            let mut agreed: Option<&str> = None;
            for i in members(start) {
                let key = keys[i]??;
                if agreed.is_some_and(|a| a != key) {
                    return None;
                }
                agreed = Some(key);
            }
            agreed
        });
        if let Some(key) = unanimous {
            winner = Some(key.to_string());
            stop = Some(tick);
            break;
        }
        let latest: Vec<Option<&str>> = members(*windows.last().unwrap_or(&0))
            .filter_map(|i| keys[i])
            .collect();
        let first = latest.iter().flatten().next();
        let split = latest.iter().any(|k| k.is_none() || k.as_ref() != first);
        if split && opened < total {
            opened = open(&mut replay, &mut windows);
        }
        if opened >= total {
            let remaining = total - settled;
            match ballot.verdict(remaining, MIN_VOTES, true) {
                Verdict::Won => {
                    winner = Some(leader(&ballot));
                    stop = Some(tick);
                    break;
                }
                Verdict::Short => {
                    stop = Some(tick);
                    break;
                }
                _ => {}
            }
        }
    }
    Outcome {
        answer: winner.unwrap_or_else(|| leader(&ballot)),
        tokens: replay.tokens(stop),
        samples: replay.started(),
    }
}

/// DeepConf online's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeepConf {
    /// How a token's confidence is measured, and so how a vote weighs.
    pub measure: Measure,
    /// Samples of the warmup (they set the threshold).
    pub warmup: usize,
    /// Share of the warmup's confidences at or above the threshold (0.9: high, 0.1: low).
    pub keep: f64,
    /// Tokens of a group.
    pub group_tokens: usize,
    /// The most samples.
    pub max_samples: usize,
    /// Leader's share of the weight that stops sampling (above 1: never).
    pub consensus: f64,
}

/// Token confidences of a sample, `<eos>`'s position included (the set's arrays hold it).
pub fn token_confidences(s: &Sample) -> Vec<f64> {
    s.top_logprobs
        .iter()
        .map(|top| -top.iter().map(|&l| f64::from(l)).sum::<f64>() / top.len() as f64)
        .collect()
}

/// Token confidences of a sample by `measure`: `top_k`'s [`token_confidences`]; `sampled`'s,
/// each token's own log-probability, the tokens before `<eos>` (a server sends the finish,
/// not a log-probability, for it).
pub fn token_confidences_by(s: &Sample, measure: Measure) -> Vec<f64> {
    match measure {
        Measure::TopK => token_confidences(s),
        _ => {
            let sent = if s.finished {
                s.len().saturating_sub(1)
            } else {
                s.len()
            };
            s.logprob[..sent.min(s.logprob.len())]
                .iter()
                .map(|&l| f64::from(l))
                .collect()
        }
    }
}

/// A vote's weight from a sample's confidence: its exponential for `sampled` (a mean of
/// log-probabilities), the confidence itself for `top_k`.
pub fn weight(measure: Measure, confidence: f64) -> f64 {
    match measure {
        Measure::TopK => confidence,
        _ => confidence.exp(),
    }
}

/// A sample's confidence: its lowest mean over `g` consecutive tokens (the mean of all when
/// shorter), and, given a threshold, the position whose full window first falls below it.
pub fn lowest_group(conf: &[f64], g: usize, threshold: Option<f64>) -> (f64, Option<usize>) {
    let g = g.max(1);
    if conf.is_empty() {
        return (0.0, None);
    }
    if conf.len() < g {
        return (conf.iter().sum::<f64>() / conf.len() as f64, None);
    }
    let mut sum: f64 = conf[..g].iter().sum();
    let mut lowest = sum / g as f64;
    let mut stop = threshold.filter(|&s| lowest < s).map(|_| g - 1);
    for i in g..conf.len() {
        sum += conf[i] - conf[i - g];
        let mean = sum / g as f64;
        lowest = lowest.min(mean);
        if stop.is_none() && threshold.is_some_and(|s| mean < s) {
            stop = Some(i);
        }
    }
    (lowest, stop)
}

/// NumPy's `percentile(values, q)` with linear interpolation.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let pos = (q / 100.0).clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// DeepConf online on one problem, sample after sample.
pub fn deepconf(problem: &Problem, c: &DeepConf) -> Outcome {
    let samples = &problem.samples[..c.max_samples.min(problem.samples.len())];
    let warmup = c.warmup.min(samples.len());
    let mut tokens = 0u64;
    // Sample i finished i-th: one at a time.
    let mut ballot = Ballot::new();
    let add = |ballot: &mut Ballot, key: &str, conf: f64, i: usize| {
        if !key.is_empty() {
            ballot.add(key, weight(c.measure, conf), i as u64);
        }
    };
    let confs: Vec<f64> = samples[..warmup]
        .iter()
        .map(|s| lowest_group(&token_confidences_by(s, c.measure), c.group_tokens, None).0)
        .collect();
    let threshold = percentile(&confs, 100.0 * (1.0 - c.keep));
    for (i, (s, &conf)) in samples[..warmup].iter().zip(&confs).enumerate() {
        tokens += s.len() as u64;
        if conf >= threshold {
            add(&mut ballot, vote_key(s), conf, i);
        }
    }
    let mut started = warmup;
    for (i, s) in samples.iter().enumerate().skip(warmup) {
        let leads = ballot.leader().is_some_and(|l| l.votes >= MIN_VOTES);
        if ballot.reaches(c.consensus) && leads {
            break;
        }
        started += 1;
        let confs = token_confidences_by(s, c.measure);
        let (conf, stop) = lowest_group(&confs, c.group_tokens, Some(threshold));
        match stop {
            Some(at) => tokens += (at + 1) as u64,
            None => {
                tokens += s.len() as u64;
                if conf >= threshold {
                    add(&mut ballot, vote_key(s), conf, i);
                }
            }
        }
    }
    Outcome {
        answer: leader(&ballot),
        tokens,
        samples: started as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(answer: &str, len: usize, finished: bool, conf: f32) -> Sample {
        Sample {
            tokens: vec![3; len],
            logprob: vec![0.0; len],
            top_ids: vec![[0; 5]; len],
            top_logprobs: vec![[-conf; 5]; len],
            finished,
            answer: answer.into(),
        }
    }

    fn problem(samples: Vec<Sample>) -> Problem {
        Problem {
            prompt: "1+1=\n".into(),
            answer: "2".into(),
            samples,
            ..Problem::default()
        }
    }

    #[test]
    fn reads_the_answer_after_the_last_marker() {
        assert_eq!(answer_of("1+1=2\n#### 2"), "2");
        assert_eq!(answer_of("#### 7\n#### 825"), "825");
        assert_eq!(answer_of("#### x"), "");
        assert_eq!(answer_of("no answer"), "");
    }

    #[test]
    fn majority_breaks_ties_by_first_seen() {
        assert_eq!(majority(["3", "", "4", "4", "3"]), "3");
        assert_eq!(majority(["", "5", "4", "4"]), "4");
        assert_eq!(majority(["", ""]), "");
    }

    #[test]
    fn percentile_is_numpys_linear_one() {
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 10.0), 1.3);
        assert_eq!(percentile(&[4.0, 1.0], 50.0), 2.5);
    }

    #[test]
    fn the_lowest_group_and_where_it_first_falls_below() {
        let conf = [4.0, 4.0, 1.0, 1.0, 4.0];
        let (lowest, stop) = lowest_group(&conf, 2, Some(3.0));
        assert_eq!(lowest, 1.0);
        assert_eq!(stop, Some(2)); // (4 + 1) / 2 = 2.5 < 3 at position 2
        assert_eq!(lowest_group(&[2.0, 4.0], 3, Some(5.0)), (3.0, None));
    }

    #[test]
    fn first_finished_counts_every_sample_up_to_the_first_finish() {
        let p = problem(vec![
            sample("2", 10, true, 1.0),
            sample("3", 6, true, 1.0),
            sample("", 4, false, 1.0),
        ]);
        let o = first_finished(&p, 3);
        assert_eq!((o.answer.as_str(), o.tokens), ("3", 6 + 6 + 4));
    }

    #[test]
    fn a_tied_vote_goes_to_the_key_that_finished_first() {
        // "4" finishes at 5 and 6, "3" at 8 and 10: 2 to 2, "4" leads (the set's majority,
        // by sample number, would say "3").
        let p = problem(vec![
            sample("3", 10, true, 1.0),
            sample("4", 5, true, 1.0),
            sample("3", 8, true, 1.0),
            sample("4", 6, true, 1.0),
        ]);
        assert_eq!(vote(&p, 4).answer, "4");
        assert_eq!(plain_vote(&p, 4).answer, "3");
        // Two samples due at one tick finish a tick apart, the lower number first.
        let p = problem(vec![sample("7", 5, true, 1.0), sample("8", 5, true, 1.0)]);
        assert_eq!(vote(&p, 2).answer, "7");
        let p = problem(vec![sample("", 5, false, 1.0), sample("8", 5, true, 1.0)]);
        assert_eq!(first_finished(&p, 2).answer, "8");
    }

    #[test]
    fn a_vote_stops_once_its_leader_cannot_be_caught() {
        // "5" at 4 and 5: 2 votes, 1 sample left; the third had sent 5 tokens by then.
        let p = problem(vec![
            sample("5", 4, true, 1.0),
            sample("5", 5, true, 1.0),
            sample("6", 20, true, 1.0),
        ]);
        let o = vote(&p, 3);
        assert_eq!(
            (o.answer.as_str(), o.tokens, o.samples),
            ("5", 4 + 5 + 5, 3)
        );
        // Four different answers: undecided, answered by the first to finish.
        let p = problem(
            [("1", 9), ("2", 7), ("3", 8), ("4", 10)]
                .iter()
                .map(|&(a, len)| sample(a, len, true, 1.0))
                .collect(),
        );
        assert_eq!(vote(&p, 4).answer, "2");
    }

    #[test]
    fn adaptive_stops_at_the_first_unanimous_window() {
        let p = problem(vec![
            sample("2", 5, true, 1.0),
            sample("3", 5, true, 1.0),
            sample("2", 5, true, 1.0),
            sample("2", 5, true, 1.0),
            sample("9", 5, true, 1.0),
            sample("9", 5, true, 1.0),
        ]);
        let o = adaptive(&p, 6, 2);
        assert_eq!((o.answer.as_str(), o.tokens, o.samples), ("2", 20, 4));
    }

    #[test]
    fn deepconf_stops_unsure_samples_and_sampling_at_consensus() {
        // Warmup of 2 (confidences 5 and 1, threshold at keep 0.5 = 3): only the sure one
        // votes; it holds all the weight, but one vote is no majority: one more sample runs,
        // agrees, and nothing more starts.
        let mut samples = vec![sample("2", 8, true, 5.0), sample("3", 8, true, 1.0)];
        samples.push(sample("2", 8, true, 5.0));
        samples.extend((0..4).map(|_| sample("3", 8, true, 5.0)));
        let c = DeepConf {
            measure: Measure::TopK,
            warmup: 2,
            keep: 0.5,
            group_tokens: 4,
            max_samples: 7,
            consensus: 0.95,
        };
        let o = deepconf(&problem(samples.clone()), &c);
        assert_eq!((o.answer.as_str(), o.tokens, o.samples), ("2", 24, 3));
        // Without the stop, the four sure samples of "3" outvote it; an unsure later sample
        // is stopped after its first full window.
        samples.push(sample("2", 8, true, 1.0));
        let c = DeepConf {
            consensus: 2.0,
            max_samples: 8,
            ..c
        };
        let o = deepconf(&problem(samples), &c);
        assert_eq!(
            (o.answer.as_str(), o.tokens, o.samples),
            ("3", 24 + 32 + 4, 8)
        );
    }
}
