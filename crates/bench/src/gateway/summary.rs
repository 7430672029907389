//! The gateway benchmark's summary over its runs: the overhead table, the medians judged
//! against their targets, and the info lines (memory, LiteLLM, savings).

use super::{GatewayArgs, Other, Run, Savings, pool_closed_secs};
use crate::stats::median;
use crate::{Report, Target};

fn med(runs: &[Run], f: impl Fn(&Run) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = runs.iter().filter_map(f).collect();
    (!v.is_empty()).then(|| median(&v))
}

fn list(runs: &[Run], f: impl Fn(&Run) -> Option<f64>, digits: usize) -> String {
    runs.iter()
        .filter_map(f)
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn summarise(args: &GatewayArgs, runs: &[Run]) -> Report {
    let mut report = Report::default();
    if runs.is_empty() {
        report.info.push("INFO gateway: no run completed".into());
        return report;
    }
    println!(
        "\n### overhead: through it less direct, ms (median of {} runs; each run's figure in brackets)\n",
        runs.len()
    );
    println!(
        "| C | mode | TTFC p50 | TTFC p99 | chunk p50 | chunk p99 |\n|---|---|---|---|---|---|"
    );
    let at = |r: &Run, c: usize, k: usize| {
        r.levels.iter().find(|l| l.0 == c).map(|l| {
            let (d, g) = (l.1, [l.2, l.3, l.4][k]);
            [
                g.ttfc_p50_ms - d.ttfc_p50_ms,
                g.ttfc_p99_ms - d.ttfc_p99_ms,
                g.delay_p50_ms - d.delay_p50_ms,
                g.delay_p99_ms - d.delay_p99_ms,
            ]
        })
    };
    for &c in &args.concurrency {
        for (k, mode) in [
            "gateway, native n = 4",
            "gateway, fan-out n = 4",
            "byte-for-byte proxy",
        ]
        .iter()
        .enumerate()
        {
            let cells: Vec<String> = (0..4)
                .map(|j| {
                    let f = |r: &Run| at(r, c, k).map(|v| v[j]);
                    format!(
                        "{:.2} ({})",
                        med(runs, f).unwrap_or(f64::NAN),
                        list(runs, f, 2)
                    )
                })
                .collect();
            println!("| {c} | {mode} | {} |", cells.join(" | "));
        }
    }
    for (k, name) in [
        (0, "gateway_ttfc_p99_overhead_native_n4_1000_streams"),
        (1, "gateway_ttfc_p99_overhead_fanout_n4_1000_streams"),
    ] {
        if let Some(m) = med(runs, |r| at(r, 1000, k).map(|v| v[1])) {
            report.targets.push(Target {
                name,
                measured: m,
                target: 1.0,
                at_least: false,
                unit: "ms",
            });
        }
    }
    // Content events per second at saturation: direct, proxy, gateway.
    type Rates = fn(&Run) -> (f64, f64, f64);
    let saturations: [(&str, &str, Rates); 2] = [
        (
            "gateway_relay_throughput_vs_byte_proxy",
            "a write per tick",
            |r| (r.sat_direct, r.sat_proxy, r.sat_gateway),
        ),
        (
            "gateway_relay_throughput_vs_byte_proxy_64k_writes",
            "64 KiB writes",
            |r| (r.bulk_direct, r.bulk_proxy, r.bulk_gateway),
        ),
    ];
    for (name, writes, rates) in saturations {
        let ratio = |r: &Run| {
            let (_, proxy, gateway) = rates(r);
            Some(gateway / proxy)
        };
        let Some(m) = med(runs, ratio) else { continue };
        report.targets.push(Target {
            name,
            measured: m,
            target: 0.7,
            at_least: true,
            unit: "x",
        });
        report.info.push(format!(
            "INFO gateway saturation, {writes}, content events/s (median): direct {:.0}, proxy {:.0}, gateway {:.0}; ratios per run: {}",
            med(runs, |r| Some(rates(r).0)).unwrap_or(0.0),
            med(runs, |r| Some(rates(r).1)).unwrap_or(0.0),
            med(runs, |r| Some(rates(r).2)).unwrap_or(0.0),
            list(runs, ratio, 2)
        ));
    }
    // Requests per second at saturation: information beside the events/s (the paired
    // figure against another build is `gateway-rate`'s).
    let ratio = |r: &Run| Some(r.rate_gateway.per_s / r.rate_proxy.per_s);
    if let Some(m) = med(runs, ratio) {
        report.info.push(format!(
            "INFO gateway_requests_per_s (median): direct {:.0}, proxy {:.0}, gateway {:.0} ({m:.2}x the proxy; per run {}), gateway CPU {:.0} µs a request",
            med(runs, |r| Some(r.rate_direct.per_s)).unwrap_or(0.0),
            med(runs, |r| Some(r.rate_proxy.per_s)).unwrap_or(0.0),
            med(runs, |r| Some(r.rate_gateway.per_s)).unwrap_or(0.0),
            list(runs, ratio, 2),
            med(runs, |r| Some(r.rate_gateway.cpu_us)).unwrap_or(0.0),
        ));
    }
    let per_stream = |r: &Run| {
        (r.rss_peak_1000_kib > 0).then(|| {
            (r.rss_peak_1000_kib.saturating_sub(r.rss_before_1000_kib)) as f64
                / r.open_at_peak.max(1) as f64
        })
    };
    if let Some(m) = med(runs, per_stream) {
        report.targets.push(Target {
            name: "gateway_rss_per_native_n4_stream_at_1000",
            measured: m,
            target: 128.0,
            at_least: false,
            unit: "KiB",
        });
    }
    let vs_start =
        |kib: fn(&Run) -> u64| move |r: &Run| Some(kib(r) as f64 / r.rss_start_kib.max(1) as f64);
    // The target's load is the paced levels (up to 1,000 concurrent streams); it has ended
    // when their client has closed its connections.
    if let Some(m) = med(runs, vs_start(|r| r.rss_after_levels_kib)) {
        report.info.push(format!(
            "INFO gateway_rss_after_load_vs_start, the clients' keep-alive connections open: {m:.2}x"
        ));
    }
    if let Some(m) = med(runs, vs_start(|r| r.rss_levels_closed_kib)) {
        report.targets.push(Target {
            name: "gateway_rss_after_load_vs_start",
            measured: m,
            target: 1.1,
            at_least: false,
            unit: "x",
        });
    }
    // At the end of a run: after the saturation (and savings) runs and `--settle-secs`, the
    // clients' connections closed. Until the upstream connections the gateway keeps for reuse
    // have closed, what they hold (and the allocator pages they keep) is in the figure.
    if let Some(m) = med(runs, vs_start(|r| r.rss_closed_kib)) {
        let (name, pool) = if args.settle_secs >= pool_closed_secs() {
            (
                "gateway_rss_after_pool_closed_vs_start",
                "the upstream connections kept for reuse closed",
            )
        } else {
            (
                "gateway_rss_after_saturation_vs_start",
                "the upstream connections still pooled",
            )
        };
        report.info.push(format!(
            "INFO {name}, {} s after the last load, the clients' connections closed, {pool}: {m:.2}x",
            args.settle_secs
        ));
    }
    report.info.push(format!(
        "INFO gateway VmRSS KiB per run (start / before the 1000 level / its peak / streams open then / after the paced levels / their clients' connections closed / after saturation / after the last load / its clients' connections closed): {}",
        runs.iter()
            .map(|r| format!(
                "{}/{}/{}/{}/{}/{}/{}/{}/{}",
                r.rss_start_kib,
                r.rss_before_1000_kib,
                r.rss_peak_1000_kib,
                r.open_at_peak,
                r.rss_after_levels_kib,
                r.rss_levels_closed_kib,
                r.rss_after_sat_kib,
                r.rss_after_kib,
                r.rss_closed_kib
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let panics: usize = runs.iter().map(|r| r.gateway_panics).sum();
    report.info.push(format!("INFO gateway panics: {panics}"));
    let with_litellm: Vec<&Run> = runs.iter().filter(|r| r.litellm.is_some()).collect();
    if !with_litellm.is_empty() {
        let v = |f: &dyn Fn(&Run, &Other) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = with_litellm
                .iter()
                .filter_map(|r| r.litellm.as_ref().and_then(|o| f(r, o)))
                .collect();
            (!v.is_empty()).then(|| median(&v))
        };
        let top = args
            .litellm_concurrency
            .as_ref()
            .and_then(|c| c.iter().max().copied())
            .unwrap_or(1000);
        let ours_p99 = |r: &Run, c: usize| at(r, c, 0).map(|v| v[1]);
        let theirs_p99 = |r: &Run, o: &Other, c: usize| {
            let direct = r.levels.iter().find(|l| l.0 == c)?.1;
            let l = o.levels.iter().find(|l| l.0 == c)?.1;
            Some(l.ttfc_p99_ms - direct.ttfc_p99_ms)
        };
        if let Some(m) = v(&|r, o| Some(r.sat_gateway / o.sat)) {
            report.targets.push(Target {
                name: "gateway_throughput_vs_litellm",
                measured: m,
                target: 10.0,
                at_least: true,
                unit: "x",
            });
        }
        if let Some(m) = v(&|r, o| {
            let ours = ours_p99(r, top)?;
            let theirs = theirs_p99(r, o, top)?;
            Some(ours.max(0.0) / theirs)
        }) {
            report.targets.push(Target {
                name: if top == 1000 {
                    "gateway_ttfc_p99_overhead_vs_litellm_1000"
                } else {
                    "gateway_ttfc_p99_overhead_vs_litellm"
                },
                measured: m,
                target: 0.1,
                at_least: false,
                unit: "x",
            });
        }
        for (c, _) in with_litellm[0]
            .litellm
            .as_ref()
            .map_or(&vec![], |o| &o.levels)
        {
            let c = *c;
            report.info.push(format!(
                "INFO litellm C={c}: TTFC overhead p50 {:.2} ms p99 {:.2} ms, chunk overhead p99 {:.2} ms, errors {:.0} (medians)",
                v(&|r, o| {
                    let d = r.levels.iter().find(|l| l.0 == c)?.1;
                    Some(o.levels.iter().find(|l| l.0 == c)?.1.ttfc_p50_ms - d.ttfc_p50_ms)
                })
                .unwrap_or(f64::NAN),
                v(&|r, o| theirs_p99(r, o, c)).unwrap_or(f64::NAN),
                v(&|r, o| {
                    let d = r.levels.iter().find(|l| l.0 == c)?.1;
                    Some(o.levels.iter().find(|l| l.0 == c)?.1.delay_p99_ms - d.delay_p99_ms)
                })
                .unwrap_or(f64::NAN),
                v(&|_, o| Some(o.levels.iter().find(|l| l.0 == c)?.1.errors as f64))
                    .unwrap_or(f64::NAN),
            ));
        }
        report.info.push(format!(
            "INFO litellm saturation {:.0} content events/s; VmRSS start {:.0} KiB, peak {:.0} KiB (medians)",
            v(&|_, o| Some(o.sat)).unwrap_or(0.0),
            v(&|_, o| Some(o.rss_start_kib as f64)).unwrap_or(0.0),
            v(&|_, o| Some(o.rss_peak_kib as f64)).unwrap_or(0.0),
        ));
    } else {
        report
            .info
            .push("INFO litellm not measured (pass --litellm PATH)".into());
    }
    let sv: Vec<Savings> = runs.iter().filter_map(|r| r.savings).collect();
    if !sv.is_empty() {
        let pct = |f: &dyn Fn(&Savings) -> (u64, u64)| {
            median(
                &sv.iter()
                    .map(|s| {
                        let (x, all) = f(s);
                        100.0 * (1.0 - x as f64 / all.max(1) as f64)
                    })
                    .collect::<Vec<_>>(),
            )
        };
        report.info.push(format!(
            "INFO savings (tokens not generated vs all samples to the end, median): native first_finished {:.0}%, vote {:.0}%; fan-out first_finished {:.0}%, vote {:.0}%; wrong answers {}",
            pct(&|s| (s.native_first_finished, s.native_all)),
            pct(&|s| (s.native_vote, s.native_all)),
            pct(&|s| (s.fanout_first_finished, s.fanout_all)),
            pct(&|s| (s.fanout_vote, s.fanout_all)),
            sv.iter().map(|s| s.wrong).sum::<usize>()
        ));
    }
    report
}
