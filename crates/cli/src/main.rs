//! The `choicewise` command.

mod replay;

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
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("choicewise: {message}");
            ExitCode::FAILURE
        }
    }
}
