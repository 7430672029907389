//! The picks simulated offline from the same samples, one sample at a time, as DeepConf's
//! reference code does it (`deepconf-online`): the figures the gateway's are set beside.
//!
//! Written apart from the library's arithmetic (`choicewise_proto::confidence`), so that it
//! checks it rather than repeats it: token confidence = minus the mean of the top-k
//! log-probabilities; group confidence = their mean over a sliding window; a sample's
//! confidence = its lowest group confidence (the mean over all its tokens when it is shorter
//! than one window); the threshold = a percentile of the warmup's confidences (linear, as
//! NumPy's default); each later sample stops at the first full window below it; the vote is
//! weighted by confidence; sampling stops once the leader holds `consensus` of the weight.

use crate::traces::{Problem, Sample};

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

/// One sample: the first `k` samples' plain vote.
pub fn vote(problem: &Problem, k: usize) -> Outcome {
    let samples = &problem.samples[..k.min(problem.samples.len())];
    Outcome {
        answer: majority(samples.iter().map(vote_key)),
        tokens: samples.iter().map(|s| s.len() as u64).sum(),
        samples: samples.len() as u64,
    }
}

/// `k` samples at once, the first to finish (the shortest finished one, ties to the lower
/// number) answers and the others stop then.
pub fn first_finished(problem: &Problem, k: usize) -> Outcome {
    let samples = &problem.samples[..k.min(problem.samples.len())];
    let first = samples
        .iter()
        .filter(|s| s.finished)
        .min_by_key(|s| s.len());
    let Some(first) = first else {
        return Outcome {
            answer: String::new(),
            tokens: samples.iter().map(|s| s.len() as u64).sum(),
            samples: samples.len() as u64,
        };
    };
    Outcome {
        answer: first.answer.clone(),
        tokens: samples
            .iter()
            .map(|s| s.len().min(first.len()) as u64)
            .sum(),
        samples: samples.len() as u64,
    }
}

/// The windowed vote (adaptive consistency), one window after the other: the first window
/// of `w` finished samples that all agree answers; when none does, the plurality of all.
pub fn adaptive(problem: &Problem, max: usize, w: usize) -> Outcome {
    let samples = &problem.samples[..max.min(problem.samples.len())];
    let mut tokens = 0;
    for (i, window) in samples.chunks(w.max(1)).enumerate() {
        tokens += window.iter().map(|s| s.len() as u64).sum::<u64>();
        let first = vote_key(&window[0]);
        if window.len() == w && !first.is_empty() && window.iter().all(|s| vote_key(s) == first) {
            return Outcome {
                answer: first.to_string(),
                tokens,
                samples: ((i + 1) * w) as u64,
            };
        }
    }
    Outcome {
        answer: majority(samples.iter().map(vote_key)),
        tokens,
        samples: samples.len() as u64,
    }
}

/// DeepConf online's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeepConf {
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
    let mut weights: Vec<(String, f64)> = Vec::new();
    let add = |weights: &mut Vec<(String, f64)>, key: &str, w: f64| {
        if key.is_empty() {
            return;
        }
        match weights.iter_mut().find(|(k, _)| k == key) {
            Some((_, t)) => *t += w,
            None => weights.push((key.to_string(), w)),
        }
    };
    let confs: Vec<f64> = samples[..warmup]
        .iter()
        .map(|s| lowest_group(&token_confidences(s), c.group_tokens, None).0)
        .collect();
    let threshold = percentile(&confs, 100.0 * (1.0 - c.keep));
    for (s, &conf) in samples[..warmup].iter().zip(&confs) {
        tokens += s.len() as u64;
        if conf >= threshold {
            add(&mut weights, vote_key(s), conf);
        }
    }
    let leader = |weights: &[(String, f64)]| -> Option<(String, f64)> {
        let mut best: Option<(&str, f64)> = None;
        for (k, w) in weights {
            if best.is_none_or(|(_, b)| *w > b) {
                best = Some((k, *w));
            }
        }
        let total: f64 = weights.iter().map(|(_, w)| w).sum();
        best.map(|(k, w)| (k.to_string(), w / total))
    };
    let mut started = warmup;
    for s in &samples[warmup..] {
        if leader(&weights).is_some_and(|(_, share)| share >= c.consensus) {
            break;
        }
        started += 1;
        let (conf, stop) = lowest_group(&token_confidences(s), c.group_tokens, Some(threshold));
        match stop {
            Some(at) => tokens += (at + 1) as u64,
            None => {
                tokens += s.len() as u64;
                if conf >= threshold {
                    add(&mut weights, vote_key(s), conf);
                }
            }
        }
    }
    Outcome {
        answer: leader(&weights).map(|(k, _)| k).unwrap_or_default(),
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
        // votes; it holds all the weight, so nothing more starts.
        let mut samples = vec![sample("2", 8, true, 5.0), sample("3", 8, true, 1.0)];
        samples.extend((0..4).map(|_| sample("3", 8, true, 5.0)));
        let c = DeepConf {
            warmup: 2,
            keep: 0.5,
            group_tokens: 4,
            max_samples: 6,
            consensus: 0.95,
        };
        let o = deepconf(&problem(samples.clone()), &c);
        assert_eq!((o.answer.as_str(), o.tokens, o.samples), ("2", 16, 2));
        // Without the stop, the four sure samples of "3" outvote it; an unsure later sample
        // is stopped after its first full window.
        samples.push(sample("2", 8, true, 1.0));
        let c = DeepConf {
            consensus: 2.0,
            max_samples: 7,
            ..c
        };
        let o = deepconf(&problem(samples), &c);
        assert_eq!(
            (o.answer.as_str(), o.tokens, o.samples),
            ("3", 16 + 32 + 4, 7)
        );
    }
}
