//! New records into PostgreSQL by `COPY ... FROM STDIN`: their rows in COPY's text format,
//! sent in one stream a table. PostgreSQL takes a row of COPY for less than a row of a
//! multi-row `INSERT ... ON CONFLICT DO NOTHING` (docs/records.md has the figures), but COPY
//! cannot skip a row whose id is there already: it serves only records never written
//! ([`Store::write_new`](crate::Store)), and a batch it refuses is written again by the
//! insert, which can.

use sqlx::PgPool;

use crate::record::{RequestRecord, SampleRecord};

/// The `requests` table's columns, in the order of each row.
const REQUESTS: &str = "COPY requests (id, at_ms, day, request_id, key_name, model, api, stream, \
     pick, decision, samples_started, samples_cancelled, samples_failed, prompt_tokens, \
     completion_tokens, estimated, sample_tokens, status, ended, first_byte_ms, total_ms, \
     cost_usd, samples_cut) FROM STDIN";

/// The `samples` table's columns, in the order of each row.
const SAMPLES: &str = "COPY samples (request, sample, finish, place, prompt_tokens, \
     completion_tokens, estimated, content, message, logprobs, output) FROM STDIN";

/// The most bytes of rows held before they are sent: a batch's rows go in pieces, never
/// all at once (a batch may weigh as much as the writer's queue holds).
const PIECE: usize = 1 << 20;

/// Writes `records`, none of them written before, in one transaction.
pub(crate) async fn write(pool: &PgPool, records: &[RequestRecord]) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    copy(&mut tx, REQUESTS, records, request).await?;
    if records.iter().any(|r| !r.samples.is_empty()) {
        copy(&mut tx, SAMPLES, records, samples).await?;
    }
    tx.commit().await
}

/// One `COPY` (`statement`) of the rows `rows` writes for each of `records`, sent in pieces
/// of about [`PIECE`] bytes.
async fn copy(
    tx: &mut sqlx::PgConnection,
    statement: &str,
    records: &[RequestRecord],
    rows: fn(&mut String, &RequestRecord),
) -> Result<(), sqlx::Error> {
    let mut copy = tx.copy_in_raw(statement).await?;
    let mut out = String::with_capacity(PIECE.min(512 * records.len()));
    for r in records {
        rows(&mut out, r);
        if out.len() >= PIECE {
            copy.send(out.as_bytes()).await?;
            out.clear();
        }
    }
    if !out.is_empty() {
        copy.send(out.as_bytes()).await?;
    }
    copy.finish().await.map(drop)
}

/// A request's line: its columns as [`REQUESTS`] names them.
fn request(out: &mut String, r: &RequestRecord) {
    let mut row = Row::new(out);
    row.text(&r.id);
    row.int(r.at_ms);
    row.text(&r.day);
    row.text(&r.request_id);
    row.text(&r.key);
    row.text(&r.model);
    row.text(&r.api);
    row.bool(r.stream);
    row.maybe(r.pick.as_deref(), Row::text);
    row.maybe(r.decision.as_deref(), Row::text);
    row.int(r.samples_started);
    row.int(r.samples_cancelled);
    row.int(r.samples_failed);
    row.int(r.prompt_tokens);
    row.int(r.completion_tokens);
    row.bool(r.estimated);
    row.text(&serde_json::to_string(&r.sample_tokens).unwrap_or_else(|_| "[]".into()));
    row.int(r.status);
    row.text(&r.ended);
    row.maybe(r.first_byte_ms, Row::float);
    row.float(r.total_ms);
    row.maybe(r.cost_usd, Row::float);
    row.bool(r.samples_cut);
    row.end();
}

/// A line a sample of `r`: its columns as [`SAMPLES`] names them.
fn samples(out: &mut String, r: &RequestRecord) {
    for s in &r.samples {
        sample(out, &r.id, s);
    }
}

fn sample(out: &mut String, request: &str, s: &SampleRecord) {
    let mut row = Row::new(out);
    row.text(request);
    row.int(s.sample);
    row.text(&s.finish);
    row.maybe(s.place, Row::int);
    row.int(s.prompt_tokens);
    row.int(s.completion_tokens);
    row.bool(s.estimated);
    row.maybe(s.content.as_deref(), Row::text);
    row.maybe(s.message.as_deref(), Row::text);
    row.maybe(s.logprobs.as_deref(), Row::text);
    row.maybe(s.output, Row::int);
    row.end();
}

/// A row of COPY's text format being written: columns parted by tabs, `\N` for NULL, a
/// backslash, tab, newline or carriage return in a text escaped with a backslash.
struct Row<'a>(&'a mut String, bool);

impl<'a> Row<'a> {
    fn new(out: &'a mut String) -> Self {
        Row(out, false)
    }

    /// A column begins: after the row's first, a tab.
    fn column(&mut self) {
        if std::mem::replace(&mut self.1, true) {
            self.0.push('\t');
        }
    }

    fn text(&mut self, text: &str) {
        self.column();
        let mut rest = text;
        while let Some(at) = (rest.bytes()).position(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r'))
        {
            self.0.push_str(&rest[..at]);
            self.0.push_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'\t' => "\\t",
                b'\n' => "\\n",
                _ => "\\r",
            });
            rest = &rest[at + 1..];
        }
        self.0.push_str(rest);
    }

    fn int(&mut self, n: i64) {
        self.column();
        self.0.push_str(itoa::Buffer::new().format(n));
    }

    /// A float as PostgreSQL reads it back exactly: Rust's shortest decimal that rounds to
    /// it, or PostgreSQL's words for the ones that are not numbers.
    fn float(&mut self, x: f64) {
        self.column();
        if x.is_nan() {
            self.0.push_str("NaN");
        } else if x.is_infinite() {
            self.0
                .push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        } else {
            self.0.push_str(ryu::Buffer::new().format_finite(x));
        }
    }

    fn bool(&mut self, b: bool) {
        self.column();
        self.0.push(if b { 't' } else { 'f' });
    }

    /// `value` written by `put`, or NULL.
    fn maybe<T>(&mut self, value: Option<T>, put: fn(&mut Self, T)) {
        match value {
            Some(v) => put(self, v),
            None => self.null(),
        }
    }

    fn null(&mut self) {
        self.column();
        self.0.push_str("\\N");
    }

    fn end(self) {
        self.0.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows `rows` writes for each of `records`, as bytes.
    fn lines(records: &[RequestRecord], rows: fn(&mut String, &RequestRecord)) -> Vec<u8> {
        let mut out = String::new();
        for r in records {
            rows(&mut out, r);
        }
        out.into_bytes()
    }

    /// Texts are escaped as COPY reads them (a text `\N` is not a NULL), NULLs are `\N`,
    /// floats are written so that they read back exactly, and every row ends its line.
    #[test]
    fn rows_are_written_in_copys_text_format() {
        let mut r = RequestRecord::new(1_795_737_600_000, "req\t1\n", "m\\x");
        r.id = "a\rb".into();
        r.key = "\\N".into();
        r.pick = Some(String::new());
        r.total_ms = 0.1;
        r.cost_usd = Some(f64::INFINITY);
        r.first_byte_ms = Some(1e300);
        let mut s = SampleRecord::new(1, "stop");
        s.content = Some("é\u{1F600}\t".into());
        s.place = Some(0);
        r.samples.push(s);
        let line = String::from_utf8(lines(std::slice::from_ref(&r), request)).unwrap();
        let columns: Vec<&str> = line.strip_suffix('\n').unwrap().split('\t').collect();
        assert_eq!(columns.len(), 23, "{line:?}");
        assert_eq!(
            columns[..7],
            [
                "a\\rb",
                "1795737600000",
                "2026-11-27",
                "req\\t1\\n",
                "\\\\N",
                "m\\\\x",
                ""
            ]
        );
        assert_eq!(columns[7..10], ["f", "", "\\N"]);
        assert_eq!(columns[19..], ["1e300", "0.1", "Infinity", "f"]);
        assert_eq!(columns[19].parse::<f64>().unwrap(), 1e300);
        let line = String::from_utf8(lines(&[r.clone(), r.clone()], samples)).unwrap();
        let want = "a\\rb\t1\tstop\t0\t0\t0\tf\té\u{1F600}\\t\t\\N\t\\N\t\\N\n";
        assert_eq!(line, want.repeat(2));
        // An empty text is a column too, first or not.
        r.id = String::new();
        let written = String::from_utf8(lines(&[r.clone(), r], request)).unwrap();
        for line in written.lines() {
            assert_eq!(line.split('\t').count(), 23, "{line:?}");
            assert!(line.starts_with("\t1795737600000\t"), "{line:?}");
        }
    }

    /// On a real PostgreSQL, new records go by COPY alone (no second try hides a refusal
    /// here) and read back as they were; COPY refuses an id already there, which
    /// [`Store::write`](crate::Store::write) then skips.
    #[tokio::test]
    async fn postgres_takes_a_batch_by_copy_and_refuses_an_id_already_there() {
        let Some(pg) = choicewise_test_support::PostgresServer::start() else {
            return;
        };
        let store = crate::Store::connect(&pg.url()).await.unwrap();
        let texts = ["a\tb", "c\nd\re", "\\N", "f\\g", "", "\u{1F600}"];
        let records: Vec<RequestRecord> = (texts.iter().enumerate())
            .map(|(i, text)| {
                let mut r = RequestRecord::new(1_795_737_600_000 + i as i64, *text, *text);
                r.key = text.to_string();
                r.pick = (i % 2 == 0).then(|| text.to_string());
                r.total_ms = 0.1 * i as f64;
                r.first_byte_ms = (i % 2 == 1).then_some(1e-300);
                let mut s = SampleRecord::new(0, "stop");
                s.content = Some(format!("{text}{text}"));
                s.output = Some(i as i64);
                r.samples.push(s);
                r
            })
            .collect();
        store.write_new(&records).await.unwrap();
        let query = crate::RecordsQuery::since(0).with_samples();
        assert_eq!(store.records(&query).await.unwrap(), records);
        let e = store.write_new(&records[..1]).await.unwrap_err();
        assert!(matches!(e, crate::RecordsError::Rejected(_)), "{e}");
        store.write(&records).await.unwrap();
        assert_eq!(store.count().await.unwrap(), 6);

        // A batch of rows weighing several pieces goes in pieces and reads back whole.
        let large: Vec<RequestRecord> = (0..4)
            .map(|i| {
                let mut r = RequestRecord::new(1_795_737_700_000 + i, "large", "m");
                let mut s = SampleRecord::new(0, "stop");
                s.content = Some("a\tb\\c\n".repeat(100_000 + i as usize));
                r.samples.push(s);
                r
            })
            .collect();
        let weight: usize = large.iter().map(|r| r.samples[0].weight()).sum();
        assert!(weight > 2 * PIECE, "{weight} bytes");
        store.write_new(&large).await.unwrap();
        let query = crate::RecordsQuery::since(1_795_737_700_000).with_samples();
        assert_eq!(store.records(&query).await.unwrap(), large);
    }
}
