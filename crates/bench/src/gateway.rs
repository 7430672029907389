//! The gateway's benchmarks (`choicewise-bench gateway`): overhead, relay throughput, memory,
//! LiteLLM's proxy beside it, and the tokens a selection saves. Loopback only.
//!
//! One run starts three processes: the synthetic upstream (`upstream.rs`, one worker thread),
//! `choicewise serve` in front of it, and a byte-for-byte reverse proxy on the same HTTP stack
//! (`proxy.rs`). The clients run in this process (reqwest, `--workers` threads).
//!
//! - **Overhead.** Streams of n = 4 choices, each `--ticks` content events `--interval-ms`
//!   apart after `--first-ms`, every content its send time. Each level keeps C streams open
//!   (each client starts its next stream when one ends, the starts spread over one stream's
//!   length; streams started in that ramp are not counted) for `--secs`, and at least
//!   `--min-streams` streams. Measured per stream: time to first chunk (request sent to the
//!   first content event read); per content event: its delay (read time less send time).
//!   Direct to the upstream (one request with n = 4), through the byte-for-byte proxy (the
//!   HTTP stack's own share), through the gateway with n = 4 native (one upstream request),
//!   then by fan-out (four upstream requests of n = 1), at the same C. Overhead = the
//!   percentile through it less direct's, same run.
//! - **Throughput at saturation.** `--sat-streams` unpaced n = 4 streams at once for
//!   `--sat-secs`: content events per second read by the clients, direct, through the proxy,
//!   through the gateway; once with the upstream writing each tick's 4 events alone (a model
//!   server's framing), once in 64 KiB writes.
//! - **Memory.** The gateway's VmRSS when started and after the warm-up (the start); when the
//!   1,000-stream native level starts and at its peak while at least 95% of its streams are
//!   open (per stream: the difference over the streams open then); 1 s after the paced levels,
//!   then 1 s after their client closed its connections (the after-load target: the end of
//!   the load it measures); 1 s after the saturation runs, `--settle-secs` after the last
//!   load, and 1 s after the other client closed its connections (the upstream connections
//!   the gateway keeps for reuse still open, unless `--settle-secs` is at least two of their
//!   idle lifetimes and 5 s).
//! - **LiteLLM** (with `--litellm PATH`): its proxy, one worker, no database (a master key
//!   set: it refuses to start without one), on the same upstream, the same native levels
//!   (`--litellm-concurrency`) and saturation run.
//! - **Savings.** Five samples of lengths 8, 14, 20, 26 and 32 ticks (10 ms apart), three
//!   agreeing on the answer: the content events the upstream wrote for `select:
//!   first_finished` and `vote` against n = 5 with every sample to its end.
//!
//! Here: the arguments, the figures and one run's sequence; the clients' measurement is in
//! `measure`, LiteLLM's run in `litellm`, the savings runs in `savings`, the summary over the
//! runs in `summary`.

mod litellm;
mod measure;
pub mod peers;
pub mod rate;
mod savings;
mod summary;

use std::path::PathBuf;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::procs::{self, Server};
use crate::{Report, load, runtime};

use litellm::litellm_run;
use measure::{
    LevelSpec, Scan, level, level_header, paced_plan, print_level, request, saturation,
    stream_length,
};
use savings::savings;
use summary::summarise;

#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Runs (each with fresh processes); medians of the runs are reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds each level keeps its streams going (after the ramp).
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Fewest streams counted per level.
    #[arg(long, default_value_t = 10)]
    pub min_streams: usize,
    /// Concurrent streams of the levels.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    pub concurrency: Vec<usize>,
    #[command(flatten)]
    pub pace: Pace,
    /// Concurrent streams of the saturation runs.
    #[arg(long, default_value_t = 32)]
    pub sat_streams: usize,
    /// Seconds of each saturation run.
    #[arg(long, default_value_t = 3.0)]
    pub sat_secs: f64,
    /// Content events per choice of a saturation stream.
    #[arg(long, default_value_t = 2000)]
    pub sat_ticks: u32,
    /// The `choicewise` binary (default: next to this harness).
    #[arg(long)]
    pub choicewise: Option<PathBuf>,
    /// LiteLLM's `litellm` command (PyPI `litellm[proxy]`): measure its proxy beside ours.
    #[arg(long)]
    pub litellm: Option<PathBuf>,
    /// Concurrent streams of LiteLLM's levels (default: those of ours).
    #[arg(long, value_delimiter = ',')]
    pub litellm_concurrency: Option<Vec<usize>>,
    /// Worker threads of the clients' runtime.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Skip the savings runs.
    #[arg(long)]
    pub no_savings: bool,
    #[command(flatten)]
    pub rate: rate::RateArgs,
    /// Seconds of quiet after the last load before the gateway's memory is read for the
    /// end-of-run figure. Its idle upstream connections close one to two idle lifetimes
    /// (`choicewise_client::IDLE_CONNECTION_LIFETIME`) after they went idle; from two
    /// lifetimes and 5 s on, the figure is named as read with them closed.
    #[arg(long, default_value_t = 2.0)]
    pub settle_secs: f64,
}

/// A paced stream's shape.
#[derive(Debug, Clone, clap::Args)]
pub struct Pace {
    /// Content events per choice of a paced stream.
    #[arg(long, default_value_t = 8)]
    pub ticks: u32,
    /// Between a choice's content events, ms.
    #[arg(long, default_value_t = 200.0)]
    pub interval_ms: f64,
    /// The upstream's wait before its first event, ms.
    #[arg(long, default_value_t = 20.0)]
    pub first_ms: f64,
}

/// `--settle-secs` from which every upstream connection the gateway kept for reuse has
/// closed: two idle lifetimes (the pool's check runs once per lifetime), and a margin.
fn pool_closed_secs() -> f64 {
    2.0 * choicewise_client::IDLE_CONNECTION_LIFETIME.as_secs_f64() + 5.0
}

/// One level's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Level {
    pub streams: usize,
    pub errors: usize,
    /// Request sent to the first whole `data:` event read, ms.
    pub ttfd_p50_ms: f64,
    pub ttfd_p99_ms: f64,
    pub ttfc_p50_ms: f64,
    pub ttfc_p99_ms: f64,
    pub delay_p50_ms: f64,
    pub delay_p99_ms: f64,
    /// Content events per second read (all streams of the level, ramp included).
    pub events_per_s: f64,
    /// Streams read whole per second (those counted, less their errors).
    pub requests_per_s: f64,
    /// Peak VmRSS of the watched process while at least 95% of the level's streams were
    /// open, KiB, and the streams open then; its VmRSS when the level started.
    pub peak_rss_kib: u64,
    pub open_at_peak: usize,
    pub rss_before_kib: u64,
}

/// The figures of one run.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// (concurrency, direct, gateway native, gateway fan-out, byte-for-byte proxy).
    pub levels: Vec<(usize, Level, Level, Level, Level)>,
    /// Content events per second, the upstream writing each tick alone: direct, proxy,
    /// gateway.
    pub sat_direct: f64,
    pub sat_proxy: f64,
    pub sat_gateway: f64,
    /// The same, the upstream writing 64 KiB at a time.
    pub bulk_direct: f64,
    pub bulk_proxy: f64,
    pub bulk_gateway: f64,
    /// Requests per second at saturation (`rate`): direct, proxy, gateway.
    pub rate_direct: rate::Rate,
    pub rate_proxy: rate::Rate,
    pub rate_gateway: rate::Rate,
    /// Gateway VmRSS 1 s after the paced levels, their client's keep-alive connections open,
    /// then 1 s after that client closed them; 1 s after the saturation runs.
    pub rss_after_levels_kib: u64,
    pub rss_levels_closed_kib: u64,
    pub rss_after_sat_kib: u64,
    pub rss_start_kib: u64,
    /// VmRSS when the 1,000-stream native level started, and at its peak with them open.
    pub rss_before_1000_kib: u64,
    pub rss_peak_1000_kib: u64,
    pub open_at_peak: usize,
    /// VmRSS `--settle-secs` after the last load, the harness's keep-alive connections to it
    /// still open; then again once the harness has closed them.
    pub rss_after_kib: u64,
    pub rss_closed_kib: u64,
    pub gateway_panics: usize,
    pub litellm: Option<Other>,
    pub savings: Option<Savings>,
}

/// Another proxy's figures on the native workload.
#[derive(Debug, Clone, Default)]
pub struct Other {
    pub levels: Vec<(usize, Level)>,
    pub sat: f64,
    pub rss_start_kib: u64,
    pub rss_peak_kib: u64,
}

/// Tokens the upstream generated for 20 requests of 5 samples each.
#[derive(Debug, Clone, Copy, Default)]
pub struct Savings {
    pub native_all: u64,
    pub native_first_finished: u64,
    pub native_vote: u64,
    pub fanout_all: u64,
    pub fanout_first_finished: u64,
    pub fanout_vote: u64,
    /// Answers whose selected text was not the expected one (or not 200).
    pub wrong: usize,
}

fn one_run(rt: &Runtime, args: &GatewayArgs, rep: usize) -> Result<Run, String> {
    let dir = procs::work_dir(&format!("gateway-{rep}"));
    let upstream = procs::upstream(&dir, false)?;
    let mut proxy_cmd = std::process::Command::new(procs::harness());
    proxy_cmd.args([
        "gateway-proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream.url,
    ]);
    let proxy = Server::start(
        "proxy",
        proxy_cmd,
        &dir.join("proxy.log"),
        procs::Ready::Line,
        Duration::from_secs(10),
    )?;
    let bin = procs::choicewise_bin(args.choicewise.as_deref());
    let config = procs::gateway_config(&upstream.url, 300.0);
    let gateway = procs::gateway(&dir, &bin, &config)?;
    std::thread::sleep(Duration::from_millis(300));
    let mut run = Run::default();
    println!(
        "\n### run {} of {} (gateway pid {}, VmRSS when started {} KiB)\n",
        rep + 1,
        args.reps,
        gateway.pid(),
        gateway.rss_kib()
    );
    let new_client = || {
        reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())
    };
    // One client for the paced levels, closed after them; another for the rest.
    let paced_client = new_client()?;
    let client = new_client()?;
    let plan = paced_plan(&args.pace);
    let length = stream_length(&args.pace);
    let direct_url = format!("{}/v1/chat/completions", upstream.url);
    let gateway_url = format!("{}/v1/chat/completions", gateway.url);
    let proxy_url = format!("{}/v1/chat/completions", proxy.url);
    rt.block_on(async {
        // Warm-up: connections, allocators, the gateway's first requests.
        for (url, model) in [
            (&direct_url, "m"),
            (&gateway_url, "native"),
            (&gateway_url, "fanout"),
        ] {
            let _ = level(
                &paced_client,
                LevelSpec {
                    url,
                    body: request(model, 4, &plan, None),
                    concurrency: 10,
                    secs: 0.0,
                    min_streams: 10,
                    ramp: Duration::ZERO,
                    how: Scan::Stamps,
                    watch: None,
                    stream_timeout: Duration::from_secs(60),
                },
            )
            .await;
        }
        // Where the load starts from: a gateway that has served (its runtime, pools and token
        // tables made), then idle.
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.rss_start_kib = gateway.rss_kib();
        println!("Gateway VmRSS after the warm-up: {} KiB\n", run.rss_start_kib);
        println!(
            "Paced n = 4 streams: {} content events per choice, {} ms apart after {} ms; times in ms.\n",
            args.pace.ticks, args.pace.interval_ms, args.pace.first_ms
        );
        level_header();
        for &c in &args.concurrency {
            let spec = |url, model, watch| LevelSpec {
                url,
                body: request(model, 4, &plan, None),
                concurrency: c,
                secs: args.secs,
                min_streams: args.min_streams,
                ramp: if c > 1 { length } else { Duration::ZERO },
                how: Scan::Stamps,
                watch,
                stream_timeout: Duration::from_secs(60),
            };
            let direct = level(&paced_client, spec(&direct_url, "m", None)).await;
            print_level("direct", c, &direct);
            let proxied = level(&paced_client, spec(&proxy_url, "m", None)).await;
            print_level("byte-for-byte proxy", c, &proxied);
            let native = level(&paced_client, spec(&gateway_url, "native", Some(gateway.pid()))).await;
            print_level("gateway, native n = 4", c, &native);
            let fanout = level(&paced_client, spec(&gateway_url, "fanout", None)).await;
            print_level("gateway, fan-out n = 4", c, &fanout);
            if c == 1000 {
                run.rss_peak_1000_kib = native.peak_rss_kib;
                run.rss_before_1000_kib = native.rss_before_kib;
                run.open_at_peak = native.open_at_peak;
            }
            run.levels.push((c, direct, native, fanout, proxied));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.rss_after_levels_kib = procs::tree_rss_kib(gateway.pid());
        // The load of the memory target ends: its client closes its connections.
        drop(paced_client);
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.rss_levels_closed_kib = procs::tree_rss_kib(gateway.pid());
        println!(
            "\nSaturation: {} unpaced n = 4 streams at once, {} content events per choice, {} s; content events read per second:",
            args.sat_streams, args.sat_ticks, args.sat_secs
        );
        run.sat_direct = saturation(&client, &direct_url, "m", args, true).await;
        run.sat_proxy = saturation(&client, &proxy_url, "m", args, true).await;
        run.sat_gateway = saturation(&client, &gateway_url, "native", args, true).await;
        println!(
            "upstream writes each tick (4 events) alone: direct {:.0}/s, byte-for-byte proxy {:.0}/s, gateway {:.0}/s ({:.2}x the proxy)",
            run.sat_direct,
            run.sat_proxy,
            run.sat_gateway,
            run.sat_gateway / run.sat_proxy
        );
        run.bulk_direct = saturation(&client, &direct_url, "m", args, false).await;
        run.bulk_proxy = saturation(&client, &proxy_url, "m", args, false).await;
        run.bulk_gateway = saturation(&client, &gateway_url, "native", args, false).await;
        println!(
            "upstream writes 64 KiB at a time: direct {:.0}/s, byte-for-byte proxy {:.0}/s, gateway {:.0}/s ({:.2}x the proxy)",
            run.bulk_direct,
            run.bulk_proxy,
            run.bulk_gateway,
            run.bulk_gateway / run.bulk_proxy
        );
        println!(
            "\nRequests per second: {} clients, streamed requests of one choice, {} content events, unpaced, {} s:",
            args.rate.rate_concurrency, args.rate.rate_ticks, args.rate.rate_secs
        );
        run.rate_direct = rate::request_rate(&client, &direct_url, "m", &args.rate, None).await;
        run.rate_proxy = rate::request_rate(&client, &proxy_url, "m", &args.rate, None).await;
        run.rate_gateway =
            rate::request_rate(&client, &gateway_url, "native", &args.rate, Some(gateway.pid()))
                .await;
        println!(
            "direct {:.0}/s, byte-for-byte proxy {:.0}/s, gateway {:.0}/s ({:.2}x the proxy; gateway CPU {:.0} µs a request; errors {})",
            run.rate_direct.per_s,
            run.rate_proxy.per_s,
            run.rate_gateway.per_s,
            run.rate_gateway.per_s / run.rate_proxy.per_s,
            run.rate_gateway.cpu_us,
            run.rate_direct.errors + run.rate_proxy.errors + run.rate_gateway.errors
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.rss_after_sat_kib = procs::tree_rss_kib(gateway.pid());
        if !args.no_savings {
            run.savings = Some(savings(&client, &upstream.url, &gateway_url).await);
        }
        tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
    });
    run.rss_after_kib = gateway.rss_kib();
    // The connections a client keeps open hold their buffers in the gateway; once the client
    // closes them, what stays is the gateway's own.
    drop(client);
    std::thread::sleep(Duration::from_secs(1));
    run.rss_closed_kib = gateway.rss_kib();
    run.gateway_panics = gateway.panics();
    println!(
        "\nGateway VmRSS: start {} KiB, {} KiB when the 1,000-stream native level started, its peak {} KiB ({} streams open), \
         1 s after the paced levels {} KiB, 1 s after their clients closed their connections {} KiB, \
         1 s after the saturation runs {} KiB, {} s after the last load {} KiB, \
         1 s after the clients closed their connections {} KiB",
        run.rss_start_kib,
        run.rss_before_1000_kib,
        run.rss_peak_1000_kib,
        run.open_at_peak,
        run.rss_after_levels_kib,
        run.rss_levels_closed_kib,
        run.rss_after_sat_kib,
        args.settle_secs,
        run.rss_after_kib,
        run.rss_closed_kib
    );
    drop(gateway);
    drop(proxy);
    if let Some(litellm) = &args.litellm {
        match litellm_run(rt, args, litellm, &upstream.url, &dir) {
            Ok(other) => run.litellm = Some(other),
            Err(e) => println!("LiteLLM not measured: {e}"),
        }
    }
    Ok(run)
}

/// The benchmark: `reps` runs, the medians judged.
pub fn run(args: &GatewayArgs) -> Report {
    let rt = runtime(args.workers);
    let mut runs = Vec::new();
    for rep in 0..args.reps {
        match one_run(&rt, args, rep) {
            Ok(r) => runs.push(r),
            Err(e) => println!("run {} failed: {e}", rep + 1),
        }
    }
    load("end of gateway");
    summarise(args, &runs)
}
