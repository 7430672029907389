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

/// The peak resident set of a running process, KiB (`VmHWM` in `/proc/<pid>/status`: a
/// high-water mark of that process alone, from its exec on).
fn peak_rss_kib(pid: u32) -> Option<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn measure(cli: &Path, file: &Path, chunks: usize, reps: usize) -> ReplayFigures {
    let megabytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
    let mut process = Vec::new();
    let mut max_rss_kib = 0i64;
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
        max_rss_kib,
    }
}
