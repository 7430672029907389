//! The database: [`Store`], SQLite or PostgreSQL by its URL, its tables made by the
//! migrations in `migrations/`, records written in batches, once each.

use std::borrow::Cow;
use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{Postgres, QueryBuilder, Sqlite};

use crate::record::{RequestRecord, SampleRecord};
use crate::{RecordsError, shown_url};

/// Rows per statement, at most: 23 parameters each for `requests`, 11 for `samples`.
const ROWS_PER_STATEMENT: usize = 64;

/// `items` in chunks whose lengths are powers of two of at most [`ROWS_PER_STATEMENT`]:
/// statements of seven shapes only, each prepared once and then found in the connection's
/// statement cache (a statement of each batch's own length would be prepared every time,
/// which costs SQLite as much as the insert).
fn chunks<T>(mut items: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if items.is_empty() {
            return None;
        }
        let len = items.len().min(ROWS_PER_STATEMENT);
        let len = 1 << len.ilog2();
        let (chunk, rest) = items.split_at(len);
        items = rest;
        Some(chunk)
    })
}

/// The migrations, embedded: the same SQL makes both databases' tables.
fn migrator() -> Migrator {
    let migration = |version: i64, description: &'static str, sql: &'static str| {
        Migration::new(
            version,
            Cow::Borrowed(description),
            MigrationType::Simple,
            Cow::Borrowed(sql),
            false,
        )
    };
    Migrator {
        migrations: Cow::Owned(vec![
            migration(1, "records", include_str!("../migrations/0001_records.sql")),
            migration(
                2,
                "samples cut",
                include_str!("../migrations/0002_samples_cut.sql"),
            ),
            migration(3, "api keys", include_str!("../migrations/0003_keys.sql")),
            migration(
                4,
                "feedback",
                include_str!("../migrations/0004_feedback.sql"),
            ),
        ]),
        ..Migrator::DEFAULT
    }
}

/// A records database: `sqlite://PATH` (the file made when missing) or
/// `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`. Cheap to clone (a pool).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use choicewise_records::{RequestRecord, Store};
/// let dir = tempfile::tempdir()?;
/// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
/// let mut r = RequestRecord::new(1_795_737_600_000, "req-1", "m");
/// r.status = 200;
/// store.write(&[r.clone(), r]).await?; // the same record twice: one row
/// assert_eq!(store.count().await?, 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) db: Db,
    shown: String,
}

#[derive(Clone, Debug)]
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// How long a store waits for another process's migrations of one SQLite file.
const MIGRATION_WAIT: Duration = Duration::from_secs(30);

/// The lock that orders migrations of the SQLite database at `path` (its query string
/// left out): `<path>.migrations-lock`, held (`flock`, per open file, so two stores of one
/// process exclude each other too) until dropped; waited for [`MIGRATION_WAIT`] at most (a
/// process stopped while it migrates is named, not waited for forever). A folder where the
/// lock file cannot be made (read-only) needs no order: nothing can be migrated there, and
/// the migrator says so.
async fn migration_lock(path: &str, shown: &str) -> Result<Option<std::fs::File>, RecordsError> {
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    let fail = |what: String| RecordsError::Database(format!("{shown}: migrations: {what}"));
    let file = match std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(format!("{path}.migrations-lock"))
    {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(fail(format!("the lock file {path}.migrations-lock: {e}"))),
    };
    let deadline = tokio::time::Instant::now() + MIGRATION_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(fail(format!(
                    "another process held {path}.migrations-lock for {}s",
                    MIGRATION_WAIT.as_secs()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(fail(format!("locking {path}.migrations-lock: {e}")));
            }
        }
    }
}

impl Store {
    /// Connects to the database at `url` and makes or updates its tables. A connection that
    /// cannot be made within 5 s is an error naming the URL (never its password).
    pub async fn connect(url: &str) -> Result<Store, RecordsError> {
        Store::connect_with(url, true).await
    }

    /// As [`connect`](Self::connect), for reading what is there: a SQLite file that does not
    /// exist is an error naming it, not a new empty database.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let e = choicewise_records::Store::open_existing("sqlite:///nowhere/records.db").await.unwrap_err();
    /// assert!(e.to_string().contains("/nowhere/records.db"), "{e}");
    /// # }
    /// ```
    pub async fn open_existing(url: &str) -> Result<Store, RecordsError> {
        if let Some(path) = url.strip_prefix("sqlite://")
            && !path.is_empty()
            && !std::path::Path::new(path).is_file()
        {
            return Err(RecordsError::Database(format!("{url}: no such file")));
        }
        Store::connect_with(url, false).await
    }

    async fn connect_with(url: &str, create: bool) -> Result<Store, RecordsError> {
        let shown = shown_url(url);
        // A connection is never a record's fault; a driver that repeats the URL is scrubbed.
        let fail = |e: &sqlx::Error| {
            let fault = match classify(e) {
                Fault::Record => Fault::Away,
                fault => fault,
            };
            as_error(fault, format!("{shown}: {}", scrub(e, url)))
        };
        // SQLite has no lock of its own for migrations (PostgreSQL's migrator takes an
        // advisory lock): two stores opening one new file at once, whether two replicas in
        // one folder or the records writer and the keys of one gateway, would both apply a
        // migration and the second fail, or find the file busy while the first makes it.
        // A file lock beside the database orders them, from the first connection on.
        let mut migrating = None;
        let db = if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(RecordsError::Url(format!("{shown}: no file named")));
            }
            migrating = migration_lock(path, &shown).await?;
            let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
                .map_err(|e| RecordsError::Url(format!("{shown}: {e}")))?
                .create_if_missing(create)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(5));
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(options)
                .await
                .map_err(|e| fail(&e))?;
            Db::Sqlite(pool)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)
                .map_err(|e| RecordsError::Url(format!("{shown}: {}", scrub(&e, url))))?;
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(options)
                .await
                .map_err(|e| fail(&e))?;
            Db::Postgres(pool)
        } else {
            return Err(RecordsError::Url(format!(
                "{shown}: a records URL starts with sqlite:// or postgres://"
            )));
        };
        let store = Store { db, shown };
        store.migrate().await?;
        drop(migrating);
        Ok(store)
    }

    /// The database's URL as it may be shown: without its password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    async fn migrate(&self) -> Result<(), RecordsError> {
        let migrator = migrator();
        let done = match &self.db {
            Db::Sqlite(pool) => migrator.run(pool).await,
            Db::Postgres(pool) => migrator.run(pool).await,
        };
        done.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(e) => match fault_error(&self.shown, &e) {
                RecordsError::Rejected(text) | RecordsError::Database(text) => {
                    RecordsError::Database(format!("migrations: {text}"))
                }
                other => other,
            },
            e => RecordsError::Database(format!("{}: migrations: {e}", self.shown)),
        })
    }

    /// Writes `records` (and their samples), in one transaction: a record already written
    /// (the same [`id`](RequestRecord::id)) is left as it is.
    pub async fn write(&self, records: &[RequestRecord]) -> Result<(), RecordsError> {
        if records.is_empty() {
            return Ok(());
        }
        let written = match &self.db {
            Db::Sqlite(pool) => write_sqlite(pool, records).await,
            Db::Postgres(pool) => write_postgres(pool, records).await,
        };
        written.map_err(|e| fault_error(&self.shown, &e))
    }

    /// Writes `records` that were never written (each id new, none twice), all or none:
    /// PostgreSQL takes them by `COPY` ([`crate::copy`]), which costs it less than
    /// [`write`](Self::write)'s insert but cannot skip an id already there; SQLite by the
    /// same insert as `write`. A batch refused for a record's fault is refused whole, to be
    /// written again by `write`, which finds the record.
    pub(crate) async fn write_new(&self, records: &[RequestRecord]) -> Result<(), RecordsError> {
        if records.is_empty() {
            return Ok(());
        }
        let written = match &self.db {
            Db::Sqlite(pool) => write_sqlite(pool, records).await,
            Db::Postgres(pool) => crate::copy::write(pool, records).await,
        };
        written.map_err(|e| fault_error(&self.shown, &e))
    }

    /// The rows of `requests`.
    pub async fn count(&self) -> Result<u64, RecordsError> {
        let sql = "SELECT COUNT(*) FROM requests";
        let n: i64 = match &self.db {
            Db::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            Db::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
        }
        .map_err(|e| RecordsError::Database(format!("{}: {e}", self.shown)))?;
        Ok(n as u64)
    }

    pub(crate) fn db_error(&self, e: sqlx::Error) -> RecordsError {
        RecordsError::Database(format!("{}: {e}", self.shown))
    }

    /// Closes the pool's connections.
    pub async fn close(&self) {
        match &self.db {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
    }
}

/// A driver's error with the URL's password cut out, should the driver repeat the URL.
fn scrub(e: &dyn std::fmt::Display, url: &str) -> String {
    let mut text = e.to_string();
    if let Ok(parsed) = url::Url::parse(url)
        && let Some(password) = parsed.password().filter(|p| !p.is_empty())
    {
        let decoded = url::form_urlencoded::parse(format!("p={password}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned());
        text = text.replace(password, "***");
        if let Some(decoded) = decoded.filter(|d| !d.is_empty()) {
            text = text.replace(&decoded, "***");
        }
    }
    text
}

/// What an error of the database means for the records it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The records' own: the database read them and refuses them (data or integrity).
    Record,
    /// The database's: away, full, read-only, shutting down, busy. Records wait and are
    /// tried again.
    Away,
    /// The configuration's: no such database, a wrong user or password. Records wait too,
    /// and the operator is told until it is fixed.
    Config,
}

/// `e` classified by what it means: by SQLSTATE for PostgreSQL (class 22 data exception and
/// 23 integrity constraint violation are the record's; 3D000 no such database and class 28
/// authorization are the configuration's; everything else, such as 25006 read-only, 53100
/// disk full, 53300 too many connections, 57P01 admin shutdown, 57014 a cancelled statement,
/// is the database's) and by SQLite's primary result code (`CONSTRAINT`, `TOOBIG`,
/// `MISMATCH` are the record's; `FULL`, `READONLY`, `BUSY`, `LOCKED`, `IOERR`, `CANTOPEN` are
/// the database's). A value that cannot be encoded is the record's; the rest (I/O, the
/// pool, the protocol) the database's.
pub(crate) fn classify(e: &sqlx::Error) -> Fault {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or("");
            if db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some()
            {
                match code.get(..2) {
                    Some("22" | "23") => Fault::Record,
                    Some("28") => Fault::Config,
                    _ if code == "3D000" => Fault::Config,
                    _ => Fault::Away,
                }
            } else {
                // SQLite: the extended result code; its low byte is the primary code.
                match code.parse::<i32>().map(|c| c & 0xff) {
                    // SQLITE_TOOBIG, SQLITE_CONSTRAINT, SQLITE_MISMATCH.
                    Ok(18..=20) => Fault::Record,
                    _ => Fault::Away,
                }
            }
        }
        sqlx::Error::Encode(_) => Fault::Record,
        sqlx::Error::Configuration(_) => Fault::Config,
        _ => Fault::Away,
    }
}

/// `e` as a [`RecordsError`] of its [`Fault`], naming the database by `shown`.
pub(crate) fn fault_error(shown: &str, e: &sqlx::Error) -> RecordsError {
    as_error(classify(e), format!("{shown}: {e}"))
}

/// The [`RecordsError`] of `fault`, saying `text`.
fn as_error(fault: Fault, text: String) -> RecordsError {
    match fault {
        Fault::Record => RecordsError::Rejected(text),
        Fault::Away => RecordsError::Database(text),
        Fault::Config => RecordsError::Config(text),
    }
}

/// The insert of a batch, for one database (the two differ only in their types).
macro_rules! write_batch {
    ($name:ident, $db:ty, $pool:ty) => {
        async fn $name(pool: &$pool, records: &[RequestRecord]) -> Result<(), sqlx::Error> {
            let mut tx = pool.begin().await?;
            for chunk in chunks(records) {
                let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(
                    "INSERT INTO requests (id, at_ms, day, request_id, key_name, model, api, \
                     stream, pick, decision, samples_started, samples_cancelled, \
                     samples_failed, prompt_tokens, completion_tokens, estimated, \
                     sample_tokens, status, ended, first_byte_ms, total_ms, cost_usd, \
                     samples_cut) ",
                );
                q.push_values(chunk, |mut b, r| {
                    b.push_bind(&r.id)
                        .push_bind(r.at_ms)
                        .push_bind(&r.day)
                        .push_bind(&r.request_id)
                        .push_bind(&r.key)
                        .push_bind(&r.model)
                        .push_bind(&r.api)
                        .push_bind(r.stream)
                        .push_bind(&r.pick)
                        .push_bind(&r.decision)
                        .push_bind(r.samples_started)
                        .push_bind(r.samples_cancelled)
                        .push_bind(r.samples_failed)
                        .push_bind(r.prompt_tokens)
                        .push_bind(r.completion_tokens)
                        .push_bind(r.estimated)
                        .push_bind(
                            serde_json::to_string(&r.sample_tokens).unwrap_or_else(|_| "[]".into()),
                        )
                        .push_bind(r.status)
                        .push_bind(&r.ended)
                        .push_bind(r.first_byte_ms)
                        .push_bind(r.total_ms)
                        .push_bind(r.cost_usd)
                        .push_bind(r.samples_cut);
                });
                q.push(" ON CONFLICT (id) DO NOTHING");
                q.build().execute(&mut *tx).await?;
            }
            let samples: Vec<(&str, &SampleRecord)> = (records.iter())
                .flat_map(|r| r.samples.iter().map(move |s| (r.id.as_str(), s)))
                .collect();
            for chunk in chunks(&samples) {
                let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(
                    "INSERT INTO samples (request, sample, finish, place, prompt_tokens, \
                     completion_tokens, estimated, content, message, logprobs, output) ",
                );
                q.push_values(chunk, |mut b, (id, s)| {
                    b.push_bind(*id)
                        .push_bind(s.sample)
                        .push_bind(&s.finish)
                        .push_bind(s.place)
                        .push_bind(s.prompt_tokens)
                        .push_bind(s.completion_tokens)
                        .push_bind(s.estimated)
                        .push_bind(&s.content)
                        .push_bind(&s.message)
                        .push_bind(&s.logprobs)
                        .push_bind(s.output);
                });
                q.push(" ON CONFLICT (request, sample) DO NOTHING");
                q.build().execute(&mut *tx).await?;
            }
            tx.commit().await
        }
    };
}

write_batch!(write_sqlite, Sqlite, SqlitePool);
write_batch!(write_postgres, Postgres, PgPool);

#[cfg(test)]
mod tests {
    #[test]
    fn chunks_are_powers_of_two_of_at_most_the_bound_and_cover_everything() {
        for n in 0..300usize {
            let items: Vec<usize> = (0..n).collect();
            let lens: Vec<usize> = super::chunks(&items).map(<[usize]>::len).collect();
            assert_eq!(lens.iter().sum::<usize>(), n);
            assert!(
                lens.iter()
                    .all(|l| l.is_power_of_two() && *l <= super::ROWS_PER_STATEMENT)
            );
            let joined: Vec<usize> = super::chunks(&items).flatten().copied().collect();
            assert_eq!(joined, items);
        }
    }
}
