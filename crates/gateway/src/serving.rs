//! Serving a gateway: [`serve`] from a configuration, [`Gateway::serve_on`] on a listener,
//! and the shutdown they share.

use std::time::Duration;

use tokio::sync::watch;

use crate::config::{Config, ConfigError};

use crate::listen;
use crate::state::Gateway;

/// Serves a gateway until Ctrl-C or SIGTERM: checks the configuration as [`Config::check`]
/// does (the listen address, then the gateway made: keys, clients, picks, traces) and logs its
/// [`warnings`](Config::warnings); with `[state] redis_url`, asks Redis once (an unreachable
/// one is said at once, and with `on_state_error = "refuse"` is an error: the gateway does not
/// start); listens on `listen` (else the configuration's),
/// saying `listening on http://ADDR` on stderr once it accepts connections, with the
/// connection bounds of `[limits]` ([`Gateway::serve_on`]). It first raises the process's
/// soft limit of open files to its hard limit, warning when `max_connections` exceeds it.
///
/// On the signal it stops accepting connections and lets the open answers finish for up to
/// `shutdown_grace_s`, saying on stderr that it shuts down and how many requests it waits
/// for; then it ends the rest ([`Gateway::close`]: their unfinished choices
/// end with `finish_reason: "error"`), closes every upstream and returns `Ok`. A client that
/// does not read its answer's end is not waited for more than [`CLOSE_WAIT`] after that.
/// Then the records of every request answered are written to `[records]`' database, or to
/// its spool while the database is away. Last, it sends the last spans when `[telemetry]` names an endpoint
/// ([`Gateway::shutdown_traces`]: a few seconds at most) and says `stopped`.
pub async fn serve(config: &Config, listen: Option<&str>) -> Result<(), ServeError> {
    serve_reloading(config, listen, None).await
}

/// As [`serve`], the configuration read from the file `path`; on `SIGHUP` (Unix) the file
/// is read again and its keys applied without a restart ([`Gateway::reload`]), each
/// reload said in the log: what changed, what needs a restart, or why the file was not
/// taken (the gateway goes on as it was).
pub async fn serve_file(path: &std::path::Path, listen: Option<&str>) -> Result<(), ServeError> {
    let read = |path: &std::path::Path| -> Result<Config, ServeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ServeError::Io(format!("cannot read {}: {e}", path.display())))?;
        Config::from_toml(&text)
            .map_err(|e| ServeError::Config(ConfigError(format!("{}: {e}", path.display()))))
    };
    let config = read(path)?;
    let path = path.to_path_buf();
    let source: Reread = Box::new(move || read(&path).map_err(|e| e.to_string()));
    serve_reloading(&config, listen, Some(source)).await
}

/// Reads the configuration again, for a reload.
type Reread = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

async fn serve_reloading(
    config: &Config,
    listen: Option<&str>,
    reread: Option<Reread>,
) -> Result<(), ServeError> {
    let addr = config.listen_addr(listen).map_err(ServeError::Config)?;
    let gateway = Gateway::new(config).map_err(ServeError::Config)?;
    // Settings that can never take effect (`choicewise serve --check` prints them too).
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    gateway.probe_state().await?;
    listen::raise_fd_limit(config.limits.max_connections);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Io(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::Io(e.to_string()))?;
    say(format_args!("listening on http://{local}"));
    let console = serve_console(&gateway, local).await?;
    check_v1(&gateway);
    if let Some(reread) = reread {
        reload_on_hangup(gateway.clone(), config.clone(), reread);
    }
    let served = gateway.serve_on(listener, shutdown_signal()).await;
    if let Some(console) = console {
        console.abort();
    }
    // The records of every request answered: written, or spooled (at most a few seconds).
    let _ = tokio::time::timeout(RECORDS_AT_SHUTDOWN, gateway.flush_records()).await;
    gateway.shutdown_traces().await;
    say(format_args!("stopped"));
    served
}

/// The console, said where it is: on the gateway's listener (at `local`), or served on a
/// listener of its own (`[console] listen`), whose task is returned.
async fn serve_console(
    gateway: &Gateway,
    local: std::net::SocketAddr,
) -> Result<Option<tokio::task::JoinHandle<()>>, ServeError> {
    let Some(console) = &gateway.inner.console else {
        return Ok(None);
    };
    let Some(at) = &console.listen else {
        say(format_args!("the console: http://{local}/console"));
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(at.as_str())
        .await
        .map_err(|e| ServeError::Io(format!("cannot listen on {at} ([console] listen): {e}")))?;
    let own = listener
        .local_addr()
        .map_err(|e| ServeError::Io(e.to_string()))?;
    say(format_args!("the console: http://{own}/console"));
    let router = gateway.console_router();
    Ok(Some(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!("the console's listener stopped: {e}");
        }
    })))
}

impl Gateway {
    /// At start, with `[state] redis_url`: whether Redis answers within its deadline (at
    /// least 1 s), said in the log either way. When it does not, `on_state_error = "refuse"`
    /// keeps the gateway from starting (an error naming the URL, without its password), and
    /// `"allow"` starts it, its limits uncounted until Redis answers (said then).
    pub(crate) async fn probe_state(&self) -> Result<(), ServeError> {
        let quota = &self.inner.quota;
        match quota.probe().await {
            Ok(true) => {
                (quota.refuse_cluster().await).map_err(|e| ServeError::Config(ConfigError(e)))?;
                tracing::info!(store = %quota.shown(), "the limits' counts are kept in Redis");
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => match quota.policy() {
                crate::config::OnStateError::Refuse => Err(ServeError::Config(ConfigError(
                    format!("{e}; not starting, as on_state_error = \"refuse\" says"),
                ))),
                crate::config::OnStateError::Allow => {
                    tracing::warn!(
                        "{e}; starting anyway, as on_state_error = \"allow\" says: requests are \
                         served without their limits counted until Redis answers"
                    );
                    Ok(())
                }
            },
        }
    }

    /// Serves [`router`](Self::router) on `listener` until `signal` resolves, then shuts
    /// down as [`serve`] does (no new connections; open answers get `shutdown_grace_s`,
    /// then [`close`](Self::close) ends them). Each connection is bounded as `[limits]`
    /// says: `max_connections`, `max_header_bytes` (431), `header_read_timeout_s`,
    /// `idle_connection_timeout_s` and `client_stall_timeout_s` (docs/reliability.md).
    /// Nagle is off: a chunk is written as soon as it is made.
    ///
    /// ```no_run
    /// # use choicewise_gateway::{Config, Gateway};
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml(
    /// #     "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
    /// # ).unwrap();
    /// let gateway = Gateway::new(&config)?;
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8787").await?;
    /// gateway.serve_on(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn serve_on(
        &self,
        listener: tokio::net::TcpListener,
        signal: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        if let Ok(addr) = listener.local_addr() {
            let _ = self.inner.admission.listening.set(addr);
        }
        let grace = self.inner.grace;
        let (signalled_tx, mut signalled) = watch::channel(false);
        let server = listen::accept_until(self.clone(), listener, async move {
            signal.await;
            signalled_tx.send_replace(true);
        });
        let mut server = std::pin::pin!(server);
        // The server ends only after the signal: at once when nothing is open.
        let ended = tokio::select! {
            () = &mut server => true,
            _ = signalled.wait_for(|s| *s) => false,
        };
        let open = if ended { 0 } else { self.open_requests() };
        if open == 0 {
            say(format_args!(
                "shutting down: no new connections, no open request"
            ));
        } else {
            say(format_args!(
                "shutting down: no new connections; waiting up to {}s for {}",
                grace.as_secs_f64(),
                requests(open)
            ));
        }
        if ended || tokio::time::timeout(grace, &mut server).await.is_ok() {
            return Ok(());
        }
        say(format_args!(
            "grace period over: ending {} now",
            requests(self.open_requests())
        ));
        self.close();
        // Clients that do not read their answers' ends: their connections go with the
        // process.
        let _ = tokio::time::timeout(CLOSE_WAIT, &mut server).await;
        Ok(())
    }

    /// The requests being served: each holds one of the `max_concurrent_requests` slots
    /// until its answer's last byte.
    fn open_requests(&self) -> usize {
        (self.inner.limits.max_concurrent_requests)
            .saturating_sub(self.inner.admission.slots.available_permits())
    }
}

/// `1 open request`, `2 open requests`.
fn requests(count: usize) -> String {
    let s = if count == 1 { "" } else { "s" };
    format!("{count} open request{s}")
}

/// Loads the token-count tables of the default encoding and of `models`' upstream models'
/// ones. Every answer's accounting counts its samples' tokens where no upstream reported them
/// (a cancelled sample's are always estimated): loaded when the gateway is made rather than
/// by the first request, which would wait for them, so that the memory they take is there
/// from the start.
pub(crate) fn preload_encodings(models: &crate::upstream::open::Models) {
    let mut encodings = vec![choicewise_usage::DEFAULT_ENCODING];
    for model in models.values() {
        for route in &model.routes {
            if !encodings.contains(&route.encoding) {
                encodings.push(route.encoding);
            }
        }
    }
    encodings.into_iter().for_each(choicewise_usage::preload);
}

/// How long [`serve`] waits at shutdown for `[records]`' queue to be written or spooled.
const RECORDS_AT_SHUTDOWN: Duration = Duration::from_secs(10);

/// How long [`serve`] waits, after its grace period, for the ended answers to reach their
/// clients.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Ctrl-C, or SIGTERM on Unix.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// On each `SIGHUP`, the configuration read again and applied ([`Gateway::reload`]), said in
/// the log. Nothing where there are no such signals.
fn reload_on_hangup(gateway: Gateway, mut current: Config, reread: Reread) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!("SIGHUP cannot be caught here: a reload needs a restart");
            return;
        };
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                let next = match reread() {
                    Ok(next) => next,
                    Err(e) => {
                        tracing::error!("reload refused, the gateway goes on as it was: {e}");
                        continue;
                    }
                };
                match gateway.reload(&next) {
                    Ok(changes) => {
                        let restart = restart_sections(&current, &next);
                        let said = match changes.is_empty() {
                            true => "no key changed".to_string(),
                            false => changes.join("; "),
                        };
                        match restart.is_empty() {
                            true => tracing::info!("reloaded: {said}"),
                            false => tracing::warn!(
                                "reloaded: {said}; changed, applied only by a restart: {}",
                                restart.join(", ")
                            ),
                        }
                        current = next;
                    }
                    Err(e) => {
                        tracing::error!("reload refused, the gateway goes on as it was: {e}");
                    }
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = (gateway, current, reread);
}

/// The sections of the configuration that differ between `old` and `new` and that a reload
/// does not apply (all but `[auth]`).
fn restart_sections(old: &Config, new: &Config) -> Vec<&'static str> {
    let differ =
        |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") != format!("{b:?}");
    let mut sections = Vec::new();
    let pairs: [(&'static str, &dyn std::fmt::Debug, &dyn std::fmt::Debug); 9] = [
        ("listen", &old.listen, &new.listen),
        (
            "allowed_origins",
            &old.allowed_origins,
            &new.allowed_origins,
        ),
        ("[limits]", &old.limits, &new.limits),
        (
            "shutdown_grace_s",
            &old.shutdown_grace_s,
            &new.shutdown_grace_s,
        ),
        ("[telemetry]", &old.telemetry, &new.telemetry),
        ("[state]", &old.state, &new.state),
        ("[records]", &old.records, &new.records),
        ("[admin]", &old.admin, &new.admin),
        ("[[models]]", &old.models, &new.models),
    ];
    for (name, a, b) in pairs {
        if differ(a, b) {
            sections.push(name);
        }
    }
    sections
}

/// Why [`serve`] could not serve.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration is wrong (or names an unset variable).
    Config(ConfigError),
    /// Listening or serving failed.
    Io(String),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Config(e) => e.fmt(f),
            ServeError::Io(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ServeError {}

/// For each chat upstream whose base URL lacks `/v1`: when its model list answers 404 there
/// and not at `/v1`, a warning naming the fix (a local server's usual slip). In the
/// background: serving does not wait for it.
fn check_v1(gateway: &Gateway) {
    for (client, alt) in gateway.inner.v1_checks.clone() {
        tokio::spawn(async move {
            let Err(e) = client.models().await else {
                return;
            };
            if e.status() == Some(404) && alt.models().await.is_ok() {
                tracing::warn!(
                    upstream = %client.host(),
                    "the upstream's base_url lacks /v1: its models answer 404 there and not at /v1; add /v1 to base_url"
                );
            }
        });
    }
}

/// A line on stderr, for the operator, in order with the log's lines
/// ([`crate::stderr::line`]): lost if stderr cannot be written (its reader gone), where
/// `eprintln!` would panic.
fn say(line: std::fmt::Arguments<'_>) {
    crate::stderr::line(line);
}
