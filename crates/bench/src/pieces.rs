//! The figures of the pieces that have targets of their own, in the same harness: the
//! incremental partial-JSON parser and token counting.

use std::hint::black_box;
use std::time::Instant;

use choicewise_usage::{EncodingName, count_text, preload};

#[path = "../../partial-json/benches/support/mod.rs"]
#[allow(dead_code, clippy::all)]
mod pj_support;

use crate::stats::median;

fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut secs = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f();
        secs.push(start.elapsed().as_secs_f64());
    }
    median(&secs)
}

pub struct PartialJsonFigures {
    pub bytes: usize,
    pub fragments: usize,
    pub incremental_us: f64,
    pub from_str_us: f64,
}

/// A ~100 KB arguments object in 4-byte fragments: push each, read the value after each;
/// against one `serde_json::from_str` of the whole, in the same run.
pub fn partial_json(reps: usize) -> PartialJsonFigures {
    let doc = pj_support::realistic_doc(100_000);
    let fragments = pj_support::fragments(&doc, 4);
    let incremental = time(reps, || {
        let mut p = choicewise_core::partial_json::PartialJson::new();
        for f in &fragments {
            p.push(f).expect("valid document");
            black_box(p.value());
        }
        black_box(p.finish().expect("complete"));
    });
    let from_str = time(reps, || {
        black_box(serde_json::from_str::<serde_json::Value>(&doc).expect("valid document"));
    });
    PartialJsonFigures {
        bytes: doc.len(),
        fragments: fragments.len(),
        incremental_us: incremental * 1e6,
        from_str_us: from_str * 1e6,
    }
}

pub struct TokenFigures {
    /// First load of the o200k_base table in this process, ms (`None` if it was loaded
    /// before this measurement).
    pub o200k_first_load_ms: f64,
    pub cl100k_first_load_ms: f64,
    pub o200k_mib_per_s: f64,
    pub cl100k_mib_per_s: f64,
    pub text_bytes: usize,
}

/// Table load times (first use in the process) and counting throughput on generated text.
pub fn tokens(reps: usize, text: &str) -> TokenFigures {
    let start = Instant::now();
    preload(EncodingName::O200kBase);
    let o200k_first_load_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    preload(EncodingName::Cl100kBase);
    let cl100k_first_load_ms = start.elapsed().as_secs_f64() * 1e3;
    let mib = text.len() as f64 / (1024.0 * 1024.0);
    let o200k = time(reps, || {
        black_box(count_text(EncodingName::O200kBase, text));
    });
    let cl100k = time(reps, || {
        black_box(count_text(EncodingName::Cl100kBase, text));
    });
    TokenFigures {
        o200k_first_load_ms,
        cl100k_first_load_ms,
        o200k_mib_per_s: mib / o200k,
        cl100k_mib_per_s: mib / cl100k,
        text_bytes: text.len(),
    }
}
