//! The console's keys: each key's limits and what is left of them (the limits' store's own
//! figures, as `GET /admin/keys/{name}` shows them), and the forms that make, rotate, expire
//! and revoke a key through the admin API's own functions. A secret is on a page once: the
//! page that answers its making or its rotation.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde_json::{Map, Value, json};

use super::{Signed, failure, page};
use crate::admin;
use crate::error::ApiError;
use crate::state::Gateway;

/// A JSON value as a cell shows it: text as it is, `null` as nothing, the rest as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A list of text as a cell shows it: comma-separated; `any` where there is none.
fn listed(value: &Value, none: &str) -> String {
    match value.as_array() {
        Some(items) if !items.is_empty() => {
            let items: Vec<String> = items.iter().map(shown).collect();
            items.join(", ")
        }
        _ => none.to_string(),
    }
}

/// `GET /console/keys`: every key, its limits, used, left and reset; the forms.
pub(super) async fn list(State(gw): State<Gateway>, signed: Signed) -> Response {
    let keys = admin::all_with_usage(&gw).await;
    let can_make = gw.inner.keys.store().is_some();
    page(
        "Keys",
        Some("/console/keys"),
        keys_body(&keys, can_make, &signed),
    )
    .into_response()
}

fn keys_body(keys: &[Value], can_make: bool, signed: &Signed) -> Markup {
    html! {
        @if keys.is_empty() {
            p { "No named key." }
        } @else {
            div.scroll {
                table {
                    thead {
                        tr {
                            th scope="col" { "Key" }
                            th scope="col" { "From" }
                            th scope="col" { "Models" }
                            th scope="col" { "Tags" }
                            th scope="col" { "Limits: used of limit (in flight), left, reset" }
                            th scope="col" { "Expires" }
                            @if signed.in_browser() { th scope="col" { "Change" } }
                        }
                    }
                    tbody {
                        @for key in keys {
                            @let name = shown(&key["name"]);
                            tr {
                                th scope="row" { (name) }
                                td { (shown(&key["origin"])) }
                                td { (listed(&key["models"], "any")) }
                                td { (listed(&key["tags"], "")) }
                                td { (usage(key)) }
                                td {
                                    (shown(&key["expires_at"]))
                                    @if key["expired"] == json!(true) { strong { " (expired)" } }
                                }
                                @if signed.in_browser() {
                                    td {
                                        @if key["origin"] == json!("admin") {
                                            (action(&name, "rotate", "Rotate"))
                                            (action(&name, "expire", "Expire now"))
                                            (action(&name, "revoke", "Revoke"))
                                        } @else {
                                            "in the configuration file"
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if signed.in_browser() {
            @if can_make { (new_key_form()) } @else {
                p { "Keys cannot be made here: they live in Redis ([state] redis_url) or the records database ([records]), with [auth]." }
            }
        }
    }
}

/// A key's limits: used of the limit, in flight, left and reset, one line each.
fn usage(key: &Value) -> Markup {
    html! {
        @if let Some(e) = key.get("usage_error") {
            span.error { "the limits' store did not answer: " (shown(e)) }
        }
        @if let Some(limits) = key["usage"].as_array() {
            @if limits.is_empty() { "none" }
            ul.limits {
                @for l in limits {
                    li {
                        (shown(&l["name"])) ": " (shown(&l["used"])) " of " (shown(&l["limit"]))
                        @if l["in_flight"].as_f64().is_some_and(|n| n > 0.0) { " (" (shown(&l["in_flight"])) " in flight)" }
                        ", " (shown(&l["remaining"])) " left"
                        @if let Some(reset) = l["reset"].as_str() { ", resets in " (reset) }
                        @if l["scope"].as_str().is_some_and(|s| !s.starts_with("key")) { " (" (shown(&l["scope"])) ")" }
                    }
                }
            }
        }
    }
}

/// A button that posts `action` for the key `name`.
fn action(name: &str, action: &str, label: &str) -> Markup {
    html! {
        form.inline method="post" action={ "/console/keys/" (super::pages::encoded(name)) "/" (action) } {
            button type="submit" aria-label={ (label) " " (name) } { (label) }
        }
    }
}

fn new_key_form() -> Markup {
    html! {
        section aria-labelledby="new-key" {
            h2 #new-key { "A new key" }
            form.new-key method="post" action="/console/keys" {
                label for="name" { "Name" }
                input #name name="name" required pattern="[A-Za-z0-9._\\-]{1,64}" aria-describedby="name-help";
                span.help #name-help { "1 to 64 letters, digits, ., _ or -" }
                label for="models" { "Models" }
                input #models name="models" aria-describedby="models-help";
                span.help #models-help { "comma-separated; empty: every model" }
                label for="tags" { "Tags" }
                input #tags name="tags";
                label for="limits" { "Limits" }
                textarea #limits name="limits" rows="3" aria-describedby="limits-help" {}
                span.help #limits-help { "one a line: requests_per_minute = 60, tokens_per_day = 100000, usd_per_day = 1" }
                label for="expires_at" { "Expires at" }
                input #expires_at name="expires_at" placeholder="2026-12-31T00:00:00Z";
                button type="submit" { "Make the key" }
            }
        }
    }
}

/// The form of a new key, as the admin API's JSON: lists split at commas, limits at lines
/// (`name = amount`).
fn new_key(form: &[(String, String)]) -> Result<Value, String> {
    let mut body = Map::new();
    for (field, value) in form {
        let value = value.trim();
        match field.as_str() {
            "name" => {
                body.insert("name".into(), json!(value));
            }
            "models" | "tags" if !value.is_empty() => {
                let items: Vec<&str> = value
                    .split(',')
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .collect();
                body.insert(field.clone(), json!(items));
            }
            "expires_at" if !value.is_empty() => {
                body.insert("expires_at".into(), json!(value));
            }
            "limits" if !value.is_empty() => {
                let mut limits = Map::new();
                for line in value.split(['\n', ',']).map(str::trim) {
                    if line.is_empty() {
                        continue;
                    }
                    let Some((name, amount)) = line.split_once('=') else {
                        return Err(format!("limits: {line:?} is not name = amount"));
                    };
                    let amount: f64 = amount
                        .trim()
                        .parse()
                        .map_err(|_| format!("limits: {:?} is not a number", amount.trim()))?;
                    let amount = match amount.fract() == 0.0 && amount >= 0.0 {
                        true => json!(amount as u64),
                        false => json!(amount),
                    };
                    limits.insert(name.trim().to_string(), amount);
                }
                body.insert("limits".into(), Value::Object(limits));
            }
            _ => {}
        }
    }
    Ok(Value::Object(body))
}

/// The page of a change refused: its status and the admin API's message.
fn refused(e: ApiError) -> Response {
    failure(e.status, &e.message)
}

/// The page that shows a secret, this once.
fn secret_page(status: StatusCode, title: &str, key: &Value) -> Response {
    let name = shown(&key["name"]);
    let body = html! {
        p { "The key " strong { (name) } "'s secret. Copy it now: it is not shown again." }
        p { output.secret aria-label="The secret" { (shown(&key["key"])) } }
        p { a href="/console/keys" { "Back to the keys" } }
    };
    (status, page(title, Some("/console/keys"), body)).into_response()
}

/// `POST /console/keys`: makes the key of the form.
pub(super) async fn create(
    State(gw): State<Gateway>,
    _: Signed,
    form: Result<axum::Form<Vec<(String, String)>>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = match form {
        Ok(axum::Form(form)) => form,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &format!("the form: {e}")),
    };
    let json = match new_key(&form) {
        Ok(json) => json,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &e),
    };
    let body = Bytes::from(json.to_string());
    match admin::created(&gw, &body).await {
        Ok((status, key)) => secret_page(status, "Key made", &key),
        Err(e) => refused(e),
    }
}

/// `POST /console/keys/{name}/{action}`: `rotate`, `expire` (now) or `revoke`.
pub(super) async fn act(
    State(gw): State<Gateway>,
    _: Signed,
    Path((name, act)): Path<(String, String)>,
) -> Response {
    let change = |body: Value| Bytes::from(body.to_string());
    match act.as_str() {
        "rotate" => match admin::changed(&gw, &name, &change(json!({"rotate": true}))).await {
            Ok((status, key)) => secret_page(status, "Key rotated", &key),
            Err(e) => refused(e),
        },
        "expire" => {
            let now = admin::rfc3339(crate::keys::now_ms()).unwrap_or_default();
            match admin::changed(&gw, &name, &change(json!({"expires_at": now}))).await {
                Ok(_) => see_keys(),
                Err(e) => refused(e),
            }
        }
        "revoke" => match admin::revoked(&gw, &name).await {
            Ok(_) => see_keys(),
            Err(e) => refused(e),
        },
        other => failure(
            StatusCode::NOT_FOUND,
            &format!("{other:?} is not a change of a key: rotate, expire or revoke"),
        ),
    }
}

/// Back to the keys after a change (a 303, so a reload does not post it again).
fn see_keys() -> Response {
    (
        StatusCode::SEE_OTHER,
        [(axum::http::header::LOCATION, "/console/keys")],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_of_a_new_key_is_the_admin_apis_json() {
        let form = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let made = new_key(&form(&[
            ("name", "team-x"),
            ("models", "small, large"),
            ("tags", ""),
            ("limits", "requests_per_minute = 60\nusd_per_day=1.5"),
            ("expires_at", ""),
        ]))
        .unwrap();
        assert_eq!(
            made,
            json!({"name": "team-x", "models": ["small", "large"],
                   "limits": {"requests_per_minute": 60, "usd_per_day": 1.5}})
        );
        let e = new_key(&form(&[("limits", "requests_per_minute 60")])).unwrap_err();
        assert!(e.contains("requests_per_minute 60"), "{e}");
        let e = new_key(&form(&[("limits", "rpm = many")])).unwrap_err();
        assert!(e.contains("many"), "{e}");
    }
}
