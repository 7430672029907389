//! `choicewise-bench`: the benchmark harness of choicewise.
//!
//! ```sh
//! CARGO_TARGET_DIR=/work/target-bench cargo run --release -p choicewise-bench -- all
//! ```
//!
//! Every figure is a median over several repetitions on generated, deterministic,
//! OpenAI-shaped multi-choice streams (see `gen`), with the baselines measured in the same
//! run on the same bytes (`close`, over loopback HTTP, reports percentiles of its runs
//! against a baseline measured in the same run). Each target prints one `PASS|FAIL <name> measured=<x> target=<y>`
//! line.
//!
//! The harness writes no file unless asked: `all --plots` also writes the SVG plots
//! (throughput against n, latency percentiles) into `docs/img`, the ones
//! `docs/benchmarks.md` shows, and `all --plots DIR` into `DIR`.

mod apis;
mod baseline;
mod close;
mod fan_out;
mod gateway;
mod r#gen;
mod heap;
mod latency;
#[cfg(feature = "openai-baseline")]
mod openai;
mod picks;
mod pieces;
mod plots;
mod procs;
mod proxy;
mod records;
mod replay;
mod reports;
#[cfg(feature = "diagnostics")]
mod scale;
mod soak;
mod stats;
mod throughput;
mod upstream;

use clap::{Args, Parser, Subcommand};
use tokio::runtime::Runtime;

use crate::r#gen::{GenConfig, generate};

#[derive(Debug, Parser)]
#[command(
    name = "choicewise-bench",
    about = "Throughput and latency benchmarks of choicewise"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every benchmark, with its pass/fail lines.
    All(AllArgs),
    /// End-to-end throughput against the borrowed-parse and hand-written baselines.
    Throughput(ThroughputArgs),
    /// Added latency of content deltas under a paced offered load.
    Latency(LatencyArgs),
    /// Many concurrent completions: memory per idle completion, total throughput.
    Scale(ScaleArgs),
    /// 64 upstreams of n = 1 fanned out into one completion against one n = 64 stream.
    FanOut(FanOutArgs),
    /// From a combinator's decision to every unneeded upstream connection closed (loopback
    /// HTTP).
    Close(CloseArgs),
    /// The whole `choicewise replay --json` process on a large recorded stream.
    Replay(ReplayArgs),
    /// The incremental partial-JSON parser against one `serde_json::from_str`.
    PartialJson(PieceArgs),
    /// Token counting: table load times and counting throughput.
    Tokens(PieceArgs),
    /// Write a generated stream to a file (for profiling `choicewise replay`, or as a fixture).
    Gen(GenArgs),
    /// A baseline as a whole process of its own, for `replay`'s paired runs.
    #[command(hide = true)]
    BaselineProcess(BaselineArgs),
    /// The gateway (`choicewise serve`): overhead against direct, relay throughput against a
    /// byte-for-byte proxy, memory, LiteLLM beside it, the tokens a selection saves.
    Gateway(gateway::GatewayArgs),
    /// The gateway's requests per second at saturation, paired against another build
    /// (`--before PATH`), rounds alternating.
    GatewayRate(gateway::rate::GatewayRateArgs),
    /// The gateway beside TensorZero's (`--tensorzero PATH`), same run, same upstream:
    /// first `data:` and first content at 1, 100 and 500 streams, requests per second.
    GatewayPeers(gateway::peers::GatewayPeersArgs),
    /// `choicewise usage` on a records database of many rows (1M by default): its answer's
    /// time, SQLite or PostgreSQL (docs/records.md).
    RecordsUsage(records::RecordsUsageArgs),
    /// The gateway under load with faults: panics, choices not received intact, upstream
    /// connections left open. Exits 1 when any is not 0.
    Soak(soak::SoakArgs),
    /// The first-event latency the gateway adds on Chat Completions, Messages and
    /// Responses, beside direct, at 1 and 100 concurrent streams.
    GatewayApis(apis::ApisArgs),
    /// Do the picks pay? A real model's recorded samples replayed through the gateway, pick
    /// by pick (accuracy, tokens, requests), beside the same picks computed offline.
    Picks(picks::PicksArgs),
    /// The synthetic upstream of `gateway` and `soak`, as a process of its own.
    #[command(hide = true)]
    GatewayUpstream(UpstreamArgs),
    /// The byte-for-byte reverse proxy of `gateway`, as a process of its own.
    #[command(hide = true)]
    GatewayProxy(ProxyArgs),
}

#[derive(Debug, Clone, Args)]
struct UpstreamArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// One request per connection (`Connection: close`).
    #[arg(long)]
    close: bool,
    /// Report no `usage` even when a request asks for it: the gateway counts the tokens
    /// itself (its estimate), as for an upstream that never reports them.
    #[arg(long)]
    no_usage: bool,
}

#[derive(Debug, Clone, Args)]
struct ProxyArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// `http://HOST:PORT` of the upstream.
    #[arg(long)]
    upstream: String,
}

#[derive(Debug, Clone, Args)]
struct BaselineArgs {
    /// `parse` (read + framing + borrowed parse, one thread) or `openai`
    /// (eventsource-stream + async-openai + hand-written accumulator).
    kind: String,
    /// The SSE file.
    file: std::path::PathBuf,
}

#[derive(Debug, Clone, Args)]
struct GenArgs {
    /// Size, MB.
    #[arg(long, default_value_t = 5.0)]
    mb: f64,
    /// Number of choices.
    #[arg(long, default_value_t = 4)]
    n: u32,
    /// Seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Output file.
    #[arg(long)]
    out: std::path::PathBuf,
}

#[derive(Debug, Clone, Args)]
struct ScaleArgs {
    #[command(flatten)]
    common: Common,
    /// Concurrent completions.
    #[arg(long, default_value_t = 10_000)]
    completions: usize,
    /// Choices per completion.
    #[arg(long, default_value_t = 4)]
    n: u32,
    /// Size of each completion's stream in the busy run, KB.
    #[arg(long, default_value_t = 20.0)]
    kb: f64,
}

#[derive(Debug, Clone, Args)]
struct FanOutArgs {
    #[command(flatten)]
    common: Common,
    /// Upstreams of n = 1, and choices of the one stream they are compared with.
    #[arg(long, default_value_t = 64)]
    upstreams: u32,
    /// Size of the one stream (the upstreams together carry the same chunks), MB.
    #[arg(long, default_value_t = FAN_OUT_MB)]
    mb: f64,
    /// Size of the reads each stream is fed in, bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    read_size: usize,
}

#[derive(Debug, Clone, Args)]
struct CloseArgs {
    /// Timed runs (each a fresh server and fan-out; the baselines run as many times).
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Untimed warm-up runs before them.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// The fast upstream's wait before its answer, ms (the stalled ones must have sent their
    /// first event by then).
    #[arg(long, default_value_t = 20)]
    delay_ms: u64,
    /// Worker threads of the client's Tokio runtime (the server has one of its own).
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

/// Size of the fan-out benchmark's stream, MB.
const FAN_OUT_MB: f64 = 8.0;

#[derive(Debug, Clone, Args)]
struct ReplayArgs {
    #[command(flatten)]
    common: Common,
    /// Size of the recorded stream, MB.
    #[arg(long, default_value_t = 50.0)]
    mb: f64,
}

#[derive(Debug, Clone, Args)]
struct PieceArgs {
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Clone, Args)]
struct Common {
    /// Repetitions of each measurement (medians are reported).
    #[arg(long, default_value_t = 9)]
    reps: usize,
    /// Seed of the generated streams.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Worker threads of the Tokio runtime.
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

#[derive(Debug, Clone, Args)]
struct ThroughputArgs {
    #[command(flatten)]
    common: Common,
    /// Choice counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    n: Vec<u32>,
    /// Size of each generated stream, MB.
    #[arg(long, default_value_t = 50.0)]
    mb: f64,
    /// Size of the reads the stream is fed in, bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    read_size: usize,
    /// Measure choicewise alone (no baselines, no targets): for profiling.
    #[arg(long)]
    only_choicewise: bool,
}

#[derive(Debug, Clone, Args)]
struct LatencyArgs {
    #[command(flatten)]
    common: Common,
    /// Offered load, chunks per second.
    #[arg(long, default_value_t = 100_000.0)]
    rate: f64,
    /// Duration of each run, seconds.
    #[arg(long, default_value_t = 1.5)]
    secs: f64,
    /// Number of choices.
    #[arg(long, default_value_t = 4)]
    n: u32,
    /// Worker threads of the runtime for the target figure (default: the CPUs less one, the
    /// one the producer thread, standing in for the network, keeps busy). The runs are
    /// repeated with `--workers` threads for comparison when that differs.
    #[arg(long)]
    latency_workers: Option<usize>,
}

#[derive(Debug, Clone, Args)]
struct AllArgs {
    #[command(flatten)]
    common: Common,
    /// Size of each throughput stream, MB.
    #[arg(long, default_value_t = 50.0)]
    mb: f64,
    /// Repetitions of the latency runs (1.5 s each).
    #[arg(long, default_value_t = 5)]
    latency_reps: usize,
    /// Also write the SVG plots (throughput against n, latency percentiles) into DIR,
    /// `docs/img` if no DIR is given. Without this option no file is written.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "docs/img")]
    plots: Option<std::path::PathBuf>,
}

/// Figures kept for the plots of `all`.
static PLOT_THROUGHPUT: std::sync::Mutex<Vec<throughput::ThroughputResult>> =
    std::sync::Mutex::new(Vec::new());
static PLOT_LATENCY: std::sync::Mutex<Vec<(&'static str, latency::Summary)>> =
    std::sync::Mutex::new(Vec::new());

fn runtime(workers: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// One target: a measured figure against its threshold.
#[derive(Debug, Clone)]
struct Target {
    name: &'static str,
    measured: f64,
    target: f64,
    /// `true`: measured must be at least the target; `false`: at most.
    at_least: bool,
    unit: &'static str,
}

impl Target {
    fn pass(&self) -> bool {
        if self.at_least {
            self.measured >= self.target
        } else {
            self.measured <= self.target
        }
    }
}

/// What a command found: its targets and informative lines.
#[derive(Debug, Default)]
struct Report {
    targets: Vec<Target>,
    info: Vec<String>,
}

impl Report {
    fn extend(&mut self, other: Report) {
        self.targets.extend(other.targets);
        self.info.extend(other.info);
    }

    fn print(&self) {
        println!();
        for t in &self.targets {
            println!(
                "{} {} measured={:.2}{unit} target={}{unit}",
                if t.pass() { "PASS" } else { "FAIL" },
                t.name,
                t.measured,
                t.target,
                unit = t.unit,
            );
        }
        for line in &self.info {
            println!("{line}");
        }
    }
}

fn machine() {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("machine: {cpus} CPUs, {model}");
    load("start");
}

/// Prints the load average: other processes on a 2-core machine show in every figure.
fn load(when: &str) {
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        let l: Vec<&str> = l.split_whitespace().take(3).collect();
        println!("load average at {when}: {}", l.join(" "));
    }
}
/// Runs a subcommand of this harness in a fresh process, prints its output and keeps its
/// verdict lines.
fn fresh_process(args: &[&str]) -> Report {
    let exe = std::env::current_exe().expect("the harness's own path");
    let output = std::process::Command::new(exe)
        .args(args)
        .output()
        .expect("run the harness in a fresh process");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut report = Report {
        targets: vec![],
        info: vec![],
    };
    for line in text.lines() {
        if line.starts_with("PASS ") || line.starts_with("FAIL ") || line.starts_with("INFO ") {
            report.info.push(format!("{line} (fresh process)"));
        } else if !line.starts_with("machine:") && !line.starts_with("load average") {
            println!("{line}");
        }
    }
    report
}

fn main() {
    let cli = Cli::parse();
    match &cli.command {
        Command::GatewayUpstream(a) => return upstream::serve(&a.listen, a.close, a.no_usage),
        Command::GatewayProxy(a) => return proxy::serve(&a.listen, &a.upstream),
        _ => {}
    }
    // `picks --json` prints one JSON object on stdout and nothing else.
    if !matches!(&cli.command, Command::Picks(a) if a.json) {
        machine();
    }
    let soak = matches!(cli.command, Command::Soak(_));
    let report = match cli.command {
        Command::Gateway(a) => gateway::run(&a),
        Command::GatewayRate(a) => gateway::rate::run(&a),
        Command::GatewayPeers(a) => gateway::peers::run(&a),
        Command::RecordsUsage(a) => records::run(&a),
        Command::Soak(a) => soak::run(&a),
        Command::GatewayApis(a) => apis::run(&a),
        Command::Picks(a) => picks::run(&a),
        Command::GatewayUpstream(_) | Command::GatewayProxy(_) => {
            return;
        }
        Command::Throughput(a) => reports::throughput(&a),
        Command::Latency(a) => reports::latency(&a),
        Command::Scale(a) => reports::scale(&a),
        Command::FanOut(a) => reports::fan_out_cmd(&a),
        Command::Close(a) => reports::close_cmd(&a),
        Command::Replay(a) => reports::replay_cmd(&a),
        Command::PartialJson(a) => reports::partial_json_cmd(&a),
        Command::Tokens(a) => reports::tokens_cmd(&a),
        Command::BaselineProcess(a) => {
            let updates = replay::baseline_process(&a.kind, &a.file);
            println!("{updates}");
            return;
        }
        Command::Gen(a) => {
            let g = generate(&GenConfig {
                n: a.n,
                target_bytes: (a.mb * 1e6) as usize,
                seed: a.seed,
                seq_tags: false,
            });
            std::fs::write(&a.out, &g.bytes).expect("write the stream");
            println!(
                "{}: {} chunks, {:.1} MB, n = {}",
                a.out.display(),
                g.chunks,
                g.megabytes(),
                a.n
            );
            return;
        }
        Command::All(a) => {
            // Tokens first: it measures the BPE tables' first load in this process.
            let pieces = PieceArgs {
                common: a.common.clone(),
            };
            let mut report = reports::tokens_cmd(&pieces);
            report.extend(reports::partial_json_cmd(&pieces));
            report.extend(reports::throughput(&ThroughputArgs {
                common: a.common.clone(),
                n: vec![1, 4, 16],
                mb: a.mb,
                read_size: 64 * 1024,
                only_choicewise: false,
            }));
            report.extend(reports::fan_out_cmd(&FanOutArgs {
                common: a.common.clone(),
                upstreams: 64,
                mb: FAN_OUT_MB,
                read_size: 64 * 1024,
            }));
            report.extend(reports::close_cmd(&CloseArgs {
                runs: 100,
                warmup: 5,
                delay_ms: 20,
                workers: a.common.workers,
            }));
            report.extend(reports::latency(&LatencyArgs {
                common: Common {
                    reps: a.latency_reps,
                    ..a.common
                },
                rate: 100_000.0,
                secs: 1.5,
                n: 4,
                latency_workers: None,
            }));
            // Memory figures need a fresh process: RSS growth says little once the heap has
            // grown and shrunk in the runs above.
            for sub in [&["scale"][..], &["replay"][..]] {
                report.extend(fresh_process(sub));
            }
            if let Some(plot_dir) = &a.plots {
                write_plots(plot_dir);
            }
            report
        }
    };
    report.print();
    if soak && !report.targets.iter().all(Target::pass) {
        std::process::exit(1);
    }
}

/// Writes the plots of `all` (the figures kept by its throughput and latency runs) into
/// `plot_dir`.
fn write_plots(plot_dir: &std::path::Path) {
    if let Err(e) = std::fs::create_dir_all(plot_dir) {
        println!("\nplots not written: {e}");
        return;
    }
    let t = PLOT_THROUGHPUT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let l = PLOT_LATENCY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let throughput_svg = plot_dir.join("throughput.svg");
    let latency_svg = plot_dir.join("latency.svg");
    match plots::throughput(&t, &throughput_svg).and_then(|()| plots::latency(&l, &latency_svg)) {
        Ok(()) => println!(
            "\nplots: {} and {}",
            throughput_svg.display(),
            latency_svg.display()
        ),
        Err(e) => println!("\nplots not written: {e}"),
    }
}
