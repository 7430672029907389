//! A scripted AWS Bedrock upstream of a test's own (scripts/bedrock_upstream.py): on a free
//! port of 127.0.0.1, each request's SigV4 signature recomputed by botocore's signer, each
//! answer in AWS's binary event stream as its script says; killed (its folder removed) when
//! dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The access key it expects (AWS's documentation's example).
pub const BEDROCK_ACCESS_KEY: &str = "AKIDEXAMPLE";
/// The secret it expects (AWS's documentation's example).
pub const BEDROCK_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

/// A running scripted Bedrock.
///
/// ```no_run
/// let script = serde_json::json!({"answers": [{"text": "Hello"}]});
/// let Some(bedrock) = choicewise_test_support::BedrockUpstream::start(&script, None) else { return };
/// assert!(bedrock.url().starts_with("http://127.0.0.1:"));
/// assert!(bedrock.requests().is_empty());
/// ```
pub struct BedrockUpstream {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl BedrockUpstream {
    /// One serving `script` (its `answers`: the script's docstring says how), expecting
    /// [`BEDROCK_ACCESS_KEY`], [`BEDROCK_SECRET`] and, when given, this session token; or
    /// `None` (the reason printed) without python3 and botocore. Under CI (`CI=true`) their
    /// absence panics, failing the test.
    pub fn start(script: &serde_json::Value, token: Option<&str>) -> Option<BedrockUpstream> {
        let botocore = Command::new("python3")
            .args(["-c", "import botocore"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !botocore {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("python3 with botocore is missing, and CI=true: .ci/run installs botocore");
            }
            eprintln!("skipped: python3 with botocore is not installed (pip install botocore)");
            return None;
        }
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "choicewise-bedrock-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let script_path = dir.join("script.json");
        std::fs::write(&script_path, script.to_string()).expect("the script written");
        let program =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bedrock_upstream.py");
        let mut command = Command::new("python3");
        command
            .arg(program)
            .arg("--script")
            .arg(&script_path)
            .arg("--record")
            .arg(dir.join("requests.jsonl"))
            .args(["--access-key-id", BEDROCK_ACCESS_KEY])
            .args(["--secret-access-key", BEDROCK_SECRET])
            .stdout(Stdio::piped());
        if let Some(token) = token {
            command.args(["--session-token", token]);
        }
        let mut child = command.spawn().expect("python3 started");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("its stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("its first line");
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            panic!("the scripted Bedrock did not start: {line:?}");
        };
        Some(BedrockUpstream {
            url: url.to_string(),
            child,
            dir,
        })
    }

    /// Its base URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The requests it received, in order, as it recorded them (`signature`: `ok` or why
    /// not; `path`, `model`, `headers` without secrets, `body`).
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a recorded request"))
            .collect()
    }
}

impl Drop for BedrockUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
