//! LiteLLM's proxy as the gateway benchmark's other contender: started on the same
//! upstream with one worker and a master key, then measured on the same native levels and
//! saturation run as the gateway.

use std::time::Duration;

use tokio::runtime::Runtime;

use super::measure::{
    LevelSpec, Scan, level, level_header, paced_plan, print_level, request, saturation,
    stream_length,
};
use super::{GatewayArgs, Other};
use crate::procs::{self, Server};
use crate::upstream::now_ns;

pub(super) fn litellm_run(
    rt: &Runtime,
    args: &GatewayArgs,
    litellm: &std::path::Path,
    upstream: &str,
    dir: &std::path::Path,
) -> Result<Other, String> {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        l.local_addr().map_err(|e| e.to_string())?.port()
    };
    // A master key it accepts (it refuses to start without one); sent by the clients.
    let key = format!(
        "sk-bench-{:032x}",
        u128::from(now_ns()) * 0x9E37_79B9_7F4A_7C15
    );
    let config = dir.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: native\n    litellm_params:\n      model: openai/m\n      api_base: {upstream}/v1\n      api_key: sk-none\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(litellm);
    cmd.arg("--config")
        .arg(&config)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--num_workers",
            "1",
        ])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_LOG", "ERROR")
        .env("DISABLE_SCHEMA_UPDATE", "True")
        .env_remove("DATABASE_URL")
        .env("LITELLM_MASTER_KEY", &key);
    let base = format!("http://127.0.0.1:{port}");
    let server = Server::start(
        "litellm",
        cmd,
        &dir.join("litellm.log"),
        procs::Ready::Url(base.clone(), "/health/liveliness".into()),
        Duration::from_secs(180),
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let mut other = Other {
        rss_start_kib: server.rss_kib(),
        ..Other::default()
    };
    let url = format!("{base}/v1/chat/completions");
    let plan = paced_plan(&args.pace);
    let length = stream_length(&args.pace);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().map_err(|_| "a header")?,
    );
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .map_err(|e| e.to_string())?;
    let levels = args
        .litellm_concurrency
        .clone()
        .unwrap_or_else(|| args.concurrency.clone());
    rt.block_on(async {
        let _ = level(
            &client,
            LevelSpec {
                url: &url,
                body: request("native", 4, &plan, None),
                concurrency: 4,
                secs: 0.0,
                min_streams: 8,
                ramp: Duration::ZERO,
                how: Scan::Stamps,
                watch: None,
                stream_timeout: Duration::from_secs(60),
            },
        )
        .await;
        println!("\nLiteLLM's proxy (pid {}), native n = 4:\n", server.pid());
        level_header();
        for &c in &levels {
            let l = level(
                &client,
                LevelSpec {
                    url: &url,
                    body: request("native", 4, &plan, None),
                    concurrency: c,
                    secs: args.secs,
                    min_streams: args.min_streams,
                    ramp: if c > 1 { length } else { Duration::ZERO },
                    how: Scan::Stamps,
                    watch: Some(server.pid()),
                    stream_timeout: Duration::from_secs(60),
                },
            )
            .await;
            print_level("LiteLLM, native n = 4", c, &l);
            other.rss_peak_kib = other.rss_peak_kib.max(l.peak_rss_kib);
            other.levels.push((c, l));
        }
        other.sat = saturation(&client, &url, "native", args, true).await;
        println!(
            "LiteLLM saturation: {:.0} content events/s; VmRSS start {} KiB, peak {} KiB",
            other.sat, other.rss_start_kib, other.rss_peak_kib
        );
    });
    Ok(other)
}
