//! The picks page (`/console/picks`) and its JSON (`GET /admin/picks`): `choicewise picks
//! report`'s table, plot and recommendation for a model's recorded requests, the picks
//! computed offline on the samples the gateway kept (`[records] samples = true`).
//!
//! The newest requests of the model (at most `requests`: 500 unless asked, at most 10,000) are read into
//! a set ([`choicewise_picks::production::read`]); the items graded by feedback are measured
//! against their grades and the others against the vote of all of their samples, apart, each
//! by [`choicewise_picks::offline_summary`]. No replay: no gateway or upstream is started, and
//! nothing is asked of a model. The measuring runs off the async workers.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use choicewise_picks::production::{self, Against, Counts, Graded};
use choicewise_picks::{AnswerRule, Prefer, Recommendation, Rule, Verdict};
use choicewise_records::{RecordsQuery, Skipped};
use maud::{Markup, PreEscaped, html};
use serde_json::{Value, json};

use super::pages::given;
use super::{Signed, failure, page};
use crate::error::ApiError;
use crate::state::Gateway;

/// The requests read unless asked otherwise, and the most that may be asked.
const REQUESTS: usize = 500;
const MOST_REQUESTS: usize = 10_000;

/// The most tokens the items read may hold (about 50 bytes each, with their alternatives):
/// no more requests are read past it, whatever their samples' texts weigh.
const MOST_TOKENS: usize = 2_000_000;

/// The page's (and the JSON's) query: all text, read and checked here so that each
/// refusal names its field.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Asked {
    model: Option<String>,
    /// The answer in a sample's text: the first capture group (`vote_by`).
    answer: Option<String>,
    since: Option<String>,
    requests: Option<String>,
    prefer: Option<String>,
    within: Option<String>,
}

/// Why no report was made: a field of the query that is wrong (400, named), or the records
/// (501 without them, 503 while they are away).
enum Refused {
    Field { field: &'static str, why: String },
    Records(StatusCode, String),
}

impl Refused {
    fn field(field: &'static str, why: impl Into<String>) -> Refused {
        Refused::Field {
            field,
            why: why.into(),
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Refused::Field { .. } => StatusCode::BAD_REQUEST,
            Refused::Records(status, _) => *status,
        }
    }

    /// What is said: `field: why` for a field.
    fn message(&self) -> String {
        match self {
            Refused::Field { field, why } => format!("{field}: {why}"),
            Refused::Records(_, message) => message.clone(),
        }
    }
}

/// What was asked, read: a refusal names the field.
struct Read {
    model: String,
    answer: String,
    rule: AnswerRule,
    since_text: String,
    since_ms: i64,
    requests: usize,
    recommend: Rule,
}

/// A part of the report: its items measured against one thing.
struct Part {
    against: Against,
    out: Value,
    recommendation: Option<Recommendation>,
    plot: Option<String>,
}

/// What the page and the JSON show.
struct Report {
    read: Read,
    counts: Counts,
    skipped: Skipped,
    /// The reading stopped at [`MOST_TOKENS`].
    stopped: bool,
    /// Samples whose answer the pattern read, of all.
    matched: usize,
    samples: usize,
    graded: Graded,
    parts: Vec<Part>,
}

/// The answer pattern the model's `[models.choicewise] vote_by` sets, if any.
fn configured_answer(gw: &Gateway, model: &str) -> Option<String> {
    let default = gw.inner.picks.get(model)?.default.as_ref()?;
    Some(default.get("vote_by")?.as_str()?.to_string())
}

/// The query read and checked.
fn read_asked(gw: &Gateway, asked: &Asked) -> Result<Read, Refused> {
    let model = given(&asked.model)
        .ok_or_else(|| Refused::field("model", "give the model whose requests to measure"))?;
    if !gw.inner.models.contains_key(model) {
        let why = format!("{model:?} is not a model of this gateway");
        return Err(Refused::field("model", why));
    }
    let answer = match given(&asked.answer) {
        Some(a) => a.to_string(),
        None => configured_answer(gw, model).ok_or_else(|| {
            Refused::field(
                "answer",
                "give the pattern of the answer in a sample's text (its first group the answer); the model sets no vote_by",
            )
        })?,
    };
    // The pattern becomes the recommendation's `vote_by`: checked as the gateway checks one.
    choicewise_core::VoteKey::pattern(&answer)
        .map_err(|e| Refused::field("answer", e.to_string()))?;
    let rule = AnswerRule::pattern(&answer).map_err(|e| Refused::field("answer", e.to_string()))?;
    let since_text = given(&asked.since).unwrap_or("30d").to_string();
    let now = crate::keys::now_ms() as i64;
    let since_ms = choicewise_records::parse_since(&since_text, now)
        .map_err(|e| Refused::field("since", e.to_string()))?;
    let requests = match given(&asked.requests) {
        None => REQUESTS,
        Some(n) => (n.parse::<usize>().ok())
            .filter(|n| (1..=MOST_REQUESTS).contains(n))
            .ok_or_else(|| {
                let why = format!("{n:?} is not a number of requests from 1 to {MOST_REQUESTS}");
                Refused::field("requests", why)
            })?,
    };
    let prefer = match given(&asked.prefer) {
        None => Prefer::Tokens,
        Some(p) => p
            .parse::<Prefer>()
            .map_err(|e| Refused::field("prefer", e))?,
    };
    let within = match given(&asked.within) {
        None => 1.0,
        Some(w) => (w.parse::<f64>().ok())
            .filter(|w| (0.0..=100.0).contains(w))
            .ok_or_else(|| {
                let why = format!("{w:?} is not a number of points from 0 to 100");
                Refused::field("within", why)
            })?,
    };
    Ok(Read {
        model: model.to_string(),
        answer,
        rule,
        since_text,
        since_ms,
        requests,
        recommend: Rule { prefer, within },
    })
}

/// The report of what `asked` asks, or a refusal: its status and what was wrong.
async fn report(gw: &Gateway, asked: &Asked) -> Result<Report, Refused> {
    let read = read_asked(gw, asked)?;
    let Some(records) = gw.inner.records.get() else {
        return Err(Refused::Records(
            StatusCode::NOT_IMPLEMENTED,
            "This gateway keeps no records: configure [records] with samples = true to measure the picks on its traffic.".into(),
        ));
    };
    let database = records.database();
    let unavailable = |e: &dyn std::fmt::Display| {
        tracing::warn!(records = %database.shown(), "console: the picks' records: {e}");
        Refused::Records(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("The records could not be read: {e}"),
        )
    };
    let store = database.store().await.map_err(|e| unavailable(&e))?;
    let query = RecordsQuery::since(read.since_ms)
        .model(read.model.as_str())
        .with_samples()
        .newest_first()
        .limit(read.requests as i64);
    let recorded = production::read_at_most(&store, query, MOST_TOKENS)
        .await
        .map_err(|e| unavailable(&e))?;
    // Measured off the async workers: every pick over every item.
    tokio::task::spawn_blocking(move || measure(read, recorded))
        .await
        .map_err(|e| Refused::Records(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

/// The picks measured offline on what was read.
fn measure(read: Read, recorded: production::Recorded) -> Result<Report, Refused> {
    let production::Recorded {
        mut set,
        grades,
        counts,
        skipped,
        stopped,
    } = recorded;
    set.read_answers(&read.rule);
    let samples: usize = set.problems.iter().map(|p| p.samples.len()).sum();
    let matched = (set.problems.iter().flat_map(|p| &p.samples))
        .filter(|s| !s.answer.is_empty())
        .count();
    let mut report = Report {
        read,
        counts,
        skipped,
        stopped,
        matched,
        samples,
        graded: Graded::default(),
        parts: Vec::new(),
    };
    if set.problems.is_empty() || matched == 0 {
        return Ok(report);
    }
    let (parts, graded) = production::parts(set, &grades)
        .map_err(|e| Refused::Records(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    report.graded = graded;
    for (against, part) in parts {
        let mut out =
            choicewise_picks::offline_summary(&part, &report.read.answer, counts.logprobs);
        if let Some(label) = against.label() {
            out["measured_against"] = json!(label);
        }
        let recommendation = choicewise_picks::recommend(&out, &report.read.recommend);
        out["recommendation"] = recommendation.as_ref().map_or(Value::Null, |r| r.to_json());
        let plot = match choicewise_picks::plot::picks_svg(&out) {
            Ok(svg) => Some(svg),
            Err(e) => {
                tracing::warn!("console: the picks' plot not drawn: {e}");
                None
            }
        };
        report.parts.push(Part {
            against,
            out,
            recommendation,
            plot,
        });
    }
    Ok(report)
}

impl Report {
    /// The JSON of `GET /admin/picks`.
    fn json(&self) -> Value {
        let c = &self.counts;
        json!({
            "object": "picks.report",
            "model": self.read.model,
            "answer": self.read.answer,
            "since_ms": self.read.since_ms,
            "measured": "offline",
            "requests_read": c.requests,
            "requests_asked_at_most": self.read.requests,
            "items": c.items,
            "samples": c.samples,
            "logprobs": c.logprobs,
            "requests_with_fewer_samples": c.single,
            "requests_cut_left_out": c.cut,
            "graded_items": c.graded,
            "graded_answer_not_among_samples": c.unplaced,
            "rows_left_out": self.skipped.count,
            "stopped_at_tokens": self.stopped.then_some(MOST_TOKENS),
            "answers_matched": {"samples": self.matched, "of": self.samples},
            "parts": self.parts.iter().map(|p| p.out.clone()).collect::<Vec<_>>(),
        })
    }
}

/// `GET /admin/picks`: the report as JSON, for scripts (the operator's key).
pub(crate) async fn json(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    uri: Uri,
    asked: Result<Query<Asked>, QueryRejection>,
) -> Response {
    crate::admin::as_operator(&gw, &headers, &uri, async {
        let Query(asked) = asked.map_err(|e| ApiError::invalid(e.body_text()))?;
        match report(&gw, &asked).await {
            Ok(report) => Ok(axum::Json(report.json()).into_response()),
            Err(refused) => Err(refusal(&refused)),
        }
    })
    .await
}

/// A refusal in the admin API's shape: a bad field named as its `param`.
fn refusal(refused: &Refused) -> ApiError {
    match refused {
        Refused::Field { field, .. } => ApiError::invalid(refused.message()).param(field),
        Refused::Records(status, message) => ApiError::new(*status, "api_error", message.clone()),
    }
}

/// `GET /console/picks`: the form, and the report when a model is given.
pub(super) async fn show(
    State(gw): State<Gateway>,
    _: Signed,
    asked: Result<Query<Asked>, QueryRejection>,
) -> Response {
    let asked = match asked {
        Ok(Query(asked)) => asked,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let form = form(&gw, &asked);
    if given(&asked.model).is_none() {
        let body = html! {
            (form)
            p { "Choose a model: its newest requests that ran several samples are measured, each pick computed on the samples they kept ("
                code { "[records] samples = true" } "), as " code { "choicewise picks report" } " does, without a replay." }
        };
        return page("Picks", Some("/console/picks"), body).into_response();
    }
    match report(&gw, &asked).await {
        Ok(report) => {
            let body = html! { (form) (shown(&report)) };
            page("Picks", Some("/console/picks"), body).into_response()
        }
        Err(refused) => {
            let body = html! { (form) p.error role="alert" { (refused.message()) } };
            (
                refused.status(),
                page("Picks", Some("/console/picks"), body),
            )
                .into_response()
        }
    }
}

fn form(gw: &Gateway, asked: &Asked) -> Markup {
    let model = given(&asked.model);
    let answer = given(&asked.answer)
        .map(str::to_string)
        .or_else(|| model.and_then(|m| configured_answer(gw, m)));
    let prefer = given(&asked.prefer).unwrap_or("tokens");
    html! {
        form.filters method="get" action="/console/picks" {
            label for="model" { "Model" }
            select #model name="model" required {
                @for m in &gw.inner.names {
                    option value=(m) selected[Some(m.as_str()) == model] { (m) }
                }
            }
            label for="answer" { "Answer" }
            input #answer name="answer" value=[answer] placeholder="#### (\\d+)" aria-describedby="answer-help";
            label for="since" { "Since" }
            input #since name="since" value=(given(&asked.since).unwrap_or("30d")) size="8";
            label for="requests" { "Requests" }
            input #requests name="requests" type="number" min="1" max=(MOST_REQUESTS)
                value=(given(&asked.requests).map_or(REQUESTS.to_string(), str::to_string));
            label for="prefer" { "Prefer" }
            select #prefer name="prefer" {
                @for p in ["tokens", "accuracy"] {
                    option value=(p) selected[p == prefer] { (p) }
                }
            }
            button type="submit" { "Measure" }
            p.help #answer-help { "the regular expression whose first group is a sample's answer (the votes' vote_by); empty: the model's own" }
        }
    }
}

/// `n` things: `1 item`, `2 items`.
fn counted(n: usize, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}

/// A difference with its interval, in points: `+2.5 [-1.0, +6.0]`.
fn points(d: &Value) -> String {
    let (Some(diff), Some(low), Some(high)) = (
        d["difference"].as_f64(),
        d["interval"][0].as_f64(),
        d["interval"][1].as_f64(),
    ) else {
        return "—".into();
    };
    format!(
        "{:+.1} [{:+.1}, {:+.1}]",
        100.0 * diff,
        100.0 * low,
        100.0 * high
    )
}

fn shown(r: &Report) -> Markup {
    let c = &r.counts;
    html! {
        p #picks-read {
            (counted(c.requests, "request")) " of " strong { (r.read.model) } " since " (r.read.since_text)
            " read (the newest, at most " (r.read.requests) "): "
            (c.items) " ran two samples or more (" (c.samples) " samples"
            @if c.logprobs && c.items > 0 { ", with their log-probabilities" }
            @else if c.items > 0 { ", without log-probabilities: no confidence picks" }
            "); " (c.single) " with fewer"
            @if c.cut > 0 { ", " (c.cut) " with their texts cut (left out)" }
            @if c.graded > 0 { "; " (c.graded) " graded by feedback" }
            @if c.unplaced > 0 { ", " (c.unplaced) " graded but their answer not among the samples kept" }
            ". The picks are computed offline on these samples, not replayed."
            @if r.stopped { " The reading stopped once the items held " (MOST_TOKENS) " tokens: ask fewer requests, or a shorter time, to measure on all of them." }
        }
        @if !r.skipped.is_empty() {
            p.error role="alert" { "Rows left out, unreadable: " (r.skipped.to_string()) }
        }
        @if c.items == 0 {
            p { "No request of this model kept two samples or more since then: nothing to measure. The samples are kept with "
                code { "[records] samples = true" } "." }
        } @else if r.matched == 0 {
            p.error role="alert" { "The answer pattern matched none of the " (r.samples)
                " samples: every pick would score 0%. Give the pattern of the answers in the samples' text, its first group the answer." }
        } @else {
            @if r.matched < r.samples {
                p { "The answer pattern matched " (r.matched) " of the " (r.samples) " samples: the others have no answer." }
            }
            @for part in &r.parts {
                (part_shown(r, part))
            }
        }
    }
}

fn part_shown(r: &Report, part: &Part) -> Markup {
    let out = &part.out;
    let id = match part.against {
        Against::Feedback => "feedback",
        _ => "agreement",
    };
    let measured = part.against.measured();
    let figure = match part.against {
        Against::Vote => "Agreement",
        Against::Feedback => "Accuracy by feedback",
        Against::Answers => "Accuracy",
    };
    html! {
        section aria-labelledby=(id) {
            h2 #(id) {
                @match part.against {
                    Against::Feedback => "Graded by feedback: ",
                    _ => "Without a grade: ",
                }
                (counted(out["problems"].as_u64().unwrap_or(0) as usize, "item"))
            }
            @match part.against {
                Against::Feedback => p { "Each pick's accuracy on the items graded by "
                    code { "POST /v1/feedback" } " (" (r.graded.right) " graded right, " (r.graded.wrong)
                    " wrong; a pick answering otherwise on an item graded wrong counts wrong, so each figure is a lower bound)." },
                _ => p { "No answers are known: each pick's figure is its " strong { "agreement" }
                    " with the vote of all of an item's samples, not a right answer." },
            }
            div.scroll {
                table {
                    caption.hidden { "The picks, " (measured) " and tokens" }
                    thead { tr {
                        th scope="col" { "Pick" }
                        th scope="col" { (figure) " [95% interval]" }
                        @for name in ["vs the best, points", "vs single, points", "Tokens", "× single", "Samples started"] {
                            th scope="col" { (name) }
                        }
                    } }
                    tbody {
                        @let single = choicewise_picks::find(out, "single").and_then(|s| s["tokens"].as_f64()).filter(|t| *t > 0.0);
                        @for row in out["picks"].as_array().into_iter().flatten() {
                            tr {
                                th scope="row" { (row["name"].as_str().unwrap_or("")) }
                                td.number { (choicewise_picks::accuracy_text(row, 1)) }
                                td.number { (points(&row["vs_best"])) }
                                td.number { (points(&row["vs_single"])) }
                                td.number { (row["tokens"].as_u64().map_or("—".into(), |t| t.to_string())) }
                                td.number { @match (row["tokens"].as_f64(), single) {
                                    (Some(t), Some(s)) => (format!("{:.2}x", t / s)),
                                    _ => "—",
                                } }
                                td.number { (row["samples_started"].as_u64().map_or("—".into(), |t| t.to_string())) }
                            }
                        }
                    }
                }
            }
            @if let Some(svg) = &part.plot {
                figure.plot {
                    // plotters' document of this crate's figures: the picks' names and
                    // numbers, none of the records' text.
                    (PreEscaped(svg.as_str()))
                    figcaption { (measured) " against tokens generated per item, pick by pick (offline)" }
                }
            }
            (recommendation(part, measured, &out["problems"]))
        }
    }
}

fn recommendation(part: &Part, measured: &str, items: &Value) -> Markup {
    html! {
        @match &part.recommendation {
            None => p.recommendation { "No recommendation: no pick could be measured." },
            Some(Recommendation { pick, accuracy, verdict: Verdict::Undecided { versus, difference, interval, items_needed }, .. }) => p.recommendation {
                "No recommendation: " strong { (pick) } " (" (format!("{:.1}%", 100.0 * accuracy)) " " (measured)
                ") cannot be told apart from " (versus) " on " (items) " items (the difference "
                (format!("{:+.1} points, 95% interval [{:+.1}, {:+.1}]", 100.0 * difference, 100.0 * interval.0, 100.0 * interval.1)) "); "
                @match items_needed { Some(n) => { "about " (n) " items would tell them apart." } None => "they tie." }
            },
            Some(rec) => {
                p.recommendation {
                    "Recommendation: " strong { (rec.pick) } " (" (format!("{:.1}%", 100.0 * rec.accuracy)) " " (measured) ", "
                    (format!("{:.2}x", rec.tokens_vs_single)) " the tokens of single)."
                }
                @if rec.config.is_empty() {
                    p { "It needs no configuration: one sample, a plain request." }
                } @else {
                    p { "To deploy it, put this in the model's " code { "[[models]]" } " entry:" }
                    pre.config { code { (rec.config) } }
                }
            }
        }
    }
}
