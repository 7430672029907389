//! The console's pages over the records: the overview, the last requests (newest first, a
//! page at a time), one request with its samples, and the usage by key, model and day.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use choicewise_records::{By, RecordsQuery, RequestRecord, Store, UsageQuery, UsageRow};
use maud::{Markup, html};

use super::{Signed, failure, page};
use crate::admin::rfc3339;
use crate::state::Gateway;

/// Requests on a page of the listing.
const PAGE: i64 = 50;

/// The records database, connected: the 501 page without `[records]`, 503 while it is away.
async fn store(gw: &Gateway) -> Result<Store, Response> {
    let Some(records) = gw.inner.records.get() else {
        return Err(failure(
            StatusCode::NOT_IMPLEMENTED,
            "This gateway keeps no records: configure [records] to see its requests and usage.",
        ));
    };
    let database = records.database();
    database.store().await.map_err(|e| {
        tracing::warn!(records = %database.shown(), "console: the records database: {e}");
        failure(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("The records database is unavailable: {e}"),
        )
    })
}

/// A time in milliseconds since the Unix epoch, as RFC 3339.
fn when(ms: i64) -> String {
    u64::try_from(ms)
        .ok()
        .and_then(rfc3339)
        .unwrap_or_else(|| ms.to_string())
}

/// A time as a listing shows it: `2026-11-29 03:13:25` (UTC; the full time in its
/// `datetime`).
fn short(ms: i64) -> String {
    let full = when(ms);
    match full.get(..19) {
        Some(head) if full.len() > 19 => head.replace('T', " "),
        _ => full,
    }
}

fn dollars(usd: f64) -> String {
    format!("${usd:.4}")
}

/// `GET /console`: what the console shows, and the last day at a glance.
pub(super) async fn overview(State(gw): State<Gateway>, _: Signed) -> Response {
    let keys = gw.inner.keys.snapshot().all_named().count();
    let day = match gw.inner.records.get() {
        None => None,
        Some(_) => {
            let since = crate::keys::now_ms() as i64 - 86_400_000;
            match store(&gw).await {
                Ok(store) => Some(
                    (store.usage(&UsageQuery::new(vec![]).since(since)).await)
                        .map(|rows| rows.into_iter().next())
                        .map_err(|e| e.to_string()),
                ),
                Err(_) => Some(Err("the records database is unavailable".into())),
            }
        }
    };
    let body = html! {
        section aria-labelledby="day" {
            h2 #day { "The last 24 hours" }
            @match &day {
                None => p { "No records are kept ([records] is not configured)." },
                Some(Err(e)) => p.error role="alert" { (e) },
                Some(Ok(None)) => p { "No request." },
                Some(Ok(Some(row))) => dl.figures {
                    dt { "Requests" } dd { (row.requests) }
                    dt { "Failed" } dd { (row.failed) }
                    dt { "Prompt tokens" } dd { (row.prompt_tokens) }
                    dt { "Completion tokens" } dd { (row.completion_tokens) }
                    dt { "Cost" } dd { (dollars(row.cost_usd)) }
                },
            }
        }
        section aria-labelledby="pages" {
            h2 #pages { "Pages" }
            ul {
                li { a href="/console/requests" { "Requests" } ": the last requests, newest first, each with its samples when they are kept." }
                li { a href="/console/usage" { "Usage" } ": requests, tokens and cost by key, model and day." }
                li { a href="/console/picks" { "Picks" } ": what each pick (a vote, the first to finish, the confidence picks) would have answered on a model's recorded samples, and the one to deploy." }
                li { a href="/console/keys" { "Keys" } " (" (keys) "): each key's limits and what is left of them; keys made, rotated, expired and revoked." }
            }
        }
    };
    page("Console", Some("/console"), body).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct Listing {
    key: Option<String>,
    model: Option<String>,
    /// The last request of the page before: `AT_MS:ID`.
    after: Option<String>,
}

/// A filter's value: none when empty.
pub(super) fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// `GET /console/requests`: the last requests, newest first, [`PAGE`] at a time, by key and
/// model.
pub(super) async fn requests(
    State(gw): State<Gateway>,
    _: Signed,
    listing: Result<Query<Listing>, QueryRejection>,
) -> Response {
    let listing = match listing {
        Ok(Query(listing)) => listing,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let store = match store(&gw).await {
        Ok(store) => store,
        Err(refused) => return refused,
    };
    let mut query = RecordsQuery::since(i64::MIN).newest_first().limit(PAGE);
    if let Some(key) = given(&listing.key) {
        query = query.key(key);
    }
    if let Some(model) = given(&listing.model) {
        query = query.model(model);
    }
    if let Some(after) = given(&listing.after) {
        let Some((at_ms, id)) = after
            .split_once(':')
            .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id)))
        else {
            return failure(
                StatusCode::BAD_REQUEST,
                &format!("after: {after:?} is not AT_MS:ID"),
            );
        };
        query = query.after(at_ms, id);
    }
    let mut reader = store.record_reader(query);
    let mut rows = Vec::new();
    loop {
        match reader.next().await {
            Ok(Some(r)) => rows.push(r),
            Ok(None) => break,
            Err(e) => {
                return failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("The records could not be read: {e}"),
                );
            }
        }
    }
    let skipped = reader.skipped().to_string();
    let next = (rows.len() as i64 == PAGE).then(|| {
        let last = &rows[rows.len() - 1];
        let mut link = format!(
            "/console/requests?after={}:{}",
            last.at_ms,
            encoded(&last.id)
        );
        for (name, value) in [
            ("key", given(&listing.key)),
            ("model", given(&listing.model)),
        ] {
            if let Some(value) = value {
                link.push_str(&format!("&{name}={}", encoded(value)));
            }
        }
        link
    });
    let body = html! {
        form.filters method="get" action="/console/requests" role="search" {
            label for="key" { "Key" }
            input #key name="key" value=[given(&listing.key)];
            label for="model" { "Model" }
            input #model name="model" value=[given(&listing.model)];
            button type="submit" { "Filter" }
        }
        @if !reader.skipped().is_empty() {
            p.error role="alert" { "Rows left out, unreadable: " (skipped) }
        }
        div data-live[listing.after.is_none()] {
            @if rows.is_empty() {
                p { "No request." }
            } @else {
                (request_table(&rows))
            }
        }
        @if let Some(next) = next {
            p { a href=(next) rel="next" { "Older requests" } }
        }
    };
    page("Requests", Some("/console/requests"), body).into_response()
}

/// `value` for a query string: every byte but letters, digits and `-._~` percent-encoded.
pub(super) fn encoded(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn request_table(rows: &[RequestRecord]) -> Markup {
    html! {
        div.scroll {
            table {
                caption.hidden { "The last requests, newest first" }
                thead {
                    tr {
                        @for name in ["Arrived", "Request", "Key", "Model", "Pick", "Samples", "Status",
                                      "Ended", "First byte", "Total", "Tokens", "Cost"] {
                            th scope="col" { (name) }
                        }
                    }
                }
                tbody {
                    @for r in rows {
                        tr data-id=(r.id) {
                            td.when { time datetime=(when(r.at_ms)) { (short(r.at_ms)) } }
                            td { a href={ "/console/requests/" (encoded(&r.request_id)) } { (r.request_id) } }
                            td { (r.key) }
                            td { (r.model) }
                            td { (r.pick.as_deref().unwrap_or("")) }
                            td { (r.samples_started)
                                @if r.samples_cancelled > 0 { ", " (r.samples_cancelled) " cancelled" }
                                @if r.samples_failed > 0 { ", " (r.samples_failed) " failed" } }
                            td { (r.status) }
                            td { (r.ended) }
                            td.number { @if let Some(ms) = r.first_byte_ms { (format!("{ms:.0} ms")) } }
                            td.number { (format!("{:.0} ms", r.total_ms)) }
                            td.number { (r.prompt_tokens) " + " (r.completion_tokens) @if r.estimated { " (estimated)" } }
                            td.number { @if let Some(usd) = r.cost_usd { (dollars(usd)) } }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /console/requests/{id}`: a request's record and its samples (when `[records]
/// samples = true` kept them), and its grade.
pub(super) async fn request(
    State(gw): State<Gateway>,
    _: Signed,
    Path(id): Path<String>,
) -> Response {
    let store = match store(&gw).await {
        Ok(store) => store,
        Err(refused) => return refused,
    };
    let query = RecordsQuery::since(i64::MIN)
        .request_id(id.as_str())
        .with_samples();
    let (records, grade) = match (store.records(&query).await, store.grade(&id).await) {
        (Ok(records), Ok(grade)) => (records, grade),
        (Err(e), _) | (_, Err(e)) => {
            return failure(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("The record could not be read: {e}"),
            );
        }
    };
    if records.is_empty() {
        return failure(
            StatusCode::NOT_FOUND,
            &format!("No request {id:?} is on record."),
        );
    }
    let body = html! {
        (request_table(&records))
        @if let Some(grade) = &grade {
            section aria-labelledby="grade" {
                h2 #grade { "Grade" }
                p { (grade.outcome) " (" (grade.score) "), by " (grade.by)
                    @if let Some(source) = &grade.source { ", " (source) } }
            }
        }
        @for r in &records {
            section aria-labelledby={ "samples-" (r.id) } {
                h2 id={ "samples-" (r.id) } { "Samples" }
                @if r.samples.is_empty() {
                    p { "No sample is kept: [records] samples = true keeps each sample's text." }
                }
                @let answer = r.samples.iter().find(|s| s.output == Some(0)).map(|s| s.sample);
                @if r.samples_cut {
                    p { "Texts were cut to fit the record." }
                }
                ol.samples {
                    @for s in &r.samples {
                        li {
                            h3 { "Sample " (s.sample) }
                            p.meta {
                                "finish: " (s.finish)
                                @if let Some(place) = s.place { ", finished " (place + 1) @if place == 0 { "st" } @else if place == 1 { "nd" } @else if place == 2 { "rd" } @else { "th" } }
                                ", tokens " (s.prompt_tokens) " + " (s.completion_tokens)
                                @if Some(s.sample) == answer { strong { ", the answer" } }
                            }
                            @if let Some(text) = &s.content { pre.text { (text) } }
                            @if let Some(message) = &s.message {
                                details {
                                    summary { "The whole message (JSON)" }
                                    pre.text.message { (message) }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page(&format!("Request {id}"), Some("/console/requests"), body).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct Usage {
    by: Option<String>,
    since: Option<String>,
}

/// `GET /console/usage`: `choicewise usage`'s table (`by`, `since` as it takes them), and
/// the tokens and cost of each day as bars.
pub(super) async fn usage(
    State(gw): State<Gateway>,
    _: Signed,
    asked: Result<Query<Usage>, QueryRejection>,
) -> Response {
    let asked = match asked {
        Ok(Query(asked)) => asked,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let by_text = given(&asked.by).unwrap_or("key,model").to_string();
    let since_text = given(&asked.since).unwrap_or("30d").to_string();
    let now = crate::keys::now_ms() as i64;
    let by = match By::parse_list(&by_text) {
        Ok(by) => by,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &format!("by: {e}")),
    };
    let since = match choicewise_records::parse_since(&since_text, now) {
        Ok(since) => since,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &format!("since: {e}")),
    };
    let store = match store(&gw).await {
        Ok(store) => store,
        Err(refused) => return refused,
    };
    let read = async {
        let rows = store
            .usage(&UsageQuery::new(by.clone()).since(since))
            .await?;
        let days = store
            .usage(&UsageQuery::new(vec![By::Day]).since(since))
            .await?;
        Ok::<_, choicewise_records::RecordsError>((rows, days))
    };
    let (rows, days) = match read.await {
        Ok(read) => read,
        Err(e) => {
            return failure(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("The usage could not be read: {e}"),
            );
        }
    };
    let body = html! {
        form.filters method="get" action="/console/usage" {
            label for="by" { "By" }
            input #by name="by" value=(by_text) aria-describedby="by-help";
            label for="since" { "Since" }
            input #since name="since" value=(since_text) aria-describedby="since-help";
            button type="submit" { "Show" }
            p.help #by-help { "a comma-separated list of key, model, day and api" }
            p.help #since-help { "7d, 24h, or a date (2026-11-01), as choicewise usage --since takes it" }
        }
        @if !days.is_empty() {
            section aria-labelledby="days" {
                h2 #days { "By day" }
                (day_chart(&days))
            }
        }
        section aria-labelledby="table" {
            h2 #table { "By " (by_text) }
            @if rows.is_empty() { p { "No request since then." } } @else { (usage_table(&by, &rows)) }
        }
    };
    page("Usage", Some("/console/usage"), body).into_response()
}

fn usage_table(by: &[By], rows: &[UsageRow]) -> Markup {
    html! {
        div.scroll {
            table {
                thead {
                    tr {
                        @for name in by.iter().map(|b| b.as_str()).chain(
                            ["requests", "failed", "prompt tokens", "completion tokens", "cost"]) {
                            th scope="col" { (name) }
                        }
                    }
                }
                tbody {
                    @for row in rows {
                        tr {
                            @for (_, value) in &row.group { td { (value) } }
                            td.number { (row.requests) }
                            td.number { (row.failed) }
                            td.number { (row.prompt_tokens) }
                            td.number { (row.completion_tokens) }
                            td.number { (dollars(row.cost_usd)) }
                        }
                    }
                }
            }
        }
    }
}

/// The tokens of each day as bars (an SVG drawn here), with the figures as a table for
/// those who do not see the chart.
fn day_chart(days: &[UsageRow]) -> Markup {
    let tokens = |r: &UsageRow| r.prompt_tokens + r.completion_tokens;
    let most = days.iter().map(tokens).max().unwrap_or(0).max(1) as f64;
    let (width, height, gap, label) = (36.0, 120.0, 8.0, 18.0);
    let total_width = (days.len() as f64 * (width + gap)).max(width);
    html! {
        figure {
            svg.chart role="img" aria-labelledby="chart-title" viewBox={ "0 0 " (total_width) " " (height + label) } width=(total_width) height=(height + label) {
                title #chart-title { "Tokens by day, the most " (most as u64) }
                @for (k, day) in days.iter().enumerate() {
                    @let h = tokens(day) as f64 / most * height;
                    @let x = k as f64 * (width + gap);
                    @let date = day.group.first().map(|g| g.1.as_str()).unwrap_or("");
                    rect x=(x) y=(height - h) width=(width) height=(h) {
                        title { (date) ": " (tokens(day)) " tokens, " (day.requests) " requests, " (dollars(day.cost_usd)) }
                    }
                    text x=(x + width / 2.0) y=(height + label - 4.0) text-anchor="middle" { (date.get(5..).unwrap_or(date)) }
                }
            }
            figcaption { "Tokens by day (prompt and completion), the most " (most as u64) "; each bar's figures on hover and below." }
        }
        details {
            summary { "The figures by day" }
            (usage_table(&[By::Day], days))
        }
    }
}
