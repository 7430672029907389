//! `choicewise picks`: the picks measured on your own model and task. `record` asks an
//! OpenAI-compatible endpoint for K samples of each item and writes them as a set of
//! recorded samples (the `arith-traces` format); `report` replays that set through the
//! gateway, pick by pick, beside the offline reference (`choicewise-picks`).

mod from_records;
mod items;
mod record;
mod report;

use clap::Subcommand;

use crate::Exit;

#[derive(Debug, Subcommand)]
pub enum PicksCommand {
    /// Ask an OpenAI-compatible Chat Completions endpoint for K samples of each item of
    /// ITEMS.jsonl (streamed, with their log-probabilities where it gives them) and write
    /// them into DIR. Resumable: run it again with the same --out to record what is missing.
    /// With --from-records URL: the samples a gateway recorded (docs/records.md) instead.
    Record(record::RecordArgs),
    /// Replay a recorded DIR through the gateway (started here, on 127.0.0.1), pick by
    /// pick: accuracy, tokens and requests of each, beside the same pick computed offline,
    /// and the cheapest pick that keeps the best vote's accuracy.
    Report(report::ReportArgs),
}

pub async fn run(command: PicksCommand) -> Result<(), Exit> {
    match command {
        PicksCommand::Record(args) => match args.recorded_traffic() {
            Some((model, url, since, out)) => from_records::run(model, url, since, out).await,
            None => record::run(args).await,
        },
        PicksCommand::Report(args) => report::run(args).await,
    }
}
