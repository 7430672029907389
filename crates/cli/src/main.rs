//! The `choicewise` command.

mod chat;
mod live;
mod memory;
mod plain;
mod record;
mod replay;
mod serve;
mod show;
mod sniff;
mod upstream;
mod view;

use std::process::ExitCode;

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
        /// The subcommand (chat, replay, completions).
        subcommand: Option<String>,
    },
}

/// How a command failed: a one-line message for stderr and the exit status.
#[derive(Debug)]
pub struct Exit {
    pub message: String,
    pub code: u8,
}

impl From<String> for Exit {
    fn from(message: String) -> Self {
        Exit { message, code: 1 }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The documentation commands need no runtime.
    match &cli.command {
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "choicewise", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man { subcommand } => {
            let top = <Cli as clap::CommandFactory>::command();
            let command = match subcommand {
                None => top,
                Some(name) => match (name.as_str(), top.find_subcommand(name)) {
                    ("chat", Some(sub)) => sub.clone().name("choicewise-chat"),
                    ("replay", Some(sub)) => sub.clone().name("choicewise-replay"),
                    ("completions", Some(sub)) => sub.clone().name("choicewise-completions"),
                    _ => {
                        eprintln!(
                            "choicewise: no subcommand {name:?}: chat, replay, completions or man"
                        );
                        return ExitCode::from(2);
                    }
                },
            };
            return match clap_mangen::Man::new(command).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("choicewise: cannot write the man page: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    memory::no_transparent_huge_pages();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Command::Serve(_) = cli.command {
        // A gateway lives long, under a load that comes and goes.
        memory::return_freed_memory_at_once();
        builder.on_thread_park(memory::collect_when_idle);
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("choicewise: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Replay(args) => replay::run(args).await,
            Command::Chat(args) => chat::run(*args).await,
            Command::Serve(args) => serve::run(args).await,
            Command::Completions { .. } | Command::Man { .. } => Ok(()),
        }
    });
    // Blocking token counts still running (after Ctrl-C) must not hold the exit.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => {
            // One line per failure (the stream's, each failed choice's).
            for line in exit.message.lines() {
                eprintln!("choicewise: {line}");
            }
            ExitCode::from(exit.code)
        }
    }
}
