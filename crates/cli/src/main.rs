//! The `choicewise` command.

mod chat;
mod live;
mod plain;
mod record;
mod replay;
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
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
