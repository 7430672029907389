//! The console in a real browser: Debian's Chromium, driven over WebDriver by Debian's
//! chromedriver (nothing downloaded), against a `choicewise serve` process whose console has
//! a listener of its own. Signed in through the form; every page loads with no console
//! error (a Content-Security-Policy violation is one) and no dialog opened; a hostile
//! upstream's `<script>` and a key named `<img …onerror=…>` are shown as text, never run; a
//! key made from the console's form is accepted by the gateway. Each page's screenshot is
//! written to `target/console-screenshots/` (docs/img keeps copies). Skipped without
//! Chromium, failed under `CI=true`.
//!
//! The WebDriver calls are a few plain HTTP requests (reqwest, already here): a WebDriver
//! crate would build a second copy of several shared dependencies with other features
//! (scripts/shared-build.sh).

use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use choicewise_test_support::{ChromeDriver, within};
use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const HOSTILE: &str = "<script>alert(1)</script> <img src=x onerror=alert(2)>";
const LIMIT: Duration = Duration::from_secs(30);

/// A WebDriver session of Chromium.
struct Browser {
    http: reqwest::Client,
    session: String,
}

impl Browser {
    async fn start(driver: &ChromeDriver) -> Browser {
        let http = reqwest::Client::new();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": driver.browser(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900",
                         "--no-first-run", "--disable-extensions"],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let r: Value = http
            .post(format!("{}/session", driver.url()))
            .json(&capabilities)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"));
        Browser {
            http,
            session: format!("{}/session/{session}", driver.url()),
        }
    }

    /// A WebDriver command: its `value`, or its error.
    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Result<Value, Value> {
        let mut r = self
            .http
            .request(method.clone(), format!("{}{path}", self.session));
        if method == reqwest::Method::POST {
            r = r.json(&body);
        }
        let r = r.send().await.unwrap();
        let ok = r.status().is_success();
        let v: Value = r.json().await.unwrap();
        match ok {
            true => Ok(v["value"].clone()),
            false => Err(v["value"].clone()),
        }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        (self.call(reqwest::Method::POST, path, body).await)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    async fn get(&self, path: &str) -> Result<Value, Value> {
        self.call(reqwest::Method::GET, path, Value::Null).await
    }

    async fn open(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    async fn script(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
            .await
    }

    async fn element(&self, css: &str) -> String {
        let v = self
            .post("/element", json!({"using": "css selector", "value": css}))
            .await;
        let (_, id) = v.as_object().unwrap().iter().next().unwrap();
        id.as_str().unwrap().to_string()
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.element(css).await;
        self.post(&format!("/element/{e}/value"), json!({"text": text}))
            .await;
    }

    async fn click(&self, css: &str) {
        let e = self.element(css).await;
        self.post(&format!("/element/{e}/click"), json!({})).await;
    }

    /// The last page's load: from its navigation's start to its load event, in ms.
    async fn load_ms(&self) -> Value {
        self.script(
            "const t = performance.getEntriesByType('navigation')[0]; \
             return t.loadEventEnd - t.startTime;",
        )
        .await
    }

    /// The page's text as a reader sees it.
    async fn text(&self) -> String {
        self.script("return document.body.innerText;")
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The page's text once it holds `needle` (a form's answer may still be loading when
    /// its click returns).
    async fn text_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let text = self.text().await;
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the page: {text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Signs in at `console` with the operator's key; the sign-in page's own 401 is its
    /// only console entry.
    async fn sign_in(&self, console: &str) {
        self.open(console).await;
        self.type_into("#key", "sk-operator").await;
        self.click("button[type=submit]").await;
        self.text_with("The last 24 hours").await;
        let (errors, log) = self.console_errors().await;
        assert!(errors.iter().all(|e| e.contains("401")), "{log}");
    }

    /// The browser's console entries since the last call: the errors (a CSP violation is
    /// one), and every entry for the failure message.
    async fn console_errors(&self) -> (Vec<String>, Value) {
        let log = self.post("/se/log", json!({"type": "browser"})).await;
        let errors = (log.as_array().unwrap().iter())
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect();
        (errors, log)
    }

    /// Whether a dialog (an `alert` a hostile string would open) is open.
    async fn dialog_open(&self) -> bool {
        self.get("/alert/text").await.is_ok()
    }

    async fn screenshot(&self, name: &str) {
        let png = self.get("/screenshot").await.unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/console-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("console-{name}.png")), png).unwrap();
    }

    async fn end(self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}

async fn chat(base: &str, key: &str, id: &str) -> u16 {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-request-id", id)
        .json(&json!({"model": "small", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let _ = r.bytes().await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_chromium_runs_no_hostile_string_and_makes_a_working_key() {
    let Some(driver) = ChromeDriver::start() else {
        return;
    };
    let upstream = TestServer::builder()
        .body(answer(HOSTILE))
        .start()
        .await
        .unwrap();
    let dir = tempfile_dir("console");
    let (mut child, base, console) = gateway(
        &dir,
        &format!(
            "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
             [[auth.keys]]\nname = \"<img src=x onerror=alert(3)>\"\nkey_env = \"HOSTILE_KEY\"\n\
             [records]\nurl = \"sqlite://{}\"\nspool_path = \"{}\"\nsamples = true\n\
             [[models]]\nname = \"small\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
            dir.join("records.db").display(),
            dir.join("records.spool").display(),
            upstream.base_url()
        ),
    )
    .await;
    let console_origin = console.trim_end_matches("/console").to_string();
    // The console is not on the gateway's listener, nor the gateway's routes on the console's.
    let on_gateway = reqwest::get(format!("{base}/console")).await.unwrap();
    assert_eq!(on_gateway.status(), 404);

    for k in 0..3 {
        assert_eq!(chat(&base, "sk-team-a", &format!("req-{k}")).await, 200);
    }
    assert_eq!(chat(&base, "sk-hostile", "req-hostile").await, 200);
    // Their records written (the writer batches them): seen by the console's own route.
    let deadline = Instant::now() + LIMIT;
    loop {
        let page = reqwest::Client::new()
            .get(format!("{console_origin}/console/requests"))
            .bearer_auth("sk-operator")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if page.contains("req-hostile") && page.contains("req-0") {
            break;
        }
        assert!(Instant::now() < deadline, "the records were not written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let browser = Browser::start(&driver).await;
    let clean = |name: &'static str| {
        let browser = &browser;
        async move {
            let (errors, log) = browser.console_errors().await;
            assert!(errors.is_empty(), "{name}: console errors: {log}");
            assert!(!browser.dialog_open().await, "{name}: a dialog opened");
            let hostile = browser
                .script("return document.querySelectorAll('main script, main img, main [onerror]').length;")
                .await;
            assert_eq!(hostile, json!(0), "{name}: hostile markup in the page");
        }
    };

    // Signed out: the sign-in form. Signed in through it.
    browser.open(&console).await;
    assert!(browser.text().await.contains("Operator key"));
    browser.screenshot("sign-in").await;
    // The 401 of the page itself is a console entry of its own; anything else is not.
    let (errors, log) = browser.console_errors().await;
    assert!(
        errors.iter().all(|e| e.contains("401")),
        "sign-in: console errors: {log}"
    );
    browser.type_into("#key", "sk-operator").await;
    browser.click("button[type=submit]").await;
    let text = browser.text_with("The last 24 hours").await;
    assert!(
        text.contains("Requests\n4") || text.contains("Requests\t4"),
        "{text}"
    );
    clean("overview").await;
    browser.screenshot("overview").await;

    let mut loads = Vec::new();
    for (name, path) in [
        ("requests", "/console/requests"),
        ("request", "/console/requests/req-hostile"),
        ("usage", "/console/usage"),
        ("keys", "/console/keys"),
    ] {
        browser.open(&format!("{console_origin}{path}")).await;
        clean(name).await;
        let ms = browser.load_ms().await;
        loads.push(format!("{name} {ms} ms"));
        browser.screenshot(name).await;
        let text = browser.text().await;
        match name {
            "requests" => assert!(text.contains("<img src=x onerror=alert(3)>"), "{text}"),
            "request" => assert!(text.contains(HOSTILE.split(' ').next().unwrap()), "{text}"),
            "usage" => assert!(text.contains("team-a"), "{text}"),
            _ => assert!(text.contains("requests_per_minute") || text.contains("team-a")),
        }
    }
    eprintln!("page loads in Chromium: {}", loads.join(", "));

    // Live: a request made while the page is open appears in it, without a reload.
    browser
        .open(&format!("{console_origin}/console/requests"))
        .await;
    browser.click("#live").await;
    assert_eq!(chat(&base, "sk-team-a", "req-live").await, 200);
    let deadline = Instant::now() + LIMIT;
    while !browser.text().await.contains("req-live") {
        assert!(
            Instant::now() < deadline,
            "the live page did not show the new request"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let still = browser
        .script("return performance.getEntriesByType('navigation').length;")
        .await;
    assert_eq!(still, json!(1), "no reload");
    assert!(browser.text().await.contains("1 new request"));
    clean("live requests").await;
    browser
        .open(&format!("{console_origin}/console/keys"))
        .await;

    // A key made from the form: its secret on the page once, accepted by the gateway.
    browser.type_into("#name", "team-x").await;
    browser.type_into("#models", "small").await;
    browser
        .type_into("#limits", "requests_per_minute = 30")
        .await;
    browser.click("form.new-key button[type=submit]").await;
    browser.text_with("Copy it now").await;
    let secret = browser
        .script("return document.querySelector('.secret').textContent;")
        .await;
    let secret = secret.as_str().unwrap().to_string();
    assert!(secret.starts_with("cw-") && secret.len() == 67, "{secret}");
    clean("key made").await;
    assert_eq!(chat(&base, &secret, "by-team-x").await, 200);
    browser
        .open(&format!("{console_origin}/console/keys"))
        .await;
    assert!(
        !browser.text().await.contains(&secret),
        "a secret is shown once"
    );
    assert!(browser.text().await.contains("team-x"));
    // Revoked from its button: refused by the gateway.
    browser.click("button[aria-label='Revoke team-x']").await;
    let deadline = Instant::now() + LIMIT;
    while browser.text().await.contains("team-x") {
        assert!(Instant::now() < deadline, "the revoked key is still listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    clean("key revoked").await;
    assert_eq!(chat(&base, &secret, "revoked").await, 401);
    browser.end().await;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_shows_a_votes_samples_filling_out_of_order_and_its_winner() {
    let Some(driver) = ChromeDriver::start() else {
        return;
    };
    // Three upstreams, one sample each: their first bytes 0, 300 and 600 ms after they are
    // asked. The fast and the slow say 4, the middle one 5: the vote is decided when the
    // slow one finishes, and the fast one, the first to finish of the winning key, answers.
    let mut upstreams = String::new();
    let mut servers = Vec::new();
    for (delay, text) in [
        (600, "slow Answer: 4"),
        (0, "fast Answer: 4"),
        (300, "middle Answer: 5"),
    ] {
        let server = TestServer::builder()
            .body(answer(text))
            .head_delay(Duration::from_millis(delay))
            .start()
            .await
            .unwrap();
        upstreams.push_str(&format!(
            "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nn = \"fan-out\"\n",
            server.base_url()
        ));
        servers.push(server);
    }
    let dir = tempfile_dir("playground");
    let (mut child, _base, console) = gateway(
        &dir,
        &format!(
            "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
             [records]\nurl = \"sqlite://{}\"\nspool_path = \"{}\"\nsamples = true\n\
             [[models]]\nname = \"voter\"\n\
             [models.choicewise]\nsamples = 3\nselect = \"vote\"\nvote_by = 'Answer: (\\d+)'\n{upstreams}",
            dir.join("records.db").display(),
            dir.join("records.spool").display(),
        ),
    )
    .await;
    let browser = Browser::start(&driver).await;
    browser.sign_in(&console).await;
    browser.open(&format!("{console}/playground")).await;
    browser.type_into("#prompt", "2 + 2?").await;
    browser.type_into("#client-key", "sk-team-a").await;
    browser.click("#playground button[type=submit]").await;
    browser.text_with("Done.").await;
    let columns = browser
        .script(
            "return Array.from(document.querySelectorAll('#samples-view .column')).map(c => ({
               sample: Number(c.dataset.sample), first: Number(c.dataset.firstMs),
               shown: Number(c.dataset.shownMs),
               end: c.dataset.end, winner: c.dataset.winner === 'true',
               tokens: Number(c.dataset.tokens),
               text: c.querySelector('pre.text:not(.reasoning)').textContent }));",
        )
        .await;
    let columns = columns.as_array().unwrap();
    assert_eq!(columns.len(), 3, "{columns:?}");
    let by = |word: &str| {
        columns
            .iter()
            .find(|c| c["text"].as_str().unwrap().starts_with(word))
            .unwrap_or_else(|| panic!("no column says {word}: {columns:?}"))
    };
    let (fast, middle, slow) = (by("fast"), by("middle"), by("slow"));
    // Filled out of order, each as its upstream spoke: the fast first, the slow last.
    let first = |c: &Value| c["first"].as_f64().unwrap();
    assert!(
        first(fast) < first(middle) && first(middle) < first(slow),
        "{columns:?}"
    );
    assert!(first(slow) - first(fast) >= 400.0, "{columns:?}");
    assert_eq!(fast["text"], "fast Answer: 4");
    // Each column says its tokens once its sample's stream ends.
    assert!(
        columns.iter().all(|c| c["tokens"].as_f64() > Some(0.0)),
        "{columns:?}"
    );
    // How long after the gateway saw each column's first token the page showed it (an upper
    // bound: the page's clock starts when it sent the request, before the gateway's).
    let lags: Vec<String> = (columns.iter())
        .map(|c| format!("{:.0} ms", c["shown"].as_f64().unwrap() - first(c)))
        .collect();
    println!(
        "playground: each column's first token shown {} after the gateway saw it",
        lags.join(", ")
    );
    // The winner marked: the first to finish of the winning key.
    assert_eq!(fast["winner"], true, "{columns:?}");
    assert_eq!(
        (middle["winner"].clone(), slow["winner"].clone()),
        (json!(false), json!(false))
    );
    let text = browser.text().await;
    assert!(text.contains("vote: sample"), "{text}");
    assert!(
        text.contains("4: 2 votes") && text.contains("5: 1 vote"),
        "{text}"
    );
    let (errors, log) = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {log}");
    browser.screenshot("playground").await;

    // The picks page over the vote's recorded samples: its table, its plot and the block
    // that deploys the vote, once the record is written (the writer batches).
    let deadline = Instant::now() + LIMIT;
    loop {
        browser.open(&format!("{console}/picks?model=voter")).await;
        let text = browser.text().await;
        if text.contains("Without a grade: 1 item") {
            assert!(text.contains("vote-3") && text.contains("66.7%"), "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the record was not written: {text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let plots = browser
        .script("return document.querySelectorAll('figure.plot svg').length;")
        .await;
    assert_eq!(plots, json!(1));
    let config = browser
        .script("return document.querySelector('pre.config').textContent;")
        .await;
    assert!(
        config.as_str().unwrap().contains("[models.choicewise]"),
        "{config}"
    );
    let (errors, log) = browser.console_errors().await;
    assert!(errors.is_empty(), "picks: console errors: {log}");
    browser.screenshot("picks").await;
    browser.end().await;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each page's load in Chromium (navigation start to the load event, the median of three
/// loads) over 10,000 records of 40 keys and 4 models, 3 samples each, across 30 days:
/// printed for docs/benchmarks.md (`cargo test -p choicewise-cli --test cli -- --ignored
/// console::`; run by .ci/run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: .ci/run runs it"]
async fn page_loads_over_10000_records() {
    let Some(driver) = ChromeDriver::start() else {
        return;
    };
    let dir = tempfile_dir("console-10000");
    let url = format!("sqlite://{}", dir.join("records.db").display());
    let store = choicewise_records::Store::connect(&url).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut batch = Vec::new();
    for k in 0..10_000i64 {
        let at = now - (10_000 - k) * 259_200; // 30 days, evenly
        let mut r =
            choicewise_records::RequestRecord::new(at, format!("req-{k}"), format!("m{}", k % 4));
        r.key = format!("team-{}", k % 40);
        r.api = "chat".into();
        r.status = 200;
        r.ended = "complete".into();
        r.samples_started = 3;
        (r.prompt_tokens, r.completion_tokens) = (30, 90);
        r.total_ms = 420.0;
        for s in 0..3 {
            let mut sample = choicewise_records::SampleRecord::new(s, "stop");
            sample.content = Some(format!(
                "sample {s} of request {k}: the answer is {}",
                k % 7
            ));
            sample.completion_tokens = 30;
            r.samples.push(sample);
        }
        batch.push(r);
        if batch.len() == 500 {
            store.write(&batch).await.unwrap();
            batch.clear();
        }
    }
    store.close().await;
    let (mut child, _base, console) = gateway(
        &dir,
        &format!(
            "[records]\nurl = \"{url}\"\nspool_path = \"{}\"\nsamples = true\n\
             [[models]]\nname = \"m0\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
            dir.join("records.spool").display()
        ),
    )
    .await;
    let browser = Browser::start(&driver).await;
    browser.sign_in(&console).await;
    // A page in the middle: the records before the 5,000th (`~` sorts after every id).
    let older = format!("/console/requests?after={}:~", now - 5_000 * 259_200);
    let picks = "/console/picks?model=m0&answer=the+answer+is+%28%5Cd%2B%29".to_string();
    let mut figures = Vec::new();
    for (name, path) in [
        ("overview", "/console"),
        ("requests", "/console/requests"),
        ("requests, page 100", older.as_str()),
        ("request", "/console/requests/req-9999"),
        ("usage", "/console/usage"),
        ("usage by day", "/console/usage?by=day&since=30d"),
        ("keys", "/console/keys"),
        ("playground", "/console/playground"),
        ("picks (the newest 500 requests)", picks.as_str()),
    ] {
        let mut loads = Vec::new();
        for _ in 0..3 {
            browser
                .open(&format!("{console}{}", path.trim_start_matches("/console")))
                .await;
            let ms = browser.load_ms().await;
            loads.push(ms.as_f64().unwrap());
        }
        loads.sort_by(f64::total_cmp);
        figures.push(format!("{name}: {:.0} ms", loads[1]));
        if name.starts_with("picks") {
            let text = browser.text().await;
            assert!(text.contains("500 requests of m0"), "{text}");
        }
        if name == "requests, page 100" {
            assert!(
                browser.text().await.contains("req-4999"),
                "the page in the middle"
            );
        }
    }
    let (errors, log) = browser.console_errors().await;
    assert!(errors.is_empty(), "{log}");
    println!(
        "console page loads over 10,000 records (median of 3): {}",
        figures.join(", ")
    );
    browser.end().await;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `choicewise serve` in `dir` with `toml` after the configuration every test here shares
/// (listening on free ports, the operator's key, the console on a listener of its own), the
/// operator's and the clients' keys in its environment: the process, the gateway's base
/// URL, the console's URL.
async fn gateway(dir: &std::path::Path, toml: &str) -> (tokio::process::Child, String, String) {
    let config = dir.join("gateway.toml");
    let head = "listen = \"127.0.0.1:0\"\n[admin]\nkey_env = \"OPERATOR_KEY\"\n\
                [console]\nenabled = true\nlisten = \"127.0.0.1:0\"\n";
    std::fs::write(&config, format!("{head}{toml}")).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("OPERATOR_KEY", "sk-operator")
        .env("TEAM_A_KEY", "sk-team-a")
        .env("HOSTILE_KEY", "sk-hostile")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    // Its log's lines up to the one that starts with `prefix`: that line's rest.
    let mut said = Vec::new();
    let mut until = async |prefix: &str| loop {
        let line = within(LIMIT, "the gateway's log", stderr.next_line())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("the gateway ended: {said:?}"));
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.to_string();
        }
        said.push(line);
    };
    let base = until("listening on ").await;
    let console = until("the console: ").await;
    assert_ne!(console, format!("{base}/console"), "a listener of its own");
    // The rest of its log, read (and left unread) so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    (child, base, console)
}

/// A folder of this test's own under the system's temporary folder.
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("choicewise-console-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
