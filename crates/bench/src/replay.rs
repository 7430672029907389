//! The whole process: `choicewise replay --json` on a large recorded stream, against whole
//! processes that read the same file and frame + borrowed-parse it on one thread, or run the
//! eventsource-stream + async-openai loop over it; in paired runs (one of each in turn).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::stats::median;

pub struct ReplayFigures {
    pub megabytes: f64,
    pub chunks: usize,
    /// Medians of the `choicewise replay --json` process and of the parse process.
    pub process_secs: f64,
    pub baseline_secs: f64,
    /// The async-openai process's median, when built with it.
    pub openai_secs: Option<f64>,
    /// Medians of the per-pair ratios (baseline time ÷ choicewise time).
    pub vs_parse: f64,
    pub vs_openai: Option<f64>,
    pub max_rss_kib: i64,
}

/// A baseline's work, as the whole process `choicewise-bench baseline-process KIND FILE` does
/// it: the number of chunk updates it parsed.
pub fn baseline_process(kind: &str, file: &Path) -> usize {
    let bytes = std::fs::read(file).expect("read the recording");
    match kind {
        "parse" => {
            let reads: Vec<&[u8]> = bytes.chunks(64 * 1024).collect();
            crate::baseline::borrowed_parse(&reads)
        }
        #[cfg(feature = "openai-baseline")]
        "openai" => {
            let reads: Vec<std::sync::Arc<[u8]>> =
                bytes.chunks(64 * 1024).map(std::sync::Arc::from).collect();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let acc = rt.block_on(crate::openai::run(reads));
            std::hint::black_box(&acc);
            1
        }
        other => panic!("unknown baseline {other:?}"),
    }
}

/// Runs one whole process, returning its wall time.
fn time_process(cmd: &mut Command) -> f64 {
    let start = Instant::now();
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run the process");
    assert!(status.success(), "{cmd:?} failed");
    start.elapsed().as_secs_f64()
}

/// The `choicewise` binary built next to this one (`cargo build --release -p choicewise-cli`).
pub fn cli_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let cli = exe.with_file_name("choicewise");
    cli.exists().then_some(cli)
}

/// The peak resident set of a running process, KiB (`VmHWM` in `/proc/<pid>/status`: a
/// high-water mark of that process alone, from its exec on).
fn peak_rss_kib(pid: u32) -> Option<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn measure(cli: &Path, file: &Path, chunks: usize, reps: usize) -> ReplayFigures {
    let megabytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
    let me = std::env::current_exe().expect("this binary");
    let baseline =
        |kind: &str| time_process(Command::new(&me).args(["baseline-process", kind]).arg(file));
    let mut process = Vec::new();
    let mut parse = Vec::new();
    let mut openai: Vec<f64> = Vec::new();
    let mut max_rss_kib = 0i64;
    // Paired: one run of each process in turn, so that a slow spell of the machine falls on
    // every contender of a pair.
    for _ in 0..reps {
        let start = Instant::now();
        let mut child = Command::new(cli)
            .args(["replay", "--json"])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run choicewise");
        // Poll the child's high-water mark until it exits (the last reading before the exit
        // is at most a poll interval early).
        let status = loop {
            if let Some(kib) = peak_rss_kib(child.id()) {
                max_rss_kib = max_rss_kib.max(kib);
            }
            match child.try_wait().expect("wait for choicewise") {
                Some(status) => break status,
                None => std::thread::sleep(std::time::Duration::from_millis(2)),
            }
        };
        process.push(start.elapsed().as_secs_f64());
        assert!(status.success(), "choicewise replay --json failed");
        parse.push(baseline("parse"));
        if cfg!(feature = "openai-baseline") {
            openai.push(baseline("openai"));
        }
    }
    let ratios = |other: &[f64]| -> f64 {
        let r: Vec<f64> = other.iter().zip(&process).map(|(o, c)| o / c).collect();
        median(&r)
    };
    let openai = (!openai.is_empty()).then_some(openai);
    ReplayFigures {
        megabytes,
        chunks,
        process_secs: median(&process),
        baseline_secs: median(&parse),
        openai_secs: openai.as_deref().map(median),
        vs_parse: ratios(&parse),
        vs_openai: openai.as_deref().map(ratios),
        max_rss_kib,
    }
}
