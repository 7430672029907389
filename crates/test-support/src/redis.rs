//! A `redis-server` of a test's own (Debian's `redis-server`): on a free port of 127.0.0.1,
//! in a temporary folder, without persistence; killed (and its folder removed) when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
///
/// ```no_run
/// let Some(redis) = choicewise_test_support::RedisServer::start() else { return };
/// assert!(redis.url().starts_with("redis://127.0.0.1:"));
/// ```
pub struct RedisServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl RedisServer {
    /// A server started and listening, or `None` (the reason printed) where `redis-server`
    /// is not installed; under CI (`CI=true`) its absence panics, failing the test.
    pub fn start() -> Option<RedisServer> {
        let Some(path) = [
            "/usr/bin/redis-server",
            "/usr/sbin/redis-server",
            "/usr/local/bin/redis-server",
        ]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists()) else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "redis-server is not installed, and CI=true: .ci/run installs it (apt-get install redis-server)"
                );
            }
            eprintln!(
                "skipped: redis-server is not installed (Debian: apt-get install redis-server)"
            );
            return None;
        };
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port of 127.0.0.1");
            l.local_addr().expect("a bound address").port()
        };
        let dir =
            std::env::temp_dir().join(format!("choicewise-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder for Redis");
        let child = Command::new(path)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(RedisServer { child, dir, port })
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
