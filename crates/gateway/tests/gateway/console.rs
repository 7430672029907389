//! The console (`[console]`) over real sockets: off without it (404), every page 401
//! without the operator's key, signed in by its form (a cookie `HttpOnly; SameSite=Strict`
//! holding no key), every answer with its Content-Security-Policy; the last requests paged
//! newest first, a request's samples, the usage, the keys, made, rotated and revoked from a
//! form (the secret shown once and accepted by the gateway), a form from another origin
//! refused; a hostile upstream's markup and a hostile key name shown as text. The same
//! pages in a real browser: crates/cli/tests/cli/console.rs.

use std::net::SocketAddr;

use choicewise_testserver::{TestServer, answer};
use serde_json::json;

use crate::common::{fan_out_toml, serve, start};

const HOSTILE: &str = "<script>alert(1)</script> <img src=x onerror=alert(2)>";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `GET path` with `cookie`: status, headers and text.
async fn get(
    addr: SocketAddr,
    path: &str,
    cookie: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut r = client().get(format!("http://{addr}{path}"));
    if let Some(cookie) = cookie {
        r = r.header("cookie", cookie);
    }
    let r = r.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.text().await.unwrap())
}

/// A form posted to `path` with `cookie`, from `origin`: status, headers, text.
async fn post_form(
    addr: SocketAddr,
    path: &str,
    cookie: &str,
    origin: &str,
    form: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let r = client()
        .post(format!("http://{addr}{path}"))
        .header("cookie", cookie)
        .header("origin", origin)
        .form(form)
        .send()
        .await
        .unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.text().await.unwrap())
}

async fn chat(addr: SocketAddr, key: &str, id: &str) -> u16 {
    let r = client()
        .post(format!("http://{addr}/v1/chat/completions"))
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

fn env(name: &str) -> Option<String> {
    match name {
        "OPERATOR_KEY" => Some("sk-operator".into()),
        "TEAM_A_KEY" => Some("sk-team-a".into()),
        "HOSTILE_KEY" => Some("sk-hostile".into()),
        _ => None,
    }
}

#[tokio::test]
async fn without_console_its_routes_are_404() {
    let upstream = start(TestServer::builder().body(answer("ok"))).await;
    let toml = format!(
        "[admin]\nkey_env = \"OPERATOR_KEY\"\n[[models]]\nname = \"small\"\n{}",
        fan_out_toml(&upstream.base_url(), "")
    );
    let (addr, _gateway) = serve(&toml, env).await;
    for path in ["/console", "/console/requests", "/console/login"] {
        let (status, _, _) = get(addr, path, None).await;
        assert_eq!(status, 404, "{path}");
    }
}

#[tokio::test]
async fn the_console_shows_requests_usage_and_keys_safely() {
    let upstream = start(TestServer::builder().body(answer(HOSTILE))).await;
    let folder = tempfile::tempdir().unwrap();
    let toml = format!(
        "[admin]\nkey_env = \"OPERATOR_KEY\"\n[console]\nenabled = true\n\
         [auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [[auth.keys]]\nname = \"<img src=x onerror=alert(3)>\"\nkey_env = \"HOSTILE_KEY\"\n\
         [auth.keys.limits]\nrequests_per_minute = 1000\n\
         [records]\nurl = \"sqlite://{}\"\nspool_path = \"{}\"\nsamples = true\n\
         [[models]]\nname = \"small\"\n{}",
        folder.path().join("records.db").display(),
        folder.path().join("records.spool").display(),
        fan_out_toml(&upstream.base_url(), ""),
    );
    let (addr, gateway) = serve(&toml, env).await;
    for k in 0..55 {
        assert_eq!(chat(addr, "sk-team-a", &format!("req-{k:02}")).await, 200);
    }
    assert_eq!(chat(addr, "sk-hostile", "req-hostile").await, 200);
    gateway.flush_records().await;

    // Not signed: 401 and the sign-in form, on every page; a wrong key too.
    for path in [
        "/console",
        "/console/requests",
        "/console/usage",
        "/console/keys",
    ] {
        let (status, headers, text) = get(addr, path, None).await;
        assert_eq!(status, 401, "{path}");
        assert!(text.contains("action=\"/console/login\""), "{path}: {text}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{csp}"
        );
    }
    let (status, _, _) = get(addr, "/console", Some("choicewise_console=guess")).await;
    assert_eq!(status, 401);
    let own = format!("http://{addr}");
    let (status, _, _) = post_form(addr, "/console/login", "", &own, &[("key", "sk-team-a")]).await;
    assert_eq!(status, 401, "a client's key is not the operator's");
    // Signing in from another site's page is refused.
    let evil = "https://evil.example";
    let (status, _, _) =
        post_form(addr, "/console/login", "", evil, &[("key", "sk-operator")]).await;
    assert_eq!(status, 403);

    // Signed in: a cookie that holds no key, HttpOnly and SameSite=Strict.
    let (status, headers, _) =
        post_form(addr, "/console/login", "", &own, &[("key", "sk-operator")]).await;
    assert_eq!(status, 303);
    let set = headers["set-cookie"].to_str().unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains("sk-operator"), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    let cookie = cookie.as_str();

    // The last requests, newest first, 50 a page; the next page from its link.
    let (status, headers, text) = get(addr, "/console/requests", Some(cookie)).await;
    assert_eq!(status, 200, "{text}");
    assert!(headers.contains_key("content-security-policy"));
    assert_eq!(headers["x-frame-options"], "DENY");
    let first = text.find("req-hostile").unwrap();
    let later = text.find("req-54").unwrap();
    assert!(first < later, "newest first");
    // 56 requests: the hostile one and req-54 to req-06 on the first page.
    assert!(
        text.contains(">req-06<") && !text.contains(">req-05<"),
        "50 a page"
    );
    assert!(text.contains("&lt;img src=x onerror=alert(3)&gt;"));
    assert!(!text.contains("<img src=x"), "a key's name is text: {text}");
    let next = text
        .split("href=\"")
        .find_map(|s| {
            s.starts_with("/console/requests?after=")
                .then(|| s.split('"').next().unwrap())
        })
        .expect("a link to older requests")
        .replace("&amp;", "&");
    let (status, _, older) = get(addr, &next, Some(cookie)).await;
    assert_eq!(status, 200);
    assert!(
        older.contains(">req-05<") && older.contains(">req-00<"),
        "{older}"
    );
    assert!(!older.contains(">req-06<"));
    // By key.
    let (_, _, team_a) = get(addr, "/console/requests?key=team-a", Some(cookie)).await;
    assert!(!team_a.contains("req-hostile") && team_a.contains("req-54"));

    // A request's samples: the upstream's markup shown as text, never as markup.
    let (status, _, one) = get(addr, "/console/requests/req-hostile", Some(cookie)).await;
    assert_eq!(status, 200, "{one}");
    assert!(
        one.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{one}"
    );
    assert!(!one.contains("<script>") && !one.contains("<img src=x"));
    let (status, _, _) = get(addr, "/console/requests/nothing-such", Some(cookie)).await;
    assert_eq!(status, 404);

    // The usage, as `choicewise usage` counts it.
    let (status, _, usage) = get(addr, "/console/usage?by=key", Some(cookie)).await;
    assert_eq!(status, 200, "{usage}");
    assert!(
        usage.contains(">team-a<") && usage.contains(">55<"),
        "{usage}"
    );
    let (status, _, bad) = get(addr, "/console/usage?by=colour", Some(cookie)).await;
    assert_eq!(status, 400);
    assert!(bad.contains("colour"), "{bad}");

    // The keys: made from the form, its secret shown once and accepted by the gateway.
    let (status, _, keys) = get(addr, "/console/keys", Some(cookie)).await;
    assert_eq!(status, 200);
    assert!(keys.contains("requests_per_minute: 1 of 1000"), "{keys}");
    let made = [
        ("name", "team-x"),
        ("models", "small"),
        ("limits", "requests_per_minute = 30"),
    ];
    let (status, _, _) = post_form(addr, "/console/keys", cookie, evil, &made).await;
    assert_eq!(status, 403, "a form from another site");
    let (status, _, page) = post_form(addr, "/console/keys", cookie, &own, &made).await;
    assert_eq!(status, 201, "{page}");
    let secret = secret_of(&page);
    assert_eq!(chat(addr, &secret, "by-team-x").await, 200);
    let (_, _, keys) = get(addr, "/console/keys", Some(cookie)).await;
    assert!(!keys.contains(&secret), "a secret is shown once");
    assert!(keys.contains("team-x") && keys.contains("requests_per_minute: 1 of 30"));

    // Rotated: the old secret refused, the new one taken; revoked: refused.
    let (status, _, page) = post_form(addr, "/console/keys/team-x/rotate", cookie, &own, &[]).await;
    assert_eq!(status, 200, "{page}");
    let rotated = secret_of(&page);
    assert_eq!(chat(addr, &secret, "old-secret").await, 401);
    assert_eq!(chat(addr, &rotated, "new-secret").await, 200);
    let (status, _, _) = post_form(addr, "/console/keys/team-x/revoke", cookie, &own, &[]).await;
    assert_eq!(status, 303);
    assert_eq!(chat(addr, &rotated, "revoked").await, 401);
    let (status, _, _) = post_form(addr, "/console/keys/team-a/revoke", cookie, &own, &[]).await;
    assert_eq!(status, 409, "a key of the file is changed in the file");

    // The playground: the request sent as the client key given, its sample's events and
    // the client's answer in one stream; without a client key, the gateway's refusal.
    let playground = |origin: &str, body: serde_json::Value| {
        client()
            .post(format!("http://{addr}/console/playground"))
            .header("cookie", cookie)
            .header("origin", origin)
            .json(&body)
            .send()
    };
    let asked = json!({"model": "small", "prompt": "hi", "key": "sk-team-a"});
    let r = playground(evil, asked.clone()).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = playground(&own, asked).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let events = r.text().await.unwrap();
    assert!(events.contains("event: sample\n"), "{events}");
    assert!(events.contains(r#""kind":"content""#), "{events}");
    assert!(events.contains(r#""kind":"finished""#), "{events}");
    assert!(events.contains("event: answer") && events.ends_with("event: end\ndata: {}\n\n"));
    let r = playground(&own, json!({"model": "small", "prompt": "hi"}))
        .await
        .unwrap();
    let refused = r.text().await.unwrap();
    assert!(
        refused.starts_with("event: error\n") && refused.contains(r#""status":401"#),
        "{refused}"
    );
    let r = client()
        .post(format!("http://{addr}/console/playground"))
        .json(&json!({"model": "small", "prompt": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "not signed");

    // A script signs with the operator's key instead.
    let r = client()
        .get(format!("http://{addr}/console/usage"))
        .bearer_auth("sk-operator")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Signed out: the cookie cleared.
    let (status, headers, _) = post_form(addr, "/console/logout", cookie, &own, &[]).await;
    assert_eq!(status, 303);
    assert!(
        headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
}

/// The secret a page shows (`cw-` and 64 hex digits).
fn secret_of(page: &str) -> String {
    let at = page.find("cw-").expect("a secret on the page");
    page[at..at + 67].to_string()
}

/// One upstream (fan-out, one sample each) per `(delay, text)`: it answers `text`, its
/// first byte `delay` ms after it is asked. Their `[[models.upstreams]]` entries, and the
/// servers (kept while the test runs).
async fn voters(said: &[(u64, &str)]) -> (String, Vec<TestServer>) {
    let mut upstreams = String::new();
    let mut servers = Vec::new();
    for &(delay, text) in said {
        let server = TestServer::builder()
            .body(answer(text))
            .head_delay(std::time::Duration::from_millis(delay));
        let server = start(server).await;
        upstreams.push_str(&format!(
            "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nn = \"fan-out\"\n",
            server.base_url()
        ));
        servers.push(server);
    }
    (upstreams, servers)
}

/// The playground streams each sample's events as the gateway reads them, not once the
/// pick's answer begins: over three upstreams whose first bytes come 0, 300 and 600 ms after
/// they are asked, a vote's answer begins only when the slowest finishes, and by then the
/// playground has sent the two others' texts and finishes. (The slowest's own text races the
/// answer it decides: the playground reads it beside the pick, so it is only asserted sent.)
#[tokio::test]
async fn the_playground_streams_the_samples_before_the_pick_decides() {
    let (upstreams, _servers) = voters(&[
        (600, "slow Answer: 4"),
        (0, "fast Answer: 4"),
        (300, "middle Answer: 5"),
    ])
    .await;
    let toml = format!(
        "[admin]\nkey_env = \"OPERATOR_KEY\"\n[console]\nenabled = true\n\
         [[models]]\nname = \"voter\"\n[models.choicewise]\nsamples = 3\nselect = \"vote\"\n\
         vote_by = 'Answer: (\\d+)'\n{upstreams}"
    );
    let (addr, _gateway) = serve(&toml, env).await;
    let events = client()
        .post(format!("http://{addr}/console/playground"))
        .bearer_auth("sk-operator")
        .json(&json!({"model": "voter", "prompt": "2 + 2?"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let names: Vec<&str> = (events.split("\n\n"))
        .filter_map(|e| e.strip_prefix("event: ")?.split('\n').next())
        .collect();
    assert_eq!(names.first(), Some(&"sample"), "{events}");
    let first_answer = events.find("event: answer").unwrap();
    let fast_finished = r#""kind":"finished","reason":"stop","sample":1}"#;
    let middle_finished = r#""kind":"finished","reason":"stop","sample":2}"#;
    for said in ["\"fast \"", "\"middle \"", fast_finished, middle_finished] {
        let at = events
            .find(said)
            .unwrap_or_else(|| panic!("{said}: {events}"));
        assert!(at < first_answer, "{said} after the answer began: {events}");
    }
    assert!(events.contains("\"slow \""), "{events}");
    assert!(events.contains(r#""selected":[1]"#), "{events}");
    // Each sample's tokens, once its stream ends: three, each more than none.
    let tokens: Vec<serde_json::Value> = (events.split("\n\n"))
        .filter_map(|e| e.strip_prefix("event: sample\ndata: "))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
        .filter(|seen| seen["kind"] == "tokens")
        .collect();
    assert_eq!(tokens.len(), 3, "{events}");
    assert!(
        tokens.iter().all(|t| t["tokens"].as_u64() > Some(0)),
        "{tokens:?}"
    );
}

/// The picks page over the gateway's own records: requests of a vote of three over three
/// upstreams (answers 4, 4 and 5), their samples kept, four of them graded by `POST
/// /v1/feedback` (three right, one wrong). The graded items are measured against their
/// grades and the others against the vote of their samples, apart; the figures are those
/// of the samples (one sample agrees with the vote two times in three, the vote of three
/// always); the recommendation's block deploys the vote; bad fields are refused naming
/// them; a hostile pattern is shown as text. The same report as JSON at `/admin/picks`.
#[tokio::test]
async fn the_picks_page_measures_the_picks_on_the_recorded_samples() {
    let folder = tempfile::tempdir().unwrap();
    let (upstreams, _servers) = voters(&[
        (0, "So Answer: 4"),
        (0, "Thus Answer: 4"),
        (0, "Hence Answer: 5"),
    ])
    .await;
    let toml = format!(
        "[admin]\nkey_env = \"OPERATOR_KEY\"\n[console]\nenabled = true\n\
         [records]\nurl = \"sqlite://{}\"\nspool_path = \"{}\"\nsamples = true\n\
         [[models]]\nname = \"voter\"\n[models.choicewise]\nsamples = 3\nselect = \"vote\"\n\
         vote_by = 'Answer: (\\d+)'\n{upstreams}",
        folder.path().join("records.db").display(),
        folder.path().join("records.spool").display(),
    );
    let (addr, gateway) = serve(&toml, env).await;
    for k in 0..12 {
        let r = client()
            .post(format!("http://{addr}/v1/chat/completions"))
            .header("x-request-id", format!("vote-{k:02}"))
            .json(&json!({"model": "voter", "messages": [{"role": "user", "content": "2 + 2?"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.text().await.unwrap().contains("Answer: 4"));
    }
    gateway.flush_records().await;
    for (k, outcome) in [(0, "right"), (1, "right"), (2, "right"), (3, "wrong")] {
        let r = client()
            .post(format!("http://{addr}/v1/feedback"))
            .bearer_auth("sk-operator")
            .json(&json!({"request_id": format!("vote-{k:02}"), "outcome": outcome}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }

    let admin = |query: &str| {
        client()
            .get(format!("http://{addr}/admin/picks?{query}"))
            .bearer_auth("sk-operator")
            .send()
    };
    // The model's own vote_by is the answer's pattern when none is given.
    let r = admin("model=voter").await.unwrap();
    assert_eq!(r.status(), 200);
    let report: serde_json::Value = r.json().await.unwrap();
    assert_eq!(report["answer"], r"Answer: (\d+)");
    assert_eq!(
        (&report["requests_read"], &report["items"]),
        (&json!(12), &json!(12))
    );
    assert_eq!(
        (&report["samples"], &report["graded_items"]),
        (&json!(36), &json!(4))
    );
    let parts = report["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{report}");
    let pick = |part: &serde_json::Value, name: &str| {
        let row = (part["picks"].as_array().unwrap().iter())
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {part}"));
        row["accuracy"].as_f64().unwrap()
    };
    // Graded: right on three of the four items whichever pick answers 4.
    assert_eq!(parts[0]["measured_against"], "feedback");
    assert_eq!(parts[0]["problems"], 4);
    assert!((pick(&parts[0], "vote-3") - 0.75).abs() < 1e-9, "{report}");
    assert!((pick(&parts[0], "single") - 0.5).abs() < 1e-9, "{report}");
    // The others: agreement with the vote of their samples.
    assert_eq!(parts[1]["problems"], 8);
    assert!((pick(&parts[1], "vote-3") - 1.0).abs() < 1e-9, "{report}");
    assert!(
        (pick(&parts[1], "single") - 2.0 / 3.0).abs() < 1e-9,
        "{report}"
    );
    assert_eq!(parts[1]["measured"], "offline");
    // Bad fields, named.
    for (query, field) in [
        ("model=voter&answer=(", "answer"),
        // Too costly for the gateway's own vote_by, which the pattern would become.
        (
            "model=voter&answer=((((((((((((((((((a))))))))))))))))))",
            "answer",
        ),
        ("model=voter&requests=0", "requests"),
        ("model=voter&since=yesterday", "since"),
        ("model=nobody", "model"),
    ] {
        let r = admin(query).await.unwrap();
        assert_eq!(r.status(), 400, "{query}");
        let e: serde_json::Value = r.json().await.unwrap();
        assert_eq!(e["error"]["param"], field, "{query}: {e}");
    }
    let r = client()
        .get(format!("http://{addr}/admin/picks?model=voter"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // The page: the two parts' tables, their plots and the block that deploys the vote.
    let (status, _, _) = get(addr, "/console/picks", None).await;
    assert_eq!(status, 401);
    let page = client()
        .get(format!("http://{addr}/console/picks?model=voter"))
        .bearer_auth("sk-operator")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Graded by feedback: 4 items"), "{page}");
    assert!(page.contains("Without a grade: 8 items"), "{page}");
    assert!(page.contains("<svg") && page.contains("vote-3"), "{page}");
    assert!(page.contains("[models.choicewise]"), "{page}");
    assert!(page.contains("75.0%") && page.contains("66.7%"), "{page}");
    // A hostile pattern: shown as text, never run.
    let hostile = "%3Cscript%3Ealert(1)%3C%2Fscript%3E";
    let (status, _, page) = get(
        addr,
        &format!("/console/picks?model=voter&answer={hostile}"),
        None,
    )
    .await;
    assert_eq!(status, 401);
    assert!(!page.contains("<script>alert"));
    let r = client()
        .get(format!(
            "http://{addr}/console/picks?model=voter&answer={hostile}"
        ))
        .bearer_auth("sk-operator")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let page = r.text().await.unwrap();
    assert!(page.contains("matched none of the 36 samples"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>alert"), "{page}");
}
