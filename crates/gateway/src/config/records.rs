//! `[records]`: every request on record in a database (`choicewise-records`).

use serde::Deserialize;

use super::ConfigError;

/// `[records]`: one row per request in SQLite or PostgreSQL, written off the request's path;
/// while the database is away, records wait in a spool file. `url` defaults to
/// `sqlite://records.db` (a file in the gateway's working folder).
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     [records]
///     url = "postgres://choicewise@127.0.0.1/choicewise"
///     samples = true
///     spool_max_mb = 64
///     [[models]]
///     name = "m"
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// let records = config.records.unwrap();
/// assert!(records.samples);
/// assert_eq!(records.spool_path, "records.spool");
/// assert_eq!(records.spool_max_mb, 64);
/// let bad = Config::from_toml("[records]\nurl = \"mysql://x\"\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:8080/v1\"");
/// assert!(bad.unwrap_err().to_string().contains("[records] url"));
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Records {
    /// `sqlite://PATH` or `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`.
    #[serde(default = "default_url")]
    pub url: String,
    /// One row per sample too: its text, its finish, its tokens, its log-probabilities,
    /// its place in the finish order.
    #[serde(default)]
    pub samples: bool,
    /// Where records wait while the database is away.
    #[serde(default = "default_spool_path")]
    pub spool_path: String,
    /// The spool's bound, in MiB: past it records are dropped, counted and logged.
    #[serde(default = "default_spool_max_mb")]
    pub spool_max_mb: u64,
}

fn default_url() -> String {
    "sqlite://records.db".into()
}

fn default_spool_path() -> String {
    "records.spool".into()
}

fn default_spool_max_mb() -> u64 {
    256
}

impl Records {
    /// The URL is a records database's; the spool has a path and a bound.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        let url = &self.url;
        let shown = choicewise_records::shown_url(url);
        let sqlite = url.strip_prefix("sqlite://");
        let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
        if sqlite.is_some_and(str::is_empty) || (sqlite.is_none() && !postgres) {
            return Err(ConfigError(format!(
                "[records] url {shown:?}: say sqlite://PATH or postgres://USER@HOST/DB"
            )));
        }
        if self.spool_path.trim().is_empty() {
            return Err(ConfigError("[records] spool_path is empty".into()));
        }
        if !(1..=1_048_576).contains(&self.spool_max_mb) {
            return Err(ConfigError(format!(
                "[records] spool_max_mb must be from 1 to 1048576, not {}",
                self.spool_max_mb
            )));
        }
        Ok(())
    }
}
