//! `choicewise replay`: a recorded stream, choice by choice, at its recorded pace.

use std::path::{Path, PathBuf};
use std::time::Instant;

use choicewise::{Completions, Dialect, Source};
use clap::Args;

use crate::show;
use crate::view::ViewArgs;
use crate::{Exit, live, record};

/// The stream replayed when no file is given: a recorded n = 3 completion whose choices
/// first appear out of order, one of them making two parallel tool calls. It is
/// `assets/demo.sse` with synthetic arrival times (see `docs/recording.md`).
pub const DEMO: &[u8] = include_bytes!("../assets/demo.rec");

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The SSE file or recording to replay, or `-` for standard input. Without it, a bundled
    /// demo recording.
    file: Option<PathBuf>,
    #[command(flatten)]
    view: ViewArgs,
    /// Playback speed for a recording's arrival times: 2 plays twice as fast, 0 as fast as
    /// possible. Default 1, or 0 with --json. A file without times plays at once.
    #[arg(long, value_name = "X", value_parser = parse_speed)]
    speed: Option<f64>,
    /// The request body (JSON) the stream answers, to count prompt tokens when the stream
    /// carries no usage.
    #[arg(long, value_name = "FILE")]
    request: Option<PathBuf>,
    /// The stream's dialect: chat (Chat Completions chunks), responses (OpenAI Responses
    /// events) or anthropic (Anthropic Messages events). Default: recognised from the stream.
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    format: Option<Dialect>,
}

/// `chat`, `responses` or `anthropic`.
fn parse_format(s: &str) -> Result<Dialect, String> {
    s.parse()
}

/// A speed factor: a finite number, 0 or more.
pub fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a speed (a number, 0 or more)")),
    }
}

/// Reads a JSON request body from a file.
pub async fn read_request(path: &Path) -> Result<serde_json::Value, String> {
    let text = tokio::fs::read(path)
        .await
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    serde_json::from_slice(&text)
        .map_err(|e| format!("{}: not a JSON request body: {e}", path.display()))
}

pub async fn run(args: ReplayArgs) -> Result<(), Exit> {
    let builder = Completions::builder().dialect(args.format.unwrap_or_default());
    let mut model = None;
    let mut request = None;
    if let Some(path) = &args.request {
        let body = read_request(path).await?;
        model = body["model"].as_str().map(str::to_string);
        request = Some(body);
    }
    let with_request = |source: Source| match request {
        Some(request) => source.request(request),
        None => source,
    };
    let speed = args.speed.unwrap_or(if args.view.json { 0.0 } else { 1.0 });
    let start = Instant::now();
    let (completions, title) = match args.file.as_deref() {
        None => (
            builder.start(with_request(Source::sse(record::play(DEMO, speed)))),
            "replay of the demo".to_string(),
        ),
        Some(p) if p.as_os_str() == "-" => (
            builder.start(with_request(Source::sse(record::play(
                tokio::io::stdin(),
                speed,
            )))),
            "replay of stdin".to_string(),
        ),
        Some(p) => {
            let input = record::play_file(p, speed)
                .map_err(|e| format!("cannot open {}: {e}", p.display()))?;
            (
                builder.start(with_request(Source::sse(input))),
                format!("replay of {}", p.display()),
            )
        }
    };
    let title = if speed == 1.0 {
        title
    } else {
        format!("{title} at speed {speed}")
    };
    show::show(
        completions,
        &args.view,
        live::Options {
            start,
            title,
            model,
        },
    )
    .await
}
