//! The text log's fields and time, written as `tracing-subscriber`'s own format writes them,
//! for less: every request's line has a dozen fields, most of them numbers, and its time. The
//! subscriber's default formats each field through `fmt::Debug` and the time through a
//! calendar computed again for every line; these write a number's digits and a plain
//! string's bytes at once, a value shown with `%` or `?` after its name written at once,
//! and the date once a second. Everything else (the message, a string that needs escapes,
//! colours) goes through the subscriber's own formatter, so a line reads the same either
//! way.

use std::cell::RefCell;
use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultFields, DefaultVisitor, Writer};
use tracing_subscriber::fmt::time::FormatTime;

/// The fields of a text log line: the same text as `tracing-subscriber`'s
/// [`DefaultFields`], numbers, booleans and plain strings written without `fmt::Debug`.
///
/// ```
/// use choicewise_gateway::{LogFields, LogTime};
/// let subscriber = tracing_subscriber::fmt()
///     .fmt_fields(LogFields)
///     .with_timer(LogTime)
///     .with_ansi(false)
///     .finish();
/// tracing::subscriber::with_default(subscriber, || {
///     tracing::info!(samples = 3u64, model = "m", "request");
/// });
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct LogFields;

impl<'writer> FormatFields<'writer> for LogFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        if writer.has_ansi_escapes() {
            // Coloured names: the subscriber's own.
            return DefaultFields::new().format_fields(writer, fields);
        }
        let mut visitor = Fields {
            writer,
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes fields as [`DefaultVisitor`] does, without ANSI colours: `name=value`, separated by
/// one space, the message alone.
struct Fields<'writer> {
    writer: Writer<'writer>,
    is_empty: bool,
    result: fmt::Result,
}

impl Fields<'_> {
    /// `name=` after the separating space, where the default's plain text is written as it
    /// is; `None` for a field the default writes otherwise (the message, a `log.` field of
    /// a `log` record, which it may skip).
    fn plain_name<'f>(&self, field: &'f Field) -> Option<&'f str> {
        let name = field.name();
        if self.result.is_err() || name == "message" || name.starts_with("log.") {
            return None;
        }
        Some(name.strip_prefix("r#").unwrap_or(name))
    }

    fn write(&mut self, name: &str, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        let pad = !std::mem::replace(&mut self.is_empty, false);
        self.result = (|| {
            if pad {
                self.writer.write_char(' ')?;
            }
            self.writer.write_str(name)?;
            self.writer.write_char('=')?;
            value(&mut self.writer)
        })();
    }

    /// A field the default formatter writes, in its place in the line.
    fn delegate(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        self.result = visitor.finish();
        // Every field it is given is written: this build's subscriber has no `log` bridge
        // (its `tracing-log` feature is off), the one case where it skips one.
        self.is_empty = false;
    }

    fn number(&mut self, field: &Field, digits: &str) {
        match self.plain_name(field) {
            Some(name) => self.write(name, |w| w.write_str(digits)),
            None => self.delegate(|v| v.record_debug(field, &format_args!("{digits}"))),
        }
    }
}

impl Visit for Fields<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, itoa::Buffer::new().format(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, itoa::Buffer::new().format(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.number(field, if value { "true" } else { "false" });
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        // `fmt::Debug` of a string of printable ASCII without quotes or backslashes is the
        // string in quotes.
        let plain = value
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        match self.plain_name(field).filter(|_| plain) {
            Some(name) => self.write(name, |w| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            }),
            None => self.delegate(|v| v.record_str(field, value)),
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(|v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // A value shown with `%` or `?`: `name=` written here, the value as the default
        // writes it (`fmt::Debug`, which `%` makes its `Display`).
        match self.plain_name(field) {
            Some(name) => self.write(name, |w| write!(w, "{value:?}")),
            None => self.delegate(|v| v.record_debug(field, value)),
        }
    }
}

/// The time of a log line, as `tracing-subscriber`'s default
/// ([`SystemTime`](tracing_subscriber::fmt::time::SystemTime)) writes it
/// (`2026-11-29T22:35:00.123456Z`, UTC), the date and time to the second made once a
/// second by each thread that logs.
///
/// ```
/// use tracing_subscriber::fmt::{format::Writer, time::FormatTime};
/// let mut line = String::new();
/// choicewise_gateway::LogTime.format_time(&mut Writer::new(&mut line)).unwrap();
/// assert_eq!(line.len(), "2026-11-29T22:35:00.123456Z".len());
/// assert!(line.ends_with('Z'));
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct LogTime;

/// The second a thread last wrote, and its text up to the `.` before the microseconds.
struct Second {
    at: i64,
    text: String,
}

thread_local! {
    static SECOND: RefCell<Second> = const {
        RefCell::new(Second {
            at: i64::MIN,
            text: String::new(),
        })
    };
}

impl FormatTime for LogTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let (secs, micros) =
            match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
                Ok(since) => (since.as_secs() as i64, since.subsec_micros()),
                // Before 1970: the subscriber's own.
                Err(_) => return tracing_subscriber::fmt::time::SystemTime.format_time(w),
            };
        SECOND.with(|second| {
            let mut second = second.borrow_mut();
            if second.at != secs {
                second.text.clear();
                write_second(&mut second.text, secs)?;
                second.at = secs;
            }
            w.write_str(&second.text)?;
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(micros);
            for _ in digits.len()..6 {
                w.write_char('0')?;
            }
            w.write_str(digits)?;
            w.write_char('Z')
        })
    }
}

/// `secs` after 1970 as `YYYY-MM-DDTHH:MM:SS.`, UTC (the proleptic Gregorian calendar, as the
/// subscriber's own: a year past 9999 as `+YYYYY`).
fn write_second(out: &mut String, secs: i64) -> fmt::Result {
    let (days, in_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    if year > 9999 {
        write!(out, "+{year}")?;
    } else {
        write!(out, "{year:04}")?;
    }
    let (hour, minute, second) = (in_day / 3600, in_day % 3600 / 60, in_day % 60);
    write!(
        out,
        "-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}."
    )
}

/// The civil date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_log::Lines;

    /// Every kind of field, in a line's usual places and unusual ones.
    fn log_all() {
        let error = std::io::Error::other("disk full");
        let shown = "req-1";
        tracing::info!(
            request_id = %shown,
            key = "team-a",
            model = ?"m",
            samples = 3u32,
            tries = 1usize,
            prompt_tokens = 12u64,
            delta = -4i64,
            estimated = false,
            cut = true,
            ratio = 0.5f64,
            big = u128::MAX,
            quoted = "say \"hi\"",
            control = "a\tb\u{1b}[31m",
            unicode = "café ☕",
            empty = "",
            r#type = "chat",
            error = &error as &(dyn std::error::Error + 'static),
            "request"
        );
        tracing::info!(samples = 3u64, "numbers first, then the message");
        tracing::warn!(samples = 3u64);
        tracing::info!(first = "plain", second = 2u64);
        tracing::info!("a message alone, with \"quotes\" and \u{1b}[1m escapes");
        let span = tracing::info_span!("answer", model = "m", n = 4u64);
        let _entered = span.enter();
        tracing::info!(inside = 1u64, label = "x", "in a span");
    }

    fn lines(fields: bool) -> String {
        let out = Lines::default();
        let writer = out.clone();
        let builder = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time();
        let subscriber: Box<dyn tracing::Subscriber + Send + Sync> = match fields {
            true => Box::new(builder.fmt_fields(LogFields).finish()),
            false => Box::new(builder.finish()),
        };
        tracing::subscriber::with_default(subscriber, log_all);
        out.text()
    }

    #[test]
    fn the_fields_read_as_the_subscribers_own() {
        let (ours, theirs) = (lines(true), lines(false));
        assert_eq!(ours.lines().count(), 6, "{ours}");
        assert!(
            ours.contains(" samples=3 tries=1 prompt_tokens=12 delta=-4"),
            "{ours}"
        );
        assert!(ours.contains(r#" key="team-a" "#), "{ours}");
        assert!(ours.contains(r#" type="chat" "#), "{ours}");
        assert_eq!(ours, theirs);
    }

    #[test]
    fn the_time_reads_as_the_subscribers_own() {
        let at = |secs: i64| {
            let mut text = String::new();
            write_second(&mut text, secs).unwrap();
            text
        };
        assert_eq!(at(0), "1970-01-01T00:00:00.");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00.");
        assert_eq!(at(951_868_799), "2000-02-29T23:59:59.");
        assert_eq!(at(1_796_078_100), "2026-11-30T22:35:00.");
        assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00.");
        assert_eq!(at(253_402_300_799), "9999-12-31T23:59:59.");
        assert_eq!(at(253_402_300_800), "+10000-01-01T00:00:00.");
        // Beside the subscriber's own, read in the same second.
        let mut same = 0;
        for _ in 0..100 {
            let (mut ours, mut theirs) = (String::new(), String::new());
            LogTime.format_time(&mut Writer::new(&mut ours)).unwrap();
            let their_time = tracing_subscriber::fmt::time::SystemTime;
            their_time
                .format_time(&mut Writer::new(&mut theirs))
                .unwrap();
            assert_eq!(ours.len(), theirs.len(), "{ours} {theirs}");
            if ours[..20] == theirs[..20] {
                same += 1;
            }
        }
        assert!(same >= 98, "{same} of 100 read the same second");
    }
}
