//! `choicewise-bench gateway-peers`: the gateway beside TensorZero's gateway, in the same
//! run, on the same upstream, on the path both serve: a streamed Chat Completions request of
//! one choice relayed to an OpenAI-compatible upstream.
//!
//! Each round starts a fresh upstream, `choicewise serve` and TensorZero's `gateway` (its
//! observability off: no database), both on that upstream, and measures, at each level of
//! concurrent paced streams (`--concurrency`), direct to the upstream, then through each
//! gateway (which goes first alternates by round): the time to the first whole `data:`
//! event and to the first content event (p50, p99), and each content event's delay. Then
//! each gateway's requests per second at saturation (`--rate-concurrency` closed-loop
//! clients) and its CPU time per request. The ratios (ours ÷ TensorZero's) are taken per
//! round, so that a round's two figures share the machine's state, and their median judged.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::measure::{LevelSpec, Scan, level, paced_plan, request, stream_length};
use super::rate::{Rate, RateArgs, request_rate};
use super::{Level, Pace};
use crate::procs::{self, Server};
use crate::stats::{listed, median};
use crate::{Report, Target, load, runtime};

/// TensorZero's name for a model of its configuration on its OpenAI-compatible route.
const TZ_MODEL: &str = "tensorzero::model_name::native";

/// `choicewise-bench gateway-peers`.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayPeersArgs {
    /// TensorZero's `gateway` binary (built from its repository: `cargo build --release
    /// -p gateway` in its `crates/`).
    #[arg(long)]
    pub tensorzero: PathBuf,
    /// This build's `choicewise` binary (default: next to this harness).
    #[arg(long)]
    pub choicewise: Option<PathBuf>,
    /// Rounds, each with fresh processes; which gateway goes first alternates.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Concurrent paced streams of the levels.
    #[arg(long, value_delimiter = ',', default_value = "1,100,500")]
    pub concurrency: Vec<usize>,
    /// Seconds each level keeps its streams going (after the ramp).
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Fewest streams counted per level.
    #[arg(long, default_value_t = 10)]
    pub min_streams: usize,
    #[command(flatten)]
    pub pace: Pace,
    /// Worker threads of the clients' runtime.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[command(flatten)]
    pub rate: RateArgs,
}

/// One gateway's figures in a round: a level each, then the request rate.
#[derive(Debug, Clone, Default)]
struct Figures {
    levels: Vec<Level>,
    rate: Rate,
}

/// TensorZero's configuration: model `native` on the upstream at `upstream`, no
/// observability (no database), listening on `port`.
fn tensorzero_config(upstream: &str, port: u16) -> String {
    format!(
        "[gateway]\nbind_address = \"127.0.0.1:{port}\"\nobservability.enabled = false\n\n\
         [models.native]\nrouting = [\"bench\"]\n\n\
         [models.native.providers.bench]\ntype = \"openai\"\nmodel_name = \"m\"\n\
         api_base = \"{upstream}/v1/\"\napi_key_location = \"none\"\n"
    )
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

/// Starts TensorZero's gateway on `upstream`, ready when its `/health` answers 200.
fn tensorzero(dir: &Path, bin: &Path, upstream: &str) -> Result<Server, String> {
    let port = free_port()?;
    let config = dir.join("tensorzero.toml");
    std::fs::write(&config, tensorzero_config(upstream, port)).map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("--config-file").arg(&config);
    for var in [
        "TENSORZERO_POSTGRES_URL",
        "TENSORZERO_CLICKHOUSE_URL",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    Server::start(
        "tensorzero",
        cmd,
        &dir.join("tensorzero.log"),
        procs::Ready::Url(format!("http://127.0.0.1:{port}"), "/health".into()),
        Duration::from_secs(60),
    )
}

/// One round: fresh processes, each level direct and through both gateways (`ours_first`
/// says the order), then both request rates.
fn one_round(
    rt: &tokio::runtime::Runtime,
    args: &GatewayPeersArgs,
    round: usize,
    ours_first: bool,
) -> Result<(Vec<Level>, Figures, Figures), String> {
    let dir = procs::work_dir(&format!("gateway-peers-{round}"));
    let upstream = procs::upstream(&dir, false)?;
    let bin = procs::choicewise_bin(args.choicewise.as_deref());
    let ours = procs::gateway(&dir, &bin, &procs::gateway_config(&upstream.url, 300.0))?;
    let theirs = tensorzero(&dir, &args.tensorzero, &upstream.url)?;
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let plan = paced_plan(&args.pace);
    let length = stream_length(&args.pace);
    let direct_url = format!("{}/v1/chat/completions", upstream.url);
    let our_url = format!("{}/v1/chat/completions", ours.url);
    let their_url = format!("{}/openai/v1/chat/completions", theirs.url);
    let mut gateways = [
        ("choicewise", our_url.as_str(), "native", ours.pid()),
        ("TensorZero", their_url.as_str(), TZ_MODEL, theirs.pid()),
    ];
    if !ours_first {
        gateways.reverse();
    }
    let (mut direct, mut our, mut their) = (Vec::new(), Figures::default(), Figures::default());
    rt.block_on(async {
        let spec = |url, model, c: usize, secs, watch| LevelSpec {
            url,
            body: request(model, 1, &plan, None),
            concurrency: c,
            secs,
            min_streams: if secs > 0.0 { args.min_streams } else { c },
            ramp: if c > 1 && secs > 0.0 {
                length
            } else {
                Duration::ZERO
            },
            how: Scan::Stamps,
            watch,
            stream_timeout: Duration::from_secs(60),
        };
        // Warm-up: connections to each, and each gateway's first requests.
        let _ = level(&client, spec(&direct_url, "m", 10, 0.0, None)).await;
        for (_, url, model, _) in gateways {
            let _ = level(&client, spec(url, model, 10, 0.0, None)).await;
        }
        for &c in &args.concurrency {
            let d = level(&client, spec(&direct_url, "m", c, args.secs, None)).await;
            print_row(round, "direct", c, &d);
            direct.push(d);
            for (name, url, model, pid) in gateways {
                let l = level(&client, spec(url, model, c, args.secs, Some(pid))).await;
                print_row(round, name, c, &l);
                match name {
                    "choicewise" => our.levels.push(l),
                    _ => their.levels.push(l),
                }
            }
        }
        for (name, url, model, pid) in gateways {
            let r = request_rate(&client, url, model, &args.rate, Some(pid)).await;
            println!(
                "round {}: {name} {:.0} requests/s, CPU {:.0} µs a request, {} errors",
                round + 1,
                r.per_s,
                r.cpu_us,
                r.errors
            );
            match name {
                "choicewise" => our.rate = r,
                _ => their.rate = r,
            }
        }
    });
    if ours.panics() > 0 {
        return Err(format!(
            "the gateway panicked; its log: {}",
            ours.log.display()
        ));
    }
    Ok((direct, our, their))
}

fn print_row(round: usize, name: &str, c: usize, l: &Level) {
    println!(
        "| {} | {name:<10} | {c:>4} | {:>6} | {:>3} | {:>8.2} | {:>8.2} | {:>8.2} | {:>8.2} | {:>8.2} | {:>8.2} |",
        round + 1,
        l.streams,
        l.errors,
        l.ttfd_p50_ms,
        l.ttfd_p99_ms,
        l.ttfc_p50_ms,
        l.ttfc_p99_ms,
        l.delay_p50_ms,
        l.delay_p99_ms
    );
}

/// What each level's figure is read from.
type Figure = (&'static str, fn(&Level) -> f64);

const FIGURES: [Figure; 6] = [
    ("first_data_p50", |l| l.ttfd_p50_ms),
    ("first_data_p99", |l| l.ttfd_p99_ms),
    ("first_content_p50", |l| l.ttfc_p50_ms),
    ("first_content_p99", |l| l.ttfc_p99_ms),
    ("chunk_delay_p50", |l| l.delay_p50_ms),
    ("chunk_delay_p99", |l| l.delay_p99_ms),
];

/// A judged figure's level, name and target name.
macro_rules! judged {
    ($($c:literal $figure:literal),* $(,)?) => {
        [$(($c, $figure, concat!("gateway_vs_tensorzero_c", $c, "_", $figure))),*]
    };
}

/// The judged figures (issue 89's): at 100 and 500 streams, the first `data:` and the
/// first content, p50 and p99, at most TensorZero's.
const TARGETS: [(usize, &str, &str); 8] = judged![
    100 "first_data_p50", 100 "first_data_p99", 100 "first_content_p50", 100 "first_content_p99",
    500 "first_data_p50", 500 "first_data_p99", 500 "first_content_p50", 500 "first_content_p99",
];

/// The paired benchmark.
pub fn run(args: &GatewayPeersArgs) -> Report {
    let rt = runtime(args.workers);
    let mut report = Report::default();
    println!(
        "Streamed Chat Completions requests of one choice: {} content events {} ms apart after {} ms; \
         through choicewise and through TensorZero ({}), rounds alternating which goes first; times in ms\n",
        args.pace.ticks,
        args.pace.interval_ms,
        args.pace.first_ms,
        args.tensorzero.display()
    );
    println!(
        "| round | to | C | streams | err | data p50 | data p99 | content p50 | content p99 | chunk p50 | chunk p99 |\n\
         |---|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        match one_round(&rt, args, round, round % 2 == 1) {
            Ok(r) => rounds.push(r),
            Err(e) => println!("round {} failed: {e}", round + 1),
        }
        load(&format!("round {}", round + 1));
    }
    if rounds.is_empty() {
        report
            .info
            .push("INFO gateway-peers: no round completed".into());
        return report;
    }
    for (i, &c) in args.concurrency.iter().enumerate() {
        for (figure, read) in FIGURES {
            // A round is judged only where every stream through both gateways was read whole:
            // a gateway that failed its streams has no figure, not a fast one.
            let per_round: Vec<(f64, f64, f64)> = rounds
                .iter()
                .filter_map(|(d, o, t)| {
                    let (d, o, t) = (d.get(i)?, o.levels.get(i)?, t.levels.get(i)?);
                    let whole = |l: &Level| l.streams > 0 && l.errors == 0;
                    (whole(d) && whole(o) && whole(t)).then(|| (read(d), read(o), read(t)))
                })
                .collect();
            if per_round.len() < rounds.len() {
                report.info.push(format!(
                    "INFO c={c} {figure}: {} of {} rounds had failed streams and are not judged",
                    rounds.len() - per_round.len(),
                    rounds.len()
                ));
            }
            let ratios: Vec<f64> = per_round.iter().map(|(_, o, t)| o / t).collect();
            let added = |f: fn(&(f64, f64, f64)) -> f64| {
                median(&per_round.iter().map(f).collect::<Vec<_>>())
            };
            report.info.push(format!(
                "INFO c={c} {figure}: choicewise {:.2} ms, TensorZero {:.2} ms, direct {:.2} ms (medians); \
                 added over direct {:+.2} against {:+.2} ms; rounds' ratios {}",
                added(|r| r.1),
                added(|r| r.2),
                added(|r| r.0),
                added(|r| r.1 - r.0),
                added(|r| r.2 - r.0),
                listed(&ratios)
            ));
            let target = TARGETS.iter().find(|(at, of, _)| *at == c && *of == figure);
            if let (Some((_, _, name)), false) = (target, ratios.is_empty()) {
                report.targets.push(Target {
                    name,
                    measured: median(&ratios),
                    target: 1.0,
                    at_least: false,
                    unit: "x",
                });
            }
        }
    }
    // As the levels: a rate is judged only where both gateways answered without an error.
    let rates: Vec<(Rate, Rate)> = (rounds.iter())
        .map(|(_, o, t)| (o.rate, t.rate))
        .filter(|(o, t)| o.errors == 0 && t.errors == 0 && o.per_s > 0.0 && t.per_s > 0.0)
        .collect();
    if rates.is_empty() {
        report
            .info
            .push("INFO saturation: no round without errors".into());
        return report;
    }
    let per_s: Vec<f64> = rates.iter().map(|(o, t)| o.per_s / t.per_s).collect();
    let cpu: Vec<f64> = rates.iter().map(|(o, t)| o.cpu_us / t.cpu_us).collect();
    report.info.push(format!(
        "INFO saturation: choicewise {:.0} requests/s at {:.0} µs CPU a request, TensorZero {:.0} at {:.0} (medians); \
         rounds' requests/s ratios {}, CPU ratios {}",
        median(&rates.iter().map(|r| r.0.per_s).collect::<Vec<_>>()),
        median(&rates.iter().map(|r| r.0.cpu_us).collect::<Vec<_>>()),
        median(&rates.iter().map(|r| r.1.per_s).collect::<Vec<_>>()),
        median(&rates.iter().map(|r| r.1.cpu_us).collect::<Vec<_>>()),
        listed(&per_s),
        listed(&cpu)
    ));
    report.targets.push(Target {
        name: "gateway_vs_tensorzero_requests_per_s",
        measured: median(&per_s),
        target: 1.0,
        at_least: true,
        unit: "x",
    });
    report
}
