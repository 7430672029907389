//! `[records]`: every request's row handed to `choicewise-records`' writer, which writes it
//! off the request's path (a bounded queue, batches, a spool while the database is away).
//! The row is made by the request's record ([`Finish`](crate::answer::finish::Finish)) from
//! what its accounting read, when its client leaves.

use std::collections::HashMap;

use choicewise_records::{Recorder, RecorderConfig, RequestRecord};

use crate::config::{self, Config, ConfigError, Price};
use crate::metrics::Metrics;

/// A sample's text kept in its row, at most (its content cut past it, on a character's
/// boundary; its message and log-probabilities left out past it).
pub(crate) const MAX_SAMPLE_TEXT: usize = 1 << 20;

/// The gateway's records: the writer, whether samples are kept, the prices, and the
/// database read and written on a request's path (the grades of `POST /v1/feedback`).
pub(crate) struct Records {
    recorder: Recorder,
    samples: bool,
    prices: HashMap<String, Price>,
    database: Database,
}

/// The records database on a pool of its own, connected on first use (and again after a
/// failure to connect): for what a route reads or writes at once (the keys of the admin API,
/// the grades), beside the writer's own connection.
pub(crate) struct Database {
    url: String,
    shown: String,
    store: tokio::sync::Mutex<Option<choicewise_records::Store>>,
}

impl Database {
    pub(crate) fn new(url: &str) -> Database {
        Database {
            url: url.to_string(),
            shown: choicewise_records::shown_url(url),
            store: tokio::sync::Mutex::new(None),
        }
    }

    /// Its URL as it may be shown.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// The database, connected.
    pub(crate) async fn store(&self) -> Result<choicewise_records::Store, String> {
        let mut held = self.store.lock().await;
        if let Some(store) = &*held {
            return Ok(store.clone());
        }
        let store =
            (choicewise_records::Store::connect(&self.url).await).map_err(|e| e.to_string())?;
        *held = Some(store.clone());
        Ok(store)
    }
}

impl Records {
    /// The writer of `config`'s `[records]`, started on the current tokio runtime (an error
    /// outside one), its counts in `metrics`.
    pub(crate) fn start(
        config: &Config,
        records: &config::Records,
        metrics: &Metrics,
    ) -> Result<Records, ConfigError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ConfigError(
                "[records]: the gateway must be made inside a tokio runtime, which writes the records".into(),
            ));
        }
        let mut writer = RecorderConfig::new(records.url.clone(), records.spool_path.clone());
        writer.spool_max_bytes = records.spool_max_mb.saturating_mul(1 << 20);
        let prices = (config.models.iter())
            .filter_map(|m| m.price.map(|p| (m.name.clone(), p)))
            .collect();
        let recorder = Recorder::start(writer, metrics.records.clone())
            .map_err(|e| ConfigError(format!("[records] spool_path: {e}")))?;
        Ok(Records {
            recorder,
            samples: records.samples,
            prices,
            database: Database::new(&records.url),
        })
    }

    /// Whether each sample gets a row (`samples = true`).
    pub(crate) fn samples(&self) -> bool {
        self.samples
    }

    /// What `prompt` and `completion` tokens of `model` cost, at its price (`None` without).
    pub(crate) fn cost(&self, model: &str, prompt: u64, completion: u64) -> Option<f64> {
        let price = self.prices.get(model)?;
        Some(
            (prompt as f64 * price.input_per_million
                + completion as f64 * price.output_per_million)
                / 1e6,
        )
    }

    /// Hands `record` to the writer: never waits.
    pub(crate) fn record(&self, record: RequestRecord) {
        self.recorder.record(record);
    }

    /// The database, for what a route reads or writes at once.
    pub(crate) fn database(&self) -> &Database {
        &self.database
    }

    /// Waits until every record handed over is written or spooled (at shutdown, and before
    /// a grade looks for a request just answered).
    pub(crate) async fn flush(&self) {
        self.recorder.flush().await;
    }
}

/// `text` cut to at most [`MAX_SAMPLE_TEXT`] bytes on a character's boundary, its NUL
/// characters (which PostgreSQL's text refuses) replaced by U+FFFD.
pub(crate) fn kept_text(text: &str) -> String {
    let mut end = text.len().min(MAX_SAMPLE_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].replace('\0', "\u{FFFD}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_text_is_cut_on_a_boundary_and_has_no_nul() {
        assert_eq!(kept_text("a\0b"), "a\u{FFFD}b");
        let long = "é".repeat(MAX_SAMPLE_TEXT);
        let kept = kept_text(&long);
        assert!(kept.len() <= MAX_SAMPLE_TEXT && kept.len() >= MAX_SAMPLE_TEXT - 1);
        assert!(kept.chars().all(|c| c == 'é'));
    }
}
