//! The `choicewise` command as a library: [`run`] takes the arguments and returns the exit
//! status, so that the binary (`src/main.rs`) and other programs embedding the command (the
//! Python package's `choicewise` script) run the same code.
//!
//! ```no_run
//! let status: u8 = choicewise_cli::run(std::env::args_os());
//! std::process::exit(status.into());
//! ```
#![deny(missing_docs)]

mod chat;
mod feedback;
mod keys;
mod live;
mod memory;
mod picks;
mod plain;
mod record;
mod replay;
mod serve;
mod show;
mod sniff;
mod upstream;
mod usage;
mod view;

use std::ffi::OsString;

use clap::{Parser, Subcommand};

/// Per-choice views of streamed chat completions with several choices.
#[derive(Debug, Parser)]
#[command(name = "choicewise", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a recorded SSE stream choice by choice (a bundled demo stream if no FILE).
    Replay(replay::ReplayArgs),
    /// Ask an OpenAI-compatible endpoint for a chat completion with N choices and show them
    /// as they stream.
    Chat(Box<chat::ChatArgs>),
    /// Serve an OpenAI-compatible gateway: a correct streamed n for every model, picks
    /// among samples while they stream (docs/gateway.md).
    Serve(serve::ServeArgs),
    /// Measure the picks on your own model and task: `record` K samples of each item from
    /// an OpenAI-compatible endpoint, then `report` what each pick (single, first-finished,
    /// vote-K, adaptive, confidence) gives on them through the gateway (docs/picks.md).
    Picks {
        #[command(subcommand)]
        command: picks::PicksCommand,
    },
    /// Spend by key, model and day, from the database a gateway's `[records]` writes
    /// (docs/records.md).
    Usage(usage::UsageArgs),
    /// Manage a gateway's keys live over its admin API: list, show (what is left of each
    /// limit), create, set, rotate, revoke (docs/keys.md).
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Grade a request a gateway answered (`right`, `wrong` or a score): kept beside its
    /// record for `picks report` (docs/gateway.md, "Grades from production").
    Feedback(feedback::FeedbackArgs),
    /// Print a shell completion script (e.g. `choicewise completions bash >
    /// ~/.local/share/bash-completion/completions/choicewise`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page, in roff (e.g. `choicewise man chat | man -l -`): of the command, or
    /// of one of its subcommands.
    Man {
        /// The subcommand (chat, replay, serve, picks, usage, keys, feedback, completions).
        subcommand: Option<String>,
    },
}

/// How a command failed: a one-line message for stderr and the exit status.
#[derive(Debug)]
pub(crate) struct Exit {
    pub message: String,
    pub code: u8,
}

impl From<String> for Exit {
    fn from(message: String) -> Self {
        Exit { message, code: 1 }
    }
}

/// Runs the `choicewise` command with these arguments, the first being the program's name
/// (as in `std::env::args_os()`), and returns its exit status (for `std::process::ExitCode`,
/// or a Python `sys.exit`): what the `choicewise` binary does, for a program that embeds the command (the Python package's `choicewise` script
/// calls it with `sys.argv`).
///
/// It parses the arguments (for `--help`, `--version` or a usage error it prints what clap
/// prints and returns clap's status: 0, or 2), runs the subcommand on a Tokio runtime of its
/// own, prints each failure as one line `choicewise: ...` on stderr and returns 1 (or the
/// subcommand's own status, e.g. 130 after Ctrl-C). It never exits the process itself; it
/// blocks until the subcommand is over (for `serve`: until the gateway shuts down).
///
/// The process-wide settings stay with the binary: its allocator (mimalloc) and its
/// transparent huge pages. Under another allocator, `serve`'s calls to return freed memory
/// to the system concern only mimalloc's own (unused) heap and do nothing.
///
/// ```no_run
/// use std::process::ExitCode;
///
/// fn main() -> ExitCode {
///     let args = ["choicewise", "replay", "--json"].map(std::ffi::OsString::from);
///     ExitCode::from(choicewise_cli::run(args))
/// }
/// ```
pub fn run(args: impl IntoIterator<Item = OsString>) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version on stdout, usage errors on stderr, as `Cli::parse` does.
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    // The documentation commands need no runtime.
    match &cli.command {
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "choicewise", &mut std::io::stdout());
            return 0;
        }
        Command::Man { subcommand } => {
            let top = <Cli as clap::CommandFactory>::command();
            let command = match subcommand {
                None => top,
                Some(name) => match (name.as_str(), top.find_subcommand(name)) {
                    ("chat", Some(sub)) => sub.clone().name("choicewise-chat"),
                    ("replay", Some(sub)) => sub.clone().name("choicewise-replay"),
                    ("serve", Some(sub)) => sub.clone().name("choicewise-serve"),
                    ("picks", Some(sub)) => sub.clone().name("choicewise-picks"),
                    ("usage", Some(sub)) => sub.clone().name("choicewise-usage"),
                    ("keys", Some(sub)) => sub.clone().name("choicewise-keys"),
                    ("feedback", Some(sub)) => sub.clone().name("choicewise-feedback"),
                    ("completions", Some(sub)) => sub.clone().name("choicewise-completions"),
                    _ => {
                        eprintln!(
                            "choicewise: no subcommand {name:?}: chat, replay, serve, picks, usage, keys, feedback, completions or man"
                        );
                        return 2;
                    }
                },
            };
            return match clap_mangen::Man::new(command).render(&mut std::io::stdout()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("choicewise: cannot write the man page: {e}");
                    1
                }
            };
        }
        _ => {}
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Command::Serve(_) = cli.command {
        // A gateway lives long, under a load that comes and goes.
        memory::return_freed_memory_soon();
        builder.on_thread_park(memory::collect_when_idle);
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("choicewise: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Replay(args) => replay::run(args).await,
            Command::Chat(args) => chat::run(*args).await,
            Command::Serve(args) => serve::run(args).await,
            Command::Picks { command } => picks::run(command).await,
            Command::Usage(args) => usage::run(args).await,
            Command::Keys { command } => keys::run(command).await,
            Command::Feedback(args) => feedback::run(args).await,
            Command::Completions { .. } | Command::Man { .. } => Ok(()),
        }
    });
    // Blocking token counts still running (after Ctrl-C) must not hold the exit.
    runtime.shutdown_background();
    match result {
        Ok(()) => 0,
        Err(exit) => {
            // One line per failure (the stream's, each failed choice's).
            for line in exit.message.lines() {
                eprintln!("choicewise: {line}");
            }
            exit.code
        }
    }
}
