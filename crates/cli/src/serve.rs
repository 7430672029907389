//! `choicewise serve`: the gateway of `choicewise-gateway`, configured by a TOML file.

use std::path::PathBuf;

use clap::Args;

use crate::Exit;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (TOML; docs/gateway.md describes its keys).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The address to listen on (overrides the file's `listen`).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
}

pub async fn run(args: ServeArgs) -> Result<(), Exit> {
    let text = tokio::fs::read_to_string(&args.config)
        .await
        .map_err(|e| format!("cannot read {}: {e}", args.config.display()))?;
    let config = choicewise_gateway::Config::from_toml(&text)
        .map_err(|e| format!("{}: {e}", args.config.display()))?;
    choicewise_gateway::serve(&config, args.listen.as_deref())
        .await
        .map_err(|e| Exit::from(e.to_string()))
}
