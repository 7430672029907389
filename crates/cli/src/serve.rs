//! `choicewise serve`: the gateway of `choicewise-gateway`, configured by a TOML file.

use std::path::PathBuf;

use clap::Args;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

use crate::Exit;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (TOML; docs/gateway.md describes its keys).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The address to listen on (overrides the file's `listen`).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// How the log on stderr is written: `text` lines, or one JSON object per line. What is
    /// logged is chosen by `RUST_LOG` (default `warn,choicewise_gateway=info,choicewise_records=info`).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    log_format: LogFormat,
    /// Check the configuration as `serve` would before it listens (the file, the listen
    /// address, the environment variables it names, each model's pick), print the models and
    /// upstreams it would serve and any warnings, and exit: 0 when it would start, 2 (the
    /// error on stderr) when it would not. Nothing is bound, no upstream is contacted, no key
    /// is printed.
    #[arg(long)]
    check: bool,
    /// With `--check`: also reach the services the configuration names (the records
    /// database, Redis), each within 5 s, and say what was found; exit 1 when one did not
    /// answer or refused the configuration.
    #[arg(long, requires = "check")]
    connect: bool,
}

/// The log's format (`--log-format`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Prints the gateway's `tracing` events on stderr, filtered by `RUST_LOG`, in batches
/// ([`choicewise_gateway::StderrLog`]); what the returned log holds is written when it is
/// dropped. `None`
/// when the lines go to stderr one by one: a subscriber was set already, or the writing
/// thread could not start.
fn init_log(format: LogFormat) -> Option<choicewise_gateway::StderrLog> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,choicewise_gateway=info,choicewise_records=info")
    });
    // A log that cannot be written (stderr closed: its reader gone) is lost, never a panic
    // in the task that logged: tracing-subscriber's report of its own write errors is an
    // `eprintln!`, which panics on the same broken stderr, and a request's record is logged
    // as its answer's body ends.
    let log = choicewise_gateway::StderrLog::start();
    let writer = match &log {
        Some(log) => {
            let writer = log.writer();
            BoxMakeWriter::new(move || writer.clone())
        }
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .log_internal_errors(false)
        .with_ansi(false)
        .with_timer(choicewise_gateway::LogTime);
    // A subscriber set already (a program embedding the command) is kept.
    let set = match format {
        LogFormat::Text => builder.fmt_fields(choicewise_gateway::LogFields).try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    log.filter(|_| set.is_ok())
}

pub async fn run(args: ServeArgs) -> Result<(), Exit> {
    if args.check {
        return check(&args).await;
    }
    // Dropped when the gateway has stopped: the log's last lines are written before `run`
    // returns.
    let _log = init_log(args.log_format);
    choicewise_gateway::serve_file(&args.config, args.listen.as_deref())
        .await
        .map_err(|e| Exit::from(e.to_string()))
}

/// `serve --check`: what would be served, on stdout; an error, naming the file, is exit 2 (as
/// `nginx -t`).
async fn check(args: &ServeArgs) -> Result<(), Exit> {
    let file = args.config.display();
    let refused = |message: String| Exit { message, code: 2 };
    let text = tokio::fs::read_to_string(&args.config)
        .await
        .map_err(|e| refused(format!("cannot read {file}: {e}")))?;
    let config = choicewise_gateway::Config::from_toml(&text)
        .map_err(|e| refused(format!("{file}: {e}")))?;
    let checked =
        (config.check(args.listen.as_deref())).map_err(|e| refused(format!("{file}: {e}")))?;
    print!("{checked}");
    if args.connect {
        let reached = config.reach().await;
        print!("{reached}");
        if !reached.ok {
            return Err(Exit {
                message: format!(
                    "{file}: a service the configuration names did not answer (above)"
                ),
                code: 1,
            });
        }
    }
    let warnings = match checked.warnings.len() {
        0 => String::new(),
        1 => ", 1 warning".into(),
        n => format!(", {n} warnings"),
    };
    println!("{file}: the configuration is ok{warnings}");
    Ok(())
}
