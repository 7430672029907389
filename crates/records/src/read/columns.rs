//! What each column of a row must hold for a reader to take the row, checked in SQL (a row
//! that holds something else is named and left out, never decoded into a panic), and how a
//! row is named when it is left out.

use sqlx::Row;

/// The most one request may cost, in USD, as [`Want::Cost`] reads it: a cost above it (or
/// below 0, or not a number) is damage, and a sum of costs so bounded stays finite.
pub(crate) const MOST_COST_USD: &str = "1e12";

/// What a column must hold for a reader to take its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    Text,
    TextOrNull,
    Integer,
    IntegerOrNull,
    /// An integer of at least 0: a count of tokens.
    Count,
    Real,
    RealOrNull,
    /// Null, or a real number from 0 to [`MOST_COST_USD`].
    Cost,
}

/// The database's SQL dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Want {
    /// As a row's reason names it.
    fn wanted(self) -> &'static str {
        match self {
            Want::Text => "text",
            Want::TextOrNull => "text or null",
            Want::Integer => "an integer",
            Want::IntegerOrNull => "an integer or null",
            Want::Count => "an integer of at least 0",
            Want::Real => "a real number",
            Want::RealOrNull => "a real number or null",
            Want::Cost => "null or a cost from 0 to 1e12",
        }
    }

    /// The SQL that is true of a column `c` that holds what it should. PostgreSQL keeps each
    /// column's type: there only the ranges and nulls are checked.
    fn check(self, c: &str, d: Dialect) -> String {
        match d {
            Dialect::Sqlite => match self {
                Want::Text => format!("typeof({c}) = 'text'"),
                Want::TextOrNull => format!("typeof({c}) IN ('text', 'null')"),
                Want::Integer => format!("typeof({c}) = 'integer'"),
                Want::IntegerOrNull => format!("typeof({c}) IN ('integer', 'null')"),
                Want::Count => format!("(typeof({c}) = 'integer' AND {c} >= 0)"),
                Want::Real => format!("typeof({c}) = 'real'"),
                Want::RealOrNull => format!("typeof({c}) IN ('real', 'null')"),
                Want::Cost => format!(
                    "(typeof({c}) = 'null' OR (typeof({c}) = 'real' AND {c} BETWEEN 0 AND {MOST_COST_USD}))"
                ),
            },
            Dialect::Postgres => match self {
                Want::Text | Want::Integer | Want::Real => format!("{c} IS NOT NULL"),
                Want::TextOrNull | Want::IntegerOrNull | Want::RealOrNull => "TRUE".into(),
                Want::Count => format!("{c} >= 0"),
                // NaN is above every number in PostgreSQL, Infinity above the bound.
                Want::Cost => format!("({c} IS NULL OR {c} BETWEEN 0 AND {MOST_COST_USD})"),
            },
        }
    }
}

/// What a column `c` holds, in a few words: its type and its number, or its type and
/// length (SQLite); its value, cut (PostgreSQL).
fn held(c: &str, d: Dialect) -> String {
    match d {
        Dialect::Sqlite => format!(
            "CASE typeof({c}) WHEN 'integer' THEN 'the integer ' || {c} \
             WHEN 'real' THEN 'the real ' || {c} WHEN 'null' THEN 'null' \
             ELSE 'a ' || typeof({c}) || ' of ' || length(CAST({c} AS BLOB)) || \
             CASE length(CAST({c} AS BLOB)) WHEN 1 THEN ' byte' ELSE ' bytes' END END"
        ),
        Dialect::Postgres => {
            format!(
                "CASE WHEN {c} IS NULL THEN 'null' ELSE 'the value ' || LEFT(CAST({c} AS TEXT), 32) END"
            )
        }
    }
}

/// The columns a reader reads and what each must hold.
pub(crate) type Columns<'a> = &'a [(&'a str, Want)];

/// The SQL, true of a row whose `columns` all hold what they should.
pub(crate) fn check_all(columns: Columns<'_>, d: Dialect) -> String {
    let checks: Vec<String> = (columns.iter())
        .map(|(c, want)| format!("({})", want.check(c, d)))
        .collect();
    match checks.is_empty() {
        true => "TRUE".into(),
        false => format!("COALESCE({}, FALSE)", checks.join(" AND ")),
    }
}

/// The select list that says a row's faults: `cw_good` (1 or 0), then per column
/// `cw_why_I`, null where it holds what it should, else what it holds. Read back by
/// [`fault_of`].
pub(crate) fn fault_columns(columns: Columns<'_>, d: Dialect) -> String {
    let mut sql = format!(
        "CAST(CASE WHEN {} THEN 1 ELSE 0 END AS BIGINT) AS cw_good",
        check_all(columns, d)
    );
    for (i, (c, want)) in columns.iter().enumerate() {
        sql.push_str(&format!(
            ", CASE WHEN {} THEN NULL ELSE {} END AS cw_why_{i}",
            want.check(c, d),
            held(c, d)
        ));
    }
    sql
}

/// What is wrong with a row selected with [`fault_columns`] from column `at` on: `None` when
/// nothing is.
pub(crate) fn fault_of<R: Row>(row: &R, at: usize, columns: Columns<'_>) -> Option<String>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    if row.try_get::<i64, _>(at).is_ok_and(|good| good == 1) {
        return None;
    }
    let mut faults = Vec::new();
    for (i, (c, want)) in columns.iter().enumerate() {
        match row.try_get::<Option<String>, _>(at + 1 + i) {
            Ok(None) => {}
            Ok(Some(held)) => faults.push(format!("{c} holds {held}, wanted {}", want.wanted())),
            Err(_) => faults.push(format!(
                "{c} holds what cannot be read, wanted {}",
                want.wanted()
            )),
        }
    }
    if faults.is_empty() {
        faults.push("its columns do not hold what they should".into());
    }
    Some(faults.join("; "))
}

/// A text as a row's name shows it: quoted, escaped, its first 64 characters.
pub(crate) fn quoted_name(text: &str) -> String {
    let escaped: String = text.escape_debug().collect();
    match escaped.char_indices().nth(64) {
        Some((cut, _)) => format!("\"{}…\"", &escaped[..cut]),
        None => format!("\"{escaped}\""),
    }
}

/// A `requests` row's name: its id when it is text, else its `rowid`.
pub(crate) fn request_name(id: Option<&str>, rowid: Option<i64>) -> String {
    match (id, rowid) {
        (Some(id), _) => format!("id {}", quoted_name(id)),
        (None, Some(rowid)) => format!("rowid {rowid}"),
        (None, None) => "(no id)".into(),
    }
}

/// The select list naming a `requests` row: `cw_id` (its id where it is text) and `cw_rowid`
/// (SQLite's rowid; null in PostgreSQL, where every id is text).
pub(crate) fn name_columns(d: Dialect) -> &'static str {
    match d {
        Dialect::Sqlite => "CASE WHEN typeof(id) = 'text' THEN id END AS cw_id, rowid AS cw_rowid",
        Dialect::Postgres => "id AS cw_id, CAST(NULL AS BIGINT) AS cw_rowid",
    }
}
