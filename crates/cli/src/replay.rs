//! `choicewise replay`: a recorded stream, choice by choice, at its recorded pace.

use std::path::{Path, PathBuf};
use std::time::Instant;

use choicewise::{Completions, Dialect, Source};
use clap::Args;

use crate::show;
use crate::view::ViewArgs;
use crate::{Exit, live, record, sniff, view};

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

/// `chat`, `responses`, `anthropic` or `gemini`.
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
    // A recording's choices are known only as it plays: the pick states no samples.
    let pick = args.view.policy(None)?;
    let mut builder = Completions::builder();
    if let Some(dialect) = args.format {
        builder = builder.dialect(dialect);
    }
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
        Some(p) if p.as_os_str() == "-" => {
            let stdin = sniffed_stdin().await?;
            (
                builder.start(with_request(Source::sse(record::play(stdin, speed)))),
                "replay of stdin".to_string(),
            )
        }
        Some(p) => {
            sniff_file(p)?;
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
        pick,
        &args.view,
        live::Options {
            start,
            title,
            model,
            sources: view::Sources::default(),
        },
    )
    .await
}

/// Refuses a file that is not an SSE stream or a recording, saying what it is.
fn sniff_file(path: &std::path::Path) -> Result<(), Exit> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut head = Vec::new();
    file.take(sniff::HEAD as u64)
        .read_to_end(&mut head)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let at_end = head.len() < sniff::HEAD;
    verdict(sniff::sniff(&head, at_end))
}

/// Standard input, once its first line said it is an SSE stream or a recording (what was
/// read to tell is replayed first).
async fn sniffed_stdin() -> Result<impl tokio::io::AsyncRead + Send + Unpin + 'static, Exit> {
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut head = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        let n = stdin
            .read(&mut buf)
            .await
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        head.extend_from_slice(&buf[..n]);
        match sniff::sniff(&head, n == 0) {
            sniff::Sniffed::NeedMore => continue,
            sniffed => verdict(sniffed)?,
        }
        return Ok(std::io::Cursor::new(head).chain(stdin));
    }
}

fn verdict(sniffed: sniff::Sniffed) -> Result<(), Exit> {
    match sniffed {
        sniff::Sniffed::Sse | sniff::Sniffed::NeedMore => Ok(()),
        sniff::Sniffed::Empty => Err(Exit::from(sniff::EMPTY.to_string())),
        sniff::Sniffed::Not(message) => Err(Exit::from(message)),
    }
}
