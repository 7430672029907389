//! A `chromedriver` of a test's own (Debian's `chromium-driver`), driving Debian's
//! `chromium`: on a free port of 127.0.0.1; killed when dropped. Nothing is downloaded.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `chromedriver`, and the Chromium it starts sessions of.
///
/// ```no_run
/// let Some(driver) = choicewise_test_support::ChromeDriver::start() else { return };
/// assert!(driver.url().starts_with("http://127.0.0.1:"));
/// assert!(driver.browser().ends_with("chromium"));
/// ```
pub struct ChromeDriver {
    child: Child,
    port: u16,
    browser: &'static str,
}

impl ChromeDriver {
    /// A driver started and listening, or `None` (the reason printed) where Chromium or its
    /// driver is not installed; under CI (`CI=true`) their absence panics, failing the test.
    pub fn start() -> Option<ChromeDriver> {
        let find = |paths: &[&'static str]| {
            paths
                .iter()
                .copied()
                .find(|p| std::path::Path::new(p).exists())
        };
        let (Some(driver), Some(browser)) = (
            find(&["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]),
            find(&["/usr/lib/chromium/chromium", "/usr/bin/chromium"]),
        ) else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "chromium or chromedriver is not installed, and CI=true: .ci/run installs them \
                     (apt-get install chromium chromium-driver)"
                );
            }
            eprintln!(
                "skipped: chromium or chromedriver is not installed (Debian: apt-get install \
                 chromium chromium-driver)"
            );
            return None;
        };
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port of 127.0.0.1");
            l.local_addr().expect("a bound address").port()
        };
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(ChromeDriver {
            child,
            port,
            browser,
        })
    }

    /// `http://127.0.0.1:PORT`: the WebDriver endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The Chromium binary its sessions run (`goog:chromeOptions.binary`).
    pub fn browser(&self) -> &'static str {
        self.browser
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
