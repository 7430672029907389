//! The keys made over the gateway's admin API, kept in the records database (table
//! `api_keys`): one row per key, its description as JSON text the gateway reads, and a
//! counter of changes (`api_key_changes`) that each change raises in its own transaction, so
//! that a replica knows when to read them again by reading one number.

use crate::RecordsError;
use crate::store::{Db, Store, fault_error};

impl Store {
    /// The counter of changes to the keys: raised by every [`create_key`](Self::create_key),
    /// [`replace_key_if`](Self::replace_key_if) and [`remove_key`](Self::remove_key) that changed
    /// a row.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use choicewise_records::Store;
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
    /// let before = store.key_version().await?;
    /// assert!(store.create_key("team-a", r#"{"name":"team-a"}"#).await?);
    /// assert!(!store.create_key("team-a", "{}").await?, "a name is made once");
    /// let new = r#"{"name":"team-a","tags":[]}"#;
    /// assert!(store.replace_key_if("team-a", r#"{"name":"team-a"}"#, new).await?);
    /// assert!(!store.replace_key_if("team-a", r#"{"name":"team-a"}"#, "{}").await?, "changed since");
    /// assert_eq!(store.keys().await?, [("team-a".to_string(), r#"{"name":"team-a","tags":[]}"#.to_string())]);
    /// assert!(store.remove_key("team-a").await?);
    /// assert!(!store.remove_key("team-a").await?);
    /// assert_eq!(store.key_version().await?, before + 3);
    /// # Ok(()) }
    /// ```
    pub async fn key_version(&self) -> Result<u64, RecordsError> {
        let sql = "SELECT version FROM api_key_changes WHERE id = 1";
        let version: i64 = match &self.db {
            Db::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            Db::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
        }
        .map_err(|e| fault_error(self.shown(), &e))?;
        Ok(version.max(0) as u64)
    }

    /// Every key's name and description, by name.
    pub async fn keys(&self) -> Result<Vec<(String, String)>, RecordsError> {
        let sql = "SELECT name, body FROM api_keys ORDER BY name";
        match &self.db {
            Db::Sqlite(pool) => sqlx::query_as(sql).fetch_all(pool).await,
            Db::Postgres(pool) => sqlx::query_as(sql).fetch_all(pool).await,
        }
        .map_err(|e| fault_error(self.shown(), &e))
    }

    /// Makes the key `name` described by `body`: `false` when a key of that name exists
    /// (left as it is).
    pub async fn create_key(&self, name: &str, body: &str) -> Result<bool, RecordsError> {
        self.change(
            "INSERT INTO api_keys (name, body) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            "INSERT INTO api_keys (name, body) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[name, body],
        )
        .await
    }

    /// Replaces the description of the key `name` by `body` where it is still `old`:
    /// `false` when it is not (changed since, or gone).
    pub async fn replace_key_if(
        &self,
        name: &str,
        old: &str,
        body: &str,
    ) -> Result<bool, RecordsError> {
        self.change(
            "UPDATE api_keys SET body = ? WHERE name = ? AND body = ?",
            "UPDATE api_keys SET body = $1 WHERE name = $2 AND body = $3",
            &[body, name, old],
        )
        .await
    }

    /// Removes the key `name`: `false` when there is none.
    pub async fn remove_key(&self, name: &str) -> Result<bool, RecordsError> {
        self.change(
            "DELETE FROM api_keys WHERE name = ?",
            "DELETE FROM api_keys WHERE name = $1",
            &[name],
        )
        .await
    }

    /// One change of a row, its parameters `binds` in order, and the counter raised with it
    /// when it changed a row, in one transaction.
    async fn change(
        &self,
        sqlite: &str,
        postgres: &str,
        binds: &[&str],
    ) -> Result<bool, RecordsError> {
        const RAISE: &str = "UPDATE api_key_changes SET version = version + 1 WHERE id = 1";
        // The same transaction on either pool (their types differ, the steps do not).
        macro_rules! change_on {
            ($pool:expr, $sql:expr) => {
                async {
                    let mut tx = $pool.begin().await?;
                    let query = (binds.iter()).fold(sqlx::query($sql), |q, b| q.bind(*b));
                    let rows = query.execute(&mut *tx).await?.rows_affected();
                    if rows > 0 {
                        sqlx::query(RAISE).execute(&mut *tx).await?;
                    }
                    tx.commit().await?;
                    Ok::<bool, sqlx::Error>(rows > 0)
                }
                .await
            };
        }
        let changed = match &self.db {
            Db::Sqlite(pool) => change_on!(pool, sqlite),
            Db::Postgres(pool) => change_on!(pool, postgres),
        };
        changed.map_err(|e| fault_error(self.shown(), &e))
    }
}
