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
//!   `choicewise usage` prints.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use choicewise_records::{By, Recorder, RecorderConfig, RequestRecord, Store, UsageQuery};
//! let dir = tempfile::tempdir()?;
//! let url = format!("sqlite://{}", dir.path().join("records.db").display());
//! let recorder = Recorder::start(RecorderConfig::new(&url, dir.path().join("records.spool")), ());
//! let mut r = RequestRecord::new(1_795_737_600_000, "req-1", "m");
//! (r.status, r.prompt_tokens, r.completion_tokens) = (200, 10, 32);
//! recorder.record(r);
//! recorder.flush().await;
//! let rows = Store::connect(&url).await?.usage(&UsageQuery::new(vec![By::Model])).await?;
//! assert_eq!((rows[0].requests, rows[0].completion_tokens), (1, 32));
//! # Ok(()) }
//! ```

mod read;
mod record;
mod store;
mod usage;
mod writer;

pub use read::RecordsQuery;
pub use record::{RequestRecord, SampleRecord, SampleTokens, day_of};
pub use store::Store;
pub use usage::{By, UsageQuery, UsageRow, parse_since};
pub use writer::{Dropped, Observe, Recorder, RecorderConfig, WRITE_DEADLINE};

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
    /// The database could not be reached or did not answer.
    #[error("records database {0}")]
    Database(String),
    /// The database refused a statement (the records, not the connection).
    #[error("records database {0}")]
    Rejected(String),
    /// A query's argument is wrong (`--by`, `--since`).
    #[error("{0}")]
    Query(String),
}

/// The URL as it may be shown: its password replaced by `***`.
///
/// ```
/// assert_eq!(
///     choicewise_records::shown_url("postgres://me:s3cret@127.0.0.1:5432/db"),
///     "postgres://me:***@127.0.0.1:5432/db"
/// );
/// assert_eq!(choicewise_records::shown_url("sqlite://records.db"), "sqlite://records.db");
/// ```
pub fn shown_url(url: &str) -> String {
    match password_of(url) {
        Some(password) => {
            let at = url.find(password).unwrap_or(0);
            format!("{}***{}", &url[..at], &url[at + password.len()..])
        }
        None => url.to_string(),
    }
}

/// The password in `scheme://user:password@host...`, if there is one.
pub(crate) fn password_of(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let userinfo = &rest[..rest.find('@')?];
    let colon = userinfo.find(':')?;
    Some(&userinfo[colon + 1..])
}
