//! A PostgreSQL server of a test's own (Debian's `postgresql`): `initdb` into a temporary
//! folder, listening on a free port of 127.0.0.1 only, trusted local connections; stopped
//! (and its folder removed) when dropped. As root, the server runs as the `postgres` user,
//! since PostgreSQL refuses to run as root.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running (or stopped, to be started again) PostgreSQL server.
///
/// ```no_run
/// let Some(pg) = choicewise_test_support::PostgresServer::start() else { return };
/// assert!(pg.url().starts_with("postgres://postgres@127.0.0.1:"));
/// ```
pub struct PostgresServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    running: bool,
}

/// The folder of PostgreSQL's server programs (`initdb`, `pg_ctl`), newest version first.
fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").is_file() && p.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program args...`, as the `postgres` user when this process is root.
fn as_server_user(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// A port of 127.0.0.1 free now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port of 127.0.0.1");
    l.local_addr().expect("a bound address").port()
}

/// `initdb` into `data`: trusted local connections, user `postgres`, UTF-8.
fn initdb(bin: &Path, data: &Path) -> std::process::Output {
    as_server_user(&bin.join("initdb"))
        .args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
            "-D",
        ])
        .arg(data)
        .output()
        .expect("initdb runs")
}

/// A cluster `initdb` made once for this machine and this version of PostgreSQL (in the
/// temporary folder, named by the version's folder), which every server of a test copies
/// (`cp -a`, a third of `initdb`'s time: docs/benchmarks.md, "Build") instead of running
/// `initdb` again. It is made under a name of this process's and renamed into place whole,
/// so a copy never meets one half made.
fn template(bin: &Path) -> Option<PathBuf> {
    static TEMPLATE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let version = bin.parent()?.file_name()?.to_string_lossy().into_owned();
            let root = std::env::temp_dir();
            let name = format!("choicewise-postgres-template-{version}");
            let ready = root.join(&name);
            if ready.join("data").join("PG_VERSION").is_file() {
                return Some(ready);
            }
            let making = root.join(format!("{name}.{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&making);
            std::fs::create_dir_all(&making).ok()?;
            owned_by_server_user(&making);
            let made = initdb(bin, &making.join("data"));
            // Another process may have put its own in place first: either is whole.
            let placed = made.status.success() && std::fs::rename(&making, &ready).is_ok();
            let _ = std::fs::remove_dir_all(&making);
            (placed || ready.join("data").join("PG_VERSION").is_file()).then_some(ready)
        })
        .clone()
}

/// As root, `dir` is given to the `postgres` user, as whom the server runs.
fn owned_by_server_user(dir: &Path) {
    if is_root() {
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .status()
            .expect("chown");
        assert!(chown.success(), "chown of {}", dir.display());
    }
}

/// A new cluster in `data`: the machine's template copied, or `initdb` run where there is none
/// (or the copy failed).
fn init_data(bin: &Path, data: &Path) {
    if let Some(template) = template(bin) {
        let copied = Command::new("cp")
            .arg("-a")
            .arg(template.join("data"))
            .arg(data)
            .status()
            .is_ok_and(|s| s.success());
        if copied {
            return;
        }
        let _ = std::fs::remove_dir_all(data);
    }
    let init = initdb(bin, data);
    assert!(
        init.status.success(),
        "initdb: {}",
        String::from_utf8_lossy(&init.stderr)
    );
}

impl PostgresServer {
    /// A server started, or `None` (the reason printed) where PostgreSQL is not installed;
    /// under CI (`CI=true`) its absence panics, failing the test.
    pub fn start() -> Option<PostgresServer> {
        let Some(bin) = bin_dir() else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "PostgreSQL is not installed, and CI=true: .ci/run installs it (apt-get install postgresql)"
                );
            }
            eprintln!("skipped: PostgreSQL is not installed (Debian: apt-get install postgresql)");
            return None;
        };
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("choicewise-postgres-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a folder for PostgreSQL");
        owned_by_server_user(&dir);
        init_data(&bin, &dir.join("data"));
        let mut server = PostgresServer {
            bin,
            dir,
            port,
            running: false,
        };
        server.start_again();
        Some(server)
    }

    /// Starts the server again after [`stop`](Self::stop), on the same port and data.
    pub fn start_again(&mut self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let started = as_server_user(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-l"])
            .arg(self.dir.join("log"))
            .args(["-o", &options, "-w", "-t", "60", "start"])
            .output()
            .expect("pg_ctl runs");
        assert!(
            started.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&started.stderr),
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
        self.running = true;
    }

    /// Stops the server at once (`-m immediate`: as a crash would, connections cut).
    pub fn stop(&mut self) {
        if !self.running {
            return;
        }
        // A paused server takes no signal but SIGKILL: resumed first.
        self.pause(false);
        let _ = as_server_user(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        self.running = false;
    }

    /// Pauses (`SIGSTOP`) or resumes (`SIGCONT`) the server and every process it started,
    /// as a machine that stalls would: connections stay open and nothing answers.
    ///
    /// ```no_run
    /// let mut pg = choicewise_test_support::PostgresServer::start().unwrap();
    /// pg.pause(true);
    /// pg.pause(false);
    /// ```
    pub fn pause(&mut self, paused: bool) {
        let pid = std::fs::read_to_string(self.dir.join("data").join("postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<u32>().ok());
        let Some(pid) = pid else {
            return;
        };
        let signal = if paused { "-STOP" } else { "-CONT" };
        let _ = std::process::Command::new("pkill")
            .args([signal, "-P", &pid.to_string()])
            .status();
        let _ = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status();
    }

    /// The URL of its `postgres` database, as the `postgres` user.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
