//! The whole process: `choicewise replay --json` on a large recorded stream, against reading
//! and parsing the same file in-process (framing + borrowed parse).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::stats::median;

pub struct ReplayFigures {
    pub megabytes: f64,
    pub chunks: usize,
    pub process_secs: f64,
    pub baseline_secs: f64,
    pub max_rss_kib: i64,
}

/// The `choicewise` binary built next to this one (`cargo build --release -p choicewise-cli`).
pub fn cli_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let cli = exe.with_file_name("choicewise");
    cli.exists().then_some(cli)
}

/// Largest resident set of any child process so far, KiB.
fn children_max_rss_kib() -> i64 {
    // SAFETY: getrusage writes into the struct we pass; RUSAGE_CHILDREN is a valid target.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) == 0 {
            usage.ru_maxrss
        } else {
            -1
        }
    }
}

pub fn measure(cli: &Path, file: &Path, chunks: usize, reps: usize) -> ReplayFigures {
    let megabytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
    let mut process = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        let status = Command::new(cli)
            .args(["replay", "--json"])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run choicewise");
        process.push(start.elapsed().as_secs_f64());
        assert!(status.success(), "choicewise replay --json failed");
    }
    let mut baseline = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        let bytes = std::fs::read(file).expect("read the recording");
        let reads: Vec<&[u8]> = bytes.chunks(64 * 1024).collect();
        std::hint::black_box(crate::baseline::borrowed_parse(&reads));
        baseline.push(start.elapsed().as_secs_f64());
    }
    ReplayFigures {
        megabytes,
        chunks,
        process_secs: median(&process),
        baseline_secs: median(&baseline),
        max_rss_kib: children_max_rss_kib(),
    }
}
