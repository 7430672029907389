//! Does a confidence measure tell a right sample from a wrong one of the same problem? The
//! within-problem AUROC: over the problems that have both right and wrong samples, the chance
//! that a right sample's confidence (its lowest window mean, [`crate::reference::lowest_group`])
//! is above a wrong one's (ties count half), averaged over those problems. 0.5 is a coin;
//! 1 ranks every right sample first. A vote weighted by a measure that does not separate
//! within a problem only adds noise to the plain vote.
//!
//! ```
//! use choicewise_picks::separation::within_problem_auroc;
//! use choicewise_picks::traces::{Problem, Sample, TraceSet, TOP_K};
//! use choicewise_picks::Measure;
//! // Right samples are surer of each token (by their own log-probability): AUROC 1.
//! let sample = |answer: &str, lp: f32| Sample {
//!     tokens: vec![1, 1, 0],
//!     logprob: vec![lp, lp, -0.01],
//!     top_ids: vec![[0; TOP_K]; 3],
//!     top_logprobs: vec![[-1.0; TOP_K]; 3],
//!     finished: true,
//!     answer: answer.into(),
//! };
//! let problem = Problem {
//!     answer: "4".into(),
//!     samples: vec![sample("4", -0.1), sample("5", -2.0), sample("4", -0.2)],
//!     ..Problem::default()
//! };
//! let set = TraceSet { vocab: vec!["<eos>".into(), "4".into()], eos: 0, problems: vec![problem] };
//! let s = within_problem_auroc(&set, Measure::Sampled, 2).unwrap();
//! assert_eq!((s.auroc, s.problems), (1.0, 1));
//! // Every top-k alike: a coin.
//! assert_eq!(within_problem_auroc(&set, Measure::TopK, 2).unwrap().auroc, 0.5);
//! ```

use choicewise_proto::Measure;
use serde_json::{Value, json};

use crate::reference::{lowest_group, token_confidences_by};
use crate::traces::{Problem, TraceSet};

/// A measure's within-problem AUROC over a set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Separation {
    /// The mean of the problems' AUROCs.
    pub auroc: f64,
    /// The problems that had both right and wrong samples (the others say nothing).
    pub problems: usize,
}

/// Whether a sample is right: finished, with the problem's answer.
fn right(p: &Problem, s: &crate::traces::Sample) -> bool {
    s.finished && p.is_right(&s.answer)
}

/// One problem's AUROC of `measure` (its lowest window of `group_tokens`), `None` without
/// both right and wrong samples.
pub fn problem_auroc(p: &Problem, measure: Measure, group_tokens: usize) -> Option<f64> {
    let (mut yes, mut no) = (Vec::new(), Vec::new());
    for s in &p.samples {
        let conf = lowest_group(&token_confidences_by(s, measure), group_tokens, None).0;
        match right(p, s) {
            true => yes.push(conf),
            false => no.push(conf),
        }
    }
    if yes.is_empty() || no.is_empty() {
        return None;
    }
    let mut wins = 0.0;
    for &r in &yes {
        for &w in &no {
            wins += if r > w {
                1.0
            } else if r == w {
                0.5
            } else {
                0.0
            };
        }
    }
    Some(wins / (yes.len() * no.len()) as f64)
}

/// The within-problem AUROC of `measure` over `set`; `None` when no problem has both right
/// and wrong samples.
pub fn within_problem_auroc(
    set: &TraceSet,
    measure: Measure,
    group_tokens: usize,
) -> Option<Separation> {
    let aurocs: Vec<f64> = (set.problems.iter())
        .filter_map(|p| problem_auroc(p, measure, group_tokens))
        .collect();
    (!aurocs.is_empty()).then(|| Separation {
        auroc: aurocs.iter().sum::<f64>() / aurocs.len() as f64,
        problems: aurocs.len(),
    })
}

/// Both measures' separation as JSON, each with its own window (`group_tokens` for `top_k`,
/// `sampled_group_tokens` for `sampled`): `{"sampled": AUROC, "top_k": AUROC, "problems":
/// N, "use": "sampled"}` (`null` AUROCs and no `use` when no problem has both right and
/// wrong samples). `use` is the measure that separates better (`sampled` on a tie).
pub fn separation_json(set: &TraceSet, settings: &crate::Settings) -> Value {
    let sampled = within_problem_auroc(set, Measure::Sampled, settings.sampled_group_tokens);
    let top_k = within_problem_auroc(set, Measure::TopK, settings.group_tokens);
    let mut out = json!({
        "sampled": sampled.map(|s| s.auroc),
        "top_k": top_k.map(|s| s.auroc),
        "problems": sampled.map_or(0, |s| s.problems),
    });
    if let (Some(s), Some(t)) = (sampled, top_k) {
        let better = if t.auroc > s.auroc {
            Measure::TopK
        } else {
            Measure::Sampled
        };
        out["use"] = json!(better.as_str());
    }
    out
}
