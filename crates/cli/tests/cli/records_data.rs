//! What the records tests write: a folder of a test's own and recorded requests. Shared by
//! the CLI's test binary and `from_records_memory`, which needs one of its own.

use std::path::PathBuf;

use choicewise_records::RequestRecord;

/// A folder of this test's own.
pub fn folder(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("choicewise-records-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// 2026-11-27T00:00:00Z.
pub const T0: i64 = 1_795_737_600_000;

/// A request `id` of `key` for model `m` at `at_ms`, answered, with `samples` samples that
/// each say `text`.
pub fn recorded(id: &str, key: &str, at_ms: i64, samples: usize, text: &str) -> RequestRecord {
    let mut r = RequestRecord::new(at_ms, format!("req-{id}"), "m");
    r.id = id.into();
    r.key = key.into();
    r.api = "chat".into();
    r.status = 200;
    r.ended = "complete".into();
    (r.prompt_tokens, r.completion_tokens) = (10, 5);
    r.cost_usd = Some(0.25);
    for i in 0..samples {
        let mut s = choicewise_records::SampleRecord::new(i as i64, "stop");
        s.content = Some(text.to_string());
        r.samples.push(s);
    }
    r
}
