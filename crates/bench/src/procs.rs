//! The processes of the gateway benchmark and soak: started, their address read from their
//! `listening on http://ADDR` line, their resident memory read from `/proc`, killed when
//! dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process serving HTTP on 127.0.0.1.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its stderr (and stdout), for the panics.
    pub log: PathBuf,
}

impl Server {
    /// Starts `cmd` with its output in `log`, and waits (up to `patience`) for it to say
    /// `listening on http://ADDR` (or, with `ready_url`, for that URL to answer 200: a
    /// process that prints no such line).
    pub fn start(
        name: &'static str,
        mut cmd: Command,
        log: &Path,
        ready: Ready,
        patience: Duration,
    ) -> Result<Server, String> {
        let file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let out = file.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(file))
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let mut server = Server {
            child,
            url: String::new(),
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + patience;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "{name} exited ({status}) before it listened; its log: {}",
                    tail(&server.log)
                ));
            }
            match &ready {
                Ready::Line => {
                    let text = std::fs::read_to_string(log).unwrap_or_default();
                    if let Some(url) = listening_url(&text) {
                        server.url = url;
                        return Ok(server);
                    }
                }
                Ready::Url(base, path) => {
                    if get_ok(&format!("{base}{path}")) {
                        server.url = base.clone();
                        return Ok(server);
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{name} did not listen within {patience:?}; its log: {}",
                    tail(&server.log)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory, KiB (with its child processes').
    pub fn rss_kib(&self) -> u64 {
        tree_rss_kib(self.pid())
    }

    /// How often its log says a thread panicked.
    pub fn panics(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("panicked")
            .count()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a server says it is ready.
pub enum Ready {
    /// A `listening on http://ADDR` line in its output.
    Line,
    /// This base URL and path answer 200.
    Url(String, String),
}

/// The address of a `listening on ADDR` line, once the whole line is written (a line read
/// while it is written would give part of its address).
fn listening_url(text: &str) -> Option<String> {
    let rest = text.split("listening on ").nth(1)?;
    let (line, _) = rest.split_once('\n')?;
    let url = line.split_whitespace().next()?;
    Some(url.trim_end_matches('/').to_string())
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let start = text.len().saturating_sub(1500);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_string()
}

/// A blocking GET on 127.0.0.1 answering 200 (readiness only).
fn get_ok(url: &str) -> bool {
    use std::io::{Read, Write};
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut tcp) = std::net::TcpStream::connect(host) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(2)));
    let head = format!("GET /{path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    if tcp.write_all(head.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(tcp.read(&mut buf), Ok(n) if n >= 12 && &buf[9..12] == b"200")
}

/// VmRSS of one process, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// VmRSS of a process and its descendants, KiB (LiteLLM's workers).
pub fn tree_rss_kib(pid: u32) -> u64 {
    let mut total = rss_kib(pid);
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
        total += tree_rss_kib(child);
    }
    total
}

/// A fresh directory for this run's configs and logs, under the system's temp directory.
pub fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("choicewise-bench-{name}-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// This harness's own binary (for the upstream and proxy processes).
pub fn harness() -> PathBuf {
    std::env::current_exe().expect("the harness's own path")
}

/// The `choicewise` binary: `given`, else next to this harness.
pub fn choicewise_bin(given: Option<&Path>) -> PathBuf {
    given.map_or_else(|| harness().with_file_name("choicewise"), Path::to_path_buf)
}

/// Starts the synthetic upstream (`close`: one request per connection).
pub fn upstream(dir: &Path, close: bool) -> Result<Server, String> {
    let mut cmd = Command::new(harness());
    cmd.args(["gateway-upstream", "--listen", "127.0.0.1:0"]);
    if close {
        cmd.arg("--close");
    }
    Server::start(
        "upstream",
        cmd,
        &dir.join("upstream.log"),
        Ready::Line,
        Duration::from_secs(10),
    )
}

/// Starts `choicewise serve` with `config` (TOML) in front of the upstream.
pub fn gateway(dir: &Path, bin: &Path, config: &str) -> Result<Server, String> {
    let path = dir.join("gateway.toml");
    std::fs::write(&path, config).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve").arg("--config").arg(&path);
    // The key a soak's configuration names for its upstreams: it must never reach a client.
    cmd.env("SOAK_UPSTREAM_KEY", SOAK_KEY);
    Server::start(
        "gateway",
        cmd,
        &dir.join("gateway.log"),
        Ready::Line,
        Duration::from_secs(10),
    )
}

/// The upstream key of the soak's gateways (`api_key_env = "SOAK_UPSTREAM_KEY"`): the soak
/// fails if any byte a client reads holds it.
pub const SOAK_KEY: &str = "sk-soak-upstream-secret-7f3a";

/// The soak's configuration: [`gateway_config`], its upstreams keyed with [`SOAK_KEY`], a
/// body deadline of 2 s, and model `responses` over the upstream's Responses-API answer of
/// about 200 KB.
pub fn soak_gateway_config(upstream: &str, idle_timeout_s: f64) -> String {
    let config = gateway_config(upstream, idle_timeout_s)
        .replace(
            "model = \"m\"\n",
            "model = \"m\"\napi_key_env = \"SOAK_UPSTREAM_KEY\"\n",
        )
        .replace("[limits]\n", "[limits]\nbody_read_timeout_s = 2\n");
    format!(
        "{config}\n[[models]]\nname = \"responses\"\n[[models.upstreams]]\napi = \"responses\"\n\
         base_url = \"{upstream}/responses/v1\"\nmodel = \"m\"\napi_key_env = \"SOAK_UPSTREAM_KEY\"\n"
    )
}

/// The gateway's configuration: model `native` (one request with n) and `fanout` (one
/// request per choice), both on the upstream at `upstream` (`http://HOST:PORT`).
/// The soak's resilience run: models `native` and `fanout` each over three upstreams, one
/// refusing connections (`down`), one failing 3 tries in 10 (the upstream's `/flaky` path),
/// and the upstream itself, with a retry budget of `budget_percent`.
pub fn resilient_gateway_config(
    upstream: &str,
    down: &str,
    idle_timeout_s: f64,
    budget_percent: f64,
) -> String {
    let upstreams = |n: &str| {
        [format!("{down}/v1"), format!("{upstream}/flaky/v1"), format!("{upstream}/v1")]
            .iter()
            .map(|url| {
                format!(
                    "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"m\"\nn = \"{n}\"\n"
                )
            })
            .collect::<String>()
    };
    format!(
        "listen = \"127.0.0.1:0\"\nshutdown_grace_s = 1\n\n[limits]\nmax_concurrent_requests = 4096\n\
         upstream_idle_timeout_s = {idle_timeout_s}\nretry_budget_percent = {budget_percent}\n\n\
         [[models]]\nname = \"native\"\n[models.retry]\nbackoff_ms = 20\n{}\n\
         [[models]]\nname = \"fanout\"\n[models.retry]\nbackoff_ms = 20\n{}",
        upstreams("native"),
        upstreams("fan-out")
    )
}

pub fn gateway_config(upstream: &str, idle_timeout_s: f64) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nshutdown_grace_s = 1\n\n[limits]\nmax_concurrent_requests = 4096\n\
         upstream_idle_timeout_s = {idle_timeout_s}\n\n\
         [[models]]\nname = \"native\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{upstream}/v1\"\nmodel = \"m\"\nn = \"native\"\n\n\
         [[models]]\nname = \"fanout\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{upstream}/v1\"\nmodel = \"m\"\nn = \"fan-out\"\n"
    )
}

#[cfg(test)]
mod tests {
    use super::listening_url;

    #[test]
    fn an_address_is_read_only_once_its_line_is_whole() {
        assert_eq!(listening_url(""), None);
        assert_eq!(listening_url("listening on http:"), None);
        assert_eq!(listening_url("listening on http://127.0.0.1:80"), None);
        assert_eq!(
            listening_url("starting\nlistening on http://127.0.0.1:8080/ (pid 7)\nmore"),
            Some("http://127.0.0.1:8080".to_string())
        );
    }
}
