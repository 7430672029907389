//! # choicewise-records
//!
//! Every request a `choicewise serve` gateway answers, on record in SQLite or PostgreSQL:
//!
//! - [`RequestRecord`] and [`SampleRecord`]: the rows (`requests`, and `samples` with
//!   `samples = true`), the tables made by the migrations in `migrations/`;
//! - [`Recorder`]: takes records without ever making a request wait, and one task writes
//!   them in batches; while the database is away they wait in a bounded spool file
//!   ([`RecorderConfig`]), written once it answers, each once;
//! - [`Store`]: the database, and [`Store::usage`], the spend by key, model and day that
//!   `choicewise usage` prints;
//! - [`Grade`]: a request's grade from production (`POST /v1/feedback`), kept beside its
//!   record ([`Store::add_grade`], [`Store::grade`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use choicewise_records::{By, Recorder, RecorderConfig, RequestRecord, Store, UsageQuery};
//! let dir = tempfile::tempdir()?;
//! let url = format!("sqlite://{}", dir.path().join("records.db").display());
//! let recorder = Recorder::start(RecorderConfig::new(&url, dir.path().join("records.spool")), ())?;
//! let mut r = RequestRecord::new(1_795_737_600_000, "req-1", "m");
//! (r.status, r.prompt_tokens, r.completion_tokens) = (200, 10, 32);
//! recorder.record(r);
//! recorder.flush().await;
//! let rows = Store::connect(&url).await?.usage(&UsageQuery::new(vec![By::Model])).await?;
//! assert_eq!((rows[0].requests, rows[0].completion_tokens), (1, 32));
//! # Ok(()) }
//! ```

mod copy;
mod feedback;
mod keys;
mod read;
mod record;
mod spool;
mod store;
mod usage;
mod writer;

pub use feedback::{GRADES_AT_ONCE, Grade};
pub use read::{RecordReader, RecordsQuery, Skipped, SkippedRow};
pub use record::{RequestRecord, SampleRecord, SampleTokens, day_of};
pub use store::Store;
pub use usage::{By, UsageQuery, UsageReport, UsageRow, parse_since};
pub use writer::{Dropped, FIRST_TRY, Observe, Recorder, RecorderConfig, WRITE_DEADLINE};

/// Why records could not be read or written.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let e = choicewise_records::Store::connect("mysql://x").await.unwrap_err();
/// assert!(e.to_string().contains("sqlite:// or postgres://"));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordsError {
    /// The URL is not one of a records database.
    #[error("records URL {0}")]
    Url(String),
    /// The database could not be reached, did not answer, or refused the statement for a
    /// reason of its own (read-only, full, shutting down, too many connections): records
    /// wait in the spool until it takes them.
    #[error("records database {0}")]
    Database(String),
    /// The database refused the record itself (a data or integrity error: SQLSTATE class
    /// 22 or 23, SQLite's `CONSTRAINT`, `TOOBIG`, `MISMATCH`).
    #[error("records database {0}")]
    Rejected(String),
    /// The database refuses this configuration and will until it is changed: no such
    /// database, a wrong user or password.
    #[error("records database {0}")]
    Config(String),
    /// A query's argument is wrong (`--by`, `--since`).
    #[error("{0}")]
    Query(String),
    /// The spool cannot be opened: its folder, or every slot of it held by other processes.
    #[error("records spool {0}")]
    Spool(String),
}

/// A URL as it may be shown (logs, errors, `serve --check`): its password and its query
/// (which may hold a key) replaced by `***`. The one redactor of the workspace's URLs: the
/// records database's, Redis's, an upstream's.
///
/// ```
/// use choicewise_records::shown_url;
/// assert_eq!(shown_url("postgres://me:s3cret@127.0.0.1:5432/db"), "postgres://me:***@127.0.0.1:5432/db");
/// // A password equal to the user or the scheme is still the one hidden.
/// assert_eq!(shown_url("postgres://postgres:postgres@h/db"), "postgres://postgres:***@h/db");
/// assert_eq!(shown_url("redis://:pw@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
/// assert_eq!(shown_url("https://h.example/v1?api-key=sk"), "https://h.example/v1?***");
/// assert_eq!(shown_url("sqlite://records.db"), "sqlite://records.db");
/// // What does not parse as a URL keeps nothing of what could be a secret.
/// assert_eq!(shown_url("postgres://u:p@[bad/db"), "postgres://***@[bad/db");
/// ```
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            if parsed.query().is_some() {
                parsed.set_query(Some("***"));
            }
            let shown = parsed.to_string();
            // The `url` crate ends a bare host with `/`; the URL as written did not.
            match shown.strip_suffix('/') {
                Some(bare) if !url.ends_with('/') && !url.contains(['?', '#']) => bare.to_string(),
                _ => shown,
            }
        }
        Err(_) => {
            let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
            let rest = match rest.rsplit_once('@') {
                Some((_, host)) => format!("***@{host}"),
                None => rest.to_string(),
            };
            let rest = match rest.split_once('?') {
                Some((before, _)) => format!("{before}?***"),
                None => rest,
            };
            if scheme.is_empty() {
                rest
            } else {
                format!("{scheme}://{rest}")
            }
        }
    }
}
