//! The figures of the pieces that have targets of their own, in the same harness: the
//! incremental partial-JSON parser and token counting.

use std::hint::black_box;
use std::time::Instant;

use choicewise_usage::{EncodingName, count_text, preload};

use choicewise_test_support::json_workload as pj_support;

use crate::stats::{median, min_max};

/// Seconds of `reps` runs of `f`.
fn times(reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    let mut secs = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f();
        secs.push(start.elapsed().as_secs_f64());
    }
    secs
}

/// The median of `reps` runs of `f`, in seconds.
fn time(reps: usize, f: impl FnMut()) -> f64 {
    median(&times(reps, f))
}

pub struct PartialJsonFigures {
    pub bytes: usize,
    pub fragments: usize,
    pub runs: usize,
    /// Medians (the target is judged on these).
    pub incremental_us: f64,
    pub from_str_us: f64,
    /// Minima (least disturbed by other load on the machine), for information.
    pub incremental_min_us: f64,
    pub from_str_min_us: f64,
}

/// A ~100 KB arguments object in 4-byte fragments: push each, read the value after each;
/// against one `serde_json::from_str` of the whole, in the same run. Each is run `reps`
/// times after one warm-up run.
pub fn partial_json(reps: usize) -> PartialJsonFigures {
    let doc = pj_support::realistic_doc(100_000);
    let fragments = pj_support::fragments(&doc, 4);
    let incremental = times(reps + 1, || {
        let mut p = choicewise_partial_json::PartialJson::new();
        for f in &fragments {
            p.push(f).expect("valid document");
            black_box(p.value());
        }
        black_box(p.finish().expect("complete"));
    });
    let from_str = times(reps + 1, || {
        black_box(serde_json::from_str::<serde_json::Value>(&doc).expect("valid document"));
    });
    // The first run of each is the warm-up.
    let (incremental, from_str) = (&incremental[1..], &from_str[1..]);
    PartialJsonFigures {
        bytes: doc.len(),
        fragments: fragments.len(),
        runs: reps,
        incremental_us: median(incremental) * 1e6,
        from_str_us: median(from_str) * 1e6,
        incremental_min_us: min_max(incremental).0 * 1e6,
        from_str_min_us: min_max(from_str).0 * 1e6,
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

/// The slowest median time, in milliseconds, of counting 7.5 MiB of one unit repeated, over
/// units shaped to make a count costly (a letter and a combining mark alternating, long
/// runs of whitespace, digits, symbols), in both encodings; and the shape that took it.
pub fn hostile_tokens(reps: usize) -> (f64, String) {
    let units = [
        "a\u{301}",
        "\u{5d0}\u{5b8}",
        "\u{915}\u{94d}",
        "a",
        "%",
        "7",
        "a%",
        "a7",
        " ",
        "\n",
        " \n",
        "\u{3000}",
        "\u{4e2d}",
        "\u{1f44d}\u{1f3fd}",
        "hello world, ",
    ];
    let mut worst = (0.0, String::new());
    for enc in [EncodingName::O200kBase, EncodingName::Cl100kBase] {
        preload(enc);
        for unit in units {
            let text = unit.repeat((15 << 19) / unit.len());
            let ms = time(reps, || {
                black_box(count_text(enc, &text));
            }) * 1e3;
            if ms > worst.0 {
                worst = (ms, format!("{} {unit:?}", enc.as_str()));
            }
        }
    }
    worst
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
