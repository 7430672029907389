//! The console (`[console]`): pages in a browser over what the gateway knows, behind the
//! operator's key of `[admin]` (docs/console.md).
//!
//! Every page is rendered here, on the server, by maud's templates, which escape every value
//! put in them: model output, prompts and key names are text on a page, never markup. No
//! page runs an inline script; each answer carries a Content-Security-Policy that allows
//! none, and the style sheet is the binary's own. A browser signs in once with the
//! operator's key (`/console/login`), which sets a cookie (`HttpOnly; SameSite=Strict`)
//! holding a digest of the key, never the key; a script may send `Authorization: Bearer`
//! the key instead. A form's `POST` signed by the cookie must come from the console's own
//! origin. The console reads the records database (`[records]`) and the keys (the keyring
//! and the limits' store) through the same functions as the admin API and `choicewise
//! usage`.

mod keys;
mod pages;
mod picks;
mod playground;

pub(crate) use picks::json as picks_json;
pub(crate) use playground::Watch;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};

use crate::state::Gateway;

/// The cookie of a browser signed in.
const COOKIE: &str = "choicewise_console";

/// What every console answer says of itself: no script but the console's own files, no
/// frame, no referrer, nothing kept in a cache.
const SECURITY_HEADERS: [(header::HeaderName, &str); 5] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::CACHE_CONTROL, "no-store"),
    (header::X_FRAME_OPTIONS, "DENY"),
];

/// The console's routes (docs/console.md); on the gateway's router, or on a listener of
/// their own ([`Gateway::console_router`]).
pub(crate) fn routes() -> axum::Router<Gateway> {
    axum::Router::new()
        .route("/console", get(pages::overview))
        .route("/console/login", get(login_form).post(login))
        .route("/console/logout", post(logout))
        .route("/console/requests", get(pages::requests))
        .route("/console/requests/{id}", get(pages::request))
        .route("/console/usage", get(pages::usage))
        .route(
            "/console/playground",
            get(playground::form).post(playground::send),
        )
        .route("/console/keys", get(keys::list).post(keys::create))
        .route("/console/picks", get(picks::show))
        .route("/console/keys/{name}/{action}", post(keys::act))
        .route("/console/console.css", get(style))
        .route("/console/favicon.svg", get(icon))
        .route("/console/console.js", get(script))
        .route("/console/{*rest}", get(unknown).post(unknown))
        .layer(axum::middleware::from_fn(secured))
}

/// The security headers on every console answer.
async fn secured(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = next.run(request).await;
    for (name, value) in SECURITY_HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("console.css"),
    )
        .into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("console.js"),
    )
        .into_response()
}

async fn icon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        include_str!("favicon.svg"),
    )
        .into_response()
}

async fn unknown(_: Signed) -> Response {
    failure(StatusCode::NOT_FOUND, "No such page in the console.")
}

/// A request the operator signed: by the console's cookie, or by `Authorization: Bearer`
/// the operator's key. Its rejection is the 401 page (logged, naming the route), or 404
/// where the console is off.
pub(crate) struct Signed {
    /// Signed by the cookie (a browser's): a form it posts must come from the console.
    by_cookie: bool,
}

impl FromRequestParts<Gateway> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, gw: &Gateway) -> Result<Self, Response> {
        let Some(operator) = &gw.inner.operator else {
            return Err(failure(StatusCode::NOT_FOUND, "The console is off."));
        };
        if cookie(&parts.headers).is_some_and(|value| operator.is_session(value)) {
            let signed = Signed { by_cookie: true };
            if parts.method != Method::GET && parts.method != Method::HEAD {
                same_origin(&parts.headers).map_err(|e| {
                    tracing::warn!(route = %parts.uri.path(), "console: {e}");
                    failure(StatusCode::FORBIDDEN, &e)
                })?;
            }
            return Ok(signed);
        }
        match operator.check(&parts.headers, &parts.uri) {
            Ok(()) => Ok(Signed { by_cookie: false }),
            Err(e) => {
                tracing::warn!(
                    route = %parts.uri.path(),
                    "a console page asked without the operator's key: {}",
                    e.message
                );
                Err(signed_out(StatusCode::UNAUTHORIZED, None))
            }
        }
    }
}

impl Signed {
    /// Whether a browser signed this request (a page may offer it forms).
    pub(crate) fn in_browser(&self) -> bool {
        self.by_cookie
    }
}

/// The console's cookie, when the request sends it.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    (headers.get_all(header::COOKIE).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// A form posted by a browser comes from the console's own origin: its `Origin` names the
/// host it was sent to (or the browser says `Sec-Fetch-Site: same-origin`). The cookie is
/// `SameSite=Strict` too; this holds where a browser does not honour it.
fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if text(header::HeaderName::from_static("sec-fetch-site")) == Some("same-origin") {
        return Ok(());
    }
    let (Some(origin), Some(host)) = (text(header::ORIGIN), text(header::HOST)) else {
        return Err("a form posted without its Origin is refused".into());
    };
    let own = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        == Some(host);
    match own {
        true => Ok(()),
        false => Err(format!(
            "a form posted from another site (Origin {origin:?}) is refused"
        )),
    }
}

/// The page of a request not signed: the sign-in form, with `status`.
fn signed_out(status: StatusCode, said: Option<&str>) -> Response {
    let body = html! {
        @if let Some(said) = said {
            p.error role="alert" { (said) }
        }
        p { "The console is the operator's: sign in with the key of " code { "[admin] key_env" } "." }
        form method="post" action="/console/login" {
            label for="key" { "Operator key" }
            input #key name="key" type="password" autocomplete="current-password" required autofocus;
            button type="submit" { "Sign in" }
        }
    };
    (status, page("Sign in", None, body)).into_response()
}

async fn login_form(State(gw): State<Gateway>) -> Response {
    match gw.inner.operator {
        Some(_) => signed_out(StatusCode::OK, None),
        None => failure(StatusCode::NOT_FOUND, "The console is off."),
    }
}

#[derive(serde::Deserialize)]
struct Login {
    key: String,
}

/// `POST /console/login`: the cookie set when the key is the operator's.
async fn login(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    form: Result<axum::Form<Login>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(operator) = &gw.inner.operator else {
        return failure(StatusCode::NOT_FOUND, "The console is off.");
    };
    if let Err(e) = same_origin(&headers) {
        tracing::warn!("console: sign-in {e}");
        return failure(StatusCode::FORBIDDEN, &e);
    }
    let key = form.map(|f| f.0.key).unwrap_or_default();
    if !operator.is_key(key.trim()) {
        tracing::warn!("console: a sign-in with a key that is not the operator's");
        return signed_out(
            StatusCode::UNAUTHORIZED,
            Some("That key is not the operator's."),
        );
    }
    let cookie = format!(
        "{COOKIE}={}; Path=/console; HttpOnly; SameSite=Strict",
        operator.session()
    );
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/console".to_string()),
        ],
    )
        .into_response()
}

/// `POST /console/logout`: the cookie cleared.
async fn logout(_: Signed) -> Response {
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"),
            ),
            (header::LOCATION, "/console/login".to_string()),
        ],
    )
        .into_response()
}

/// The console's pages, for the navigation: path and name.
const PAGES: [(&str, &str); 6] = [
    ("/console", "Overview"),
    ("/console/playground", "Playground"),
    ("/console/requests", "Requests"),
    ("/console/usage", "Usage"),
    ("/console/keys", "Keys"),
    ("/console/picks", "Picks"),
];

/// A whole page: `title`, the navigation (`current` marked, none when signed out) and
/// `body`.
pub(crate) fn page(title: &str, current: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · choicewise console" }
                link rel="stylesheet" href="/console/console.css";
                link rel="icon" href="/console/favicon.svg" type="image/svg+xml";
                script type="module" src="/console/console.js" {}
            }
            body {
                a.skip href="#main" { "Skip to the content" }
                header {
                    span.brand { "choicewise" }
                    @if let Some(current) = current {
                        nav aria-label="Console" {
                            ul {
                                @for (path, name) in PAGES {
                                    li {
                                        a href=(path) aria-current=[(path == current).then_some("page")] { (name) }
                                    }
                                }
                            }
                        }
                        form.logout method="post" action="/console/logout" {
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main #main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A page saying what went wrong, with `status`.
pub(crate) fn failure(status: StatusCode, said: &str) -> Response {
    let body = html! {
        p.error role="alert" { (said) }
        p { a href="/console" { "Back to the console" } }
    };
    let title = status.canonical_reason().unwrap_or("Error");
    (status, page(title, Some(""), body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_is_taken_only_from_the_consoles_own_origin() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (name, value) in pairs {
                h.insert(*name, HeaderValue::from_static(value));
            }
            h
        };
        let host = ("host", "127.0.0.1:8080");
        assert!(same_origin(&headers(&[host, ("origin", "http://127.0.0.1:8080")])).is_ok());
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])).is_ok());
        let e = same_origin(&headers(&[host, ("origin", "https://evil.example")])).unwrap_err();
        assert!(e.contains("https://evil.example"), "{e}");
        assert!(same_origin(&headers(&[host])).is_err());
        assert!(same_origin(&headers(&[host, ("sec-fetch-site", "cross-site")])).is_err());
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; choicewise_console=abc; b=2"),
        );
        assert_eq!(cookie(&h), Some("abc"));
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("choicewise_consolex=1"),
        );
        assert_eq!(cookie(&h), None);
    }
}
