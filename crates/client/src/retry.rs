//! The waits of the retry policy (see [the crate's documentation](crate#retries)): the
//! backoff, and what a response asks for.

use std::time::{Duration, SystemTime};

use http::header::{HeaderMap, RETRY_AFTER};

/// The first backoff, doubled at each further retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// The wait before retry number `retry + 1`: 0.5 s, 1 s, 2 s, ...
pub(crate) fn backoff(retry: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1u32 << retry.min(20))
}

/// The wait a response asks for: `retry-after-ms` (OpenAI), else `Retry-After` in seconds or
/// as an HTTP date (a date in the past is no wait).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    /// A year: only keeps the conversion in range (a wait past the client's cap is never
    /// waited, only reported).
    const FAR: f64 = 365.0 * 86_400.0;
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let seconds = |s: f64| (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(FAR)));
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && let Some(wait) = seconds(ms / 1000.0)
    {
        return Some(wait);
    }
    let value = text(RETRY_AFTER.as_str())?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use http::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let wait = |pairs: &[(&str, &str)]| retry_after(&headers(pairs), now);
        assert_eq!(wait(&[("retry-after", "3")]), Some(Duration::from_secs(3)));
        assert_eq!(
            wait(&[("retry-after", "0.25")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            wait(&[("retry-after", "Wed, 21 Oct 2015 07:28:05 GMT")]),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            wait(&[("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT")]),
            Some(Duration::ZERO)
        );
        assert_eq!(
            wait(&[("retry-after-ms", "1500"), ("retry-after", "9")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(wait(&[("retry-after", "-1")]), None);
        assert_eq!(wait(&[("retry-after", "soon")]), None);
        assert_eq!(
            wait(&[("retry-after", "1e30")]),
            Some(Duration::from_secs(365 * 86_400))
        );
        assert_eq!(wait(&[]), None);
    }

    #[test]
    fn backoff_doubles() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert!(backoff(u32::MAX) > Duration::from_secs(3600));
    }
}
