//! A client API's route: a request of any client API ([`ClientApi`]), from its head to its
//! answer. Its key and client from the admission layers, its body read and checked by its
//! API, its model's policy applied and its limits reserved, its samples opened
//! ([`crate::upstream`]) and picked, and the answer written in its API's terms
//! ([`crate::answer`]). The route of each API is [`answer`], instantiated for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderName, StatusCode};
use axum::response::Response;
use choicewise_core::chunks::Envelope;

use crate::admission::auth;
use crate::admission::layers;
use crate::answer::ending::ErrorType;
use crate::answer::finish::{Arrival, Asked, Finish, Opening, Recorded};
use crate::answer::respond::{self, Answer};
use crate::answer::write;
use crate::api::chat::relay;
use crate::api::{ClientApi, Head, Read, Refused};
use crate::error::ApiError;
use crate::keys;
use crate::request::ChatRequest;
use crate::state::Gateway;
use crate::upstream::engine::{Picked, Run};
use crate::upstream::open;
use crate::wellformed::{self, Scan};
use crate::{HostedTools, api};

/// A request of the client API `A` (the route of each API is this handler, instantiated for
/// it), answered in that API's terms, its failures included; a request for its token count
/// ([`ClientApi::asks`]) is [`crate::count::api_count`]'s. Its record ([`Finish`]) is made
/// as it arrives and told what each step learned: [`prepare`] (what it asked for, its plan,
/// its reservation), then [`run`], which owns it while its samples open and are picked; it
/// goes with its answer's body, which records it when it ends.
pub(crate) async fn answer<A: ClientApi>(
    State(gw): State<Gateway>,
    request: axum::extract::Request,
) -> Response {
    // Another of the API's methods on its route: its token count.
    if A::asks(request.uri().path()) == api::Asks::CountTokens {
        return crate::count::api_count::<A>(gw, request).await;
    }
    let (parts, body) = request.into_parts();
    let client = auth::client(
        &gw.inner.keys.load(),
        &parts.headers,
        &parts.uri,
        &parts.extensions,
    );
    let counted_as = parts
        .extensions
        .get::<crate::metrics::RequestModel>()
        .cloned();
    let caller = (parts.extensions.get::<keys::Caller>().cloned()).unwrap_or_default();
    let arrival = Arrival {
        api: A::LABEL,
        key: caller.name(),
        counted_as,
    };
    let mut finish = Finish::new(gw.sinks(), &parts.headers, arrival);
    let head = Arc::new(parts);
    let request_id = finish.labels().request_id.clone();
    let mut learned = Learned::<A> {
        asked: None,
        kept: None,
        rate: Vec::new(),
    };
    let planned = prepare::<A>(&gw, head, body, &caller, client, &request_id, &mut learned).await;
    let Learned { asked, kept, rate } = learned;
    if let Some(asked) = asked {
        finish.read(asked);
    }
    let (mut finish, served) = match planned {
        Ok(planned) => Box::pin(run::<A>(&gw, planned, finish)).await,
        Err(e) => (finish, Err(e)),
    };
    let label = layers::ModelLabel(finish.labels().model.clone());
    let tries = finish.tries();
    let mut response = match served {
        Ok(Served::Picked(ready)) => ready.answer(finish).await,
        Ok(Served::Relayed(relayed)) => relay::respond(finish, relayed),
        Err(e) => {
            finish.refused(&e);
            // Recorded when its body ends, as every answer is.
            let refused = A::refused(kept.as_ref(), e);
            refused.map(|body| Body::new(Recorded::new(body, finish)))
        }
    };
    // Every answer's headers are sent after its first tries ended: how many there were.
    if let Some(tries) = tries {
        const TRIES: HeaderName = HeaderName::from_static("x-choicewise-tries");
        let count = tries.lock().map_or(0, |t| t.len());
        response.headers_mut().insert(TRIES, count.into());
    }
    // A limited key's answer says what is left of its limits.
    crate::error::with_headers(&mut response, rate);
    response.extensions_mut().insert(label);
    response
}

/// Bodies of at most this many bytes without a `vote_by` are parsed on the worker that
/// read them (see [`parse`]).
const INLINE_PARSE_BYTES: usize = 16 * 1024;

/// Whether a request body of `len` bytes, scanned (`scan`), is parsed on the worker: at most
/// [`INLINE_PARSE_BYTES`], and no `vote_by` to compile, nor a `\u` escape that could spell
/// one.
fn parses_inline(len: usize, scan: Option<&Scan>) -> bool {
    len <= INLINE_PARSE_BYTES && scan.is_some_and(|s| !s.vote_by && !s.escapes)
}

/// What [`prepare`] learned of a request besides its plan: what it asked for (once read),
/// what its API keeps of it for its errors ([`ClientApi::kept_for_errors`]), and the
/// `x-ratelimit-*` headers its reservation left.
struct Learned<A: ClientApi> {
    asked: Option<Asked>,
    kept: Option<A::Reply>,
    rate: crate::error::Headers,
}

/// A request planned and its limits reserved, ready for its samples.
struct Planned<R> {
    plan: Plan<R>,
    reservation: Option<crate::quota::Reservation>,
    /// The console's playground, which follows the samples beside the pick.
    watch: Option<crate::console::Watch>,
}

/// Prepares a request up to its samples, in steps: [`read`](layers::read_body) its body,
/// [`parse`] it, find its model (or [`not_found`]) and check its key [`allows`](keys::Caller::allows) it,
/// [`plan`] its run, [`reserve`] what it may take. Each step returns what it learned, and
/// so does this function (in `learned`, on a refusal too); the request's record is told
/// by the handler.
async fn prepare<A: ClientApi>(
    gw: &Gateway,
    head: Arc<Head>,
    body: Body,
    caller: &keys::Caller,
    client: crate::upstream::resilience::ClientId,
    request_id: &str,
    learned: &mut Learned<A>,
) -> Result<Planned<A::Reply>, ApiError> {
    // The key was checked and a slot taken by the layers (`Gateway::router`).
    let bytes = layers::read_body(&gw.inner.admission, body).await?;
    let len = bytes.len();
    let watch = head.extensions.get::<crate::console::Watch>().cloned();
    let parsed = match parse::<A>(gw, head, bytes).await {
        Ok(parsed) => parsed,
        Err(refused) => {
            let Refused { error, asked } = *refused;
            learned.asked = asked.map(|model| Asked {
                configured: gw.inner.models.contains_key(&model),
                model,
                stream: false,
            });
            return Err(error);
        }
    };
    learned.kept = A::kept_for_errors(&parsed.reply, parsed.req.stream);
    let model = gw.inner.models.get(&parsed.req.model).cloned();
    learned.asked = Some(Asked {
        model: parsed.req.model.clone(),
        configured: model.is_some(),
        stream: parsed.req.stream,
    });
    // Parsed: the memory mark checked again before the request goes on.
    layers::parsed(&gw.inner.admission, len)?;
    let model = model.ok_or_else(|| not_found(&parsed.req.model))?;
    caller.allows(&parsed.req.model)?;
    let mut plan = plan(gw, parsed, model, client)?;
    // Before any upstream is asked: what the request may take, reserved of its limits.
    let reserved = Box::pin(reserve(gw, caller, &plan, request_id)).await?;
    // The room reserved for a sample that states no limit is the room it is held to.
    plan.opener.room = reserved.room;
    plan.opener.bound = reserved.bound;
    if let Some(reservation) = &reserved.reservation {
        learned.rate = reservation.rate_headers();
    }
    Ok(Planned {
        plan,
        reservation: reserved.reservation,
        watch,
    })
}

/// Runs a planned request up to its answer: [`start`] its samples, which its record
/// (`finish`) holds from then on, and pick them ([`Run::pick`]); or, when it can be
/// relayed ([`relay::relays`]), open its one upstream request ([`open_relayed`]). The
/// record goes back with what is ready to be answered, or the refusal.
async fn run<A: ClientApi>(
    gw: &Gateway,
    planned: Planned<A::Reply>,
    mut finish: Finish,
) -> (Finish, Result<Served<A>, ApiError>) {
    let Planned {
        plan,
        reservation,
        watch,
    } = planned;
    let Plan {
        req,
        reply,
        opener,
        apis,
        estimate,
        dropped,
    } = plan;
    finish.opening(Opening {
        tries: opener.tries.clone(),
        limits_set: opener.limits_set.clone(),
        reservation,
    });
    let request_id = finish.labels().request_id.clone();
    let deadlines = Deadlines::new(gw, finish.arrived(), req.policy.deadline());
    let keeps = watch.is_some() || gw.inner.traces.is_some() || finish.records_samples();
    if A::LABEL == crate::api::chat::Chat::LABEL && relay::relays(&req, &opener, keeps) {
        let relayed = Box::pin(open_relayed(gw, opener, &req, &deadlines, &request_id)).await;
        return (finish, relayed.map(Served::Relayed));
    }
    // Boxed, as the answer is: a request's futures stay small where they are moved.
    let run = match Box::pin(start(opener, &req, &deadlines, &request_id)).await {
        Ok(run) => run,
        Err(e) => return (finish, Err(e)),
    };
    if let Some(watch) = watch {
        watch.tap(&run);
    }
    let span = match (&gw.inner.traces, finish.take_parent()) {
        (Some(traces), Some(parent)) => Some(traces.request(parent, &req, apis.into_iter())),
        _ => None,
    };
    // The span names how each sample ended, and its parts; the records' samples keep them.
    let keep = span.is_some() || finish.records_samples();
    // The record holds the run from its start: a client gone from here on is recorded.
    finish.started(run, span);
    let run = finish.running_mut().run_mut();
    run.keep_messages(keep);
    let left = (deadlines.picked_by()).saturating_duration_since(Instant::now());
    let picked = run.pick(&req, left).await;
    let rule = req.policy.rule();
    if rule != choicewise_core::PickRule::All {
        finish.picked(rule.as_str(), &picked);
    }
    if let Some((why, e)) = unpicked(&picked, &deadlines, &request_id, &req.model) {
        // Boxed: the failure path's future is not carried by every request's.
        Box::pin(finish.fail(why)).await;
        return (finish, Err(e));
    }
    let envelope = Envelope::new(&req.model);
    finish.response_id(&envelope.id);
    let closing = write::Closing::new(
        gw.inner.closing.subscribe(),
        deadlines.request,
        (&request_id, req.model.as_str(), deadlines.request_s),
    );
    let ready = Ready {
        picked,
        req,
        answer: Answer {
            reply,
            envelope,
            estimate,
        },
        closing,
        dropped,
    };
    (finish, Ok(Served::Picked(ready)))
}

/// Opens a relayed request's one upstream request, as its first sample would be opened
/// (its tries, its fallbacks), by the time its pick would be made.
async fn open_relayed(
    gw: &Gateway,
    opener: open::Opener,
    req: &ChatRequest,
    deadlines: &Deadlines,
    request_id: &str,
) -> Result<relay::Relayed, ApiError> {
    let upstream = crate::upstream::engine::first_upstream(&opener.model.routes, req);
    let samples: Vec<u32> = (0..req.samples.max(1)).collect();
    let opening = opener.open(upstream, &samples);
    let Ok(opened) = tokio::time::timeout_at(deadlines.picked_by().into(), opening).await else {
        return Err(deadlines.passed(
            request_id,
            &req.model,
            "while its first samples were opened",
        ));
    };
    let closing = write::Closing::new(
        gw.inner.closing.subscribe(),
        deadlines.request,
        (request_id, req.model.as_str(), deadlines.request_s),
    );
    Ok(relay::Relayed {
        opened: opened?,
        samples: req.samples.max(1),
        opener,
        envelope: Envelope::new(&req.model),
        asked: (req.logprobs, req.include_usage),
        closing,
    })
}

/// What a request's run made ready to answer: a pick's samples, or a relayed upstream.
// Made once a request and moved once, into its answer: a box would be an allocation a
// request for nothing.
#[allow(clippy::large_enum_variant)]
enum Served<A: ClientApi> {
    Picked(Ready<A>),
    Relayed(relay::Relayed),
}

/// The 404 that says there is no configured model `name`.
fn not_found(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("the model {name:?} does not exist here (GET /v1/models lists them)"),
    )
    .code("model_not_found")
}

/// Parses a body of the client's API into the request to run. Parsing a body of up to
/// max_body_bytes (translating it from the client's API) and compiling its vote_by take
/// CPU time: on a blocking thread, never on the workers that serve every connection. A
/// small body without a vote_by (nor a `\u` escape that could spell one) parses in
/// microseconds, less than the two thread hand-offs of the blocking pool: on the worker.
/// Either way a panic while parsing is the client's 400, not a dropped connection.
///
/// The body is scanned once ([`wellformed::scan`]): by the admission, which costs it, or
/// here; its fault, if any, is refused before anything is parsed.
async fn parse<A: ClientApi>(
    gw: &Gateway,
    head: Arc<Head>,
    bytes: Bytes,
) -> Result<Read<A::Reply>, Box<Refused>> {
    let limits = gw.inner.limits.clone();
    let picks = gw.inner.picks.clone();
    let small = bytes.len() <= INLINE_PARSE_BYTES;
    let scan = match head.extensions.get::<Scan>() {
        Some(scan) => Some(scan.clone()),
        None if small => Some(wellformed::scan(&bytes, A::PATHS, &[])),
        None => None,
    };
    let inline = parses_inline(bytes.len(), scan.as_ref());
    let parse = move || {
        let fault = match scan {
            Some(scan) => scan.fault,
            None => wellformed::find_fault(&bytes, A::PATHS),
        };
        match fault {
            None => A::read(&head, &bytes, &limits, &picks),
            Some(fault) => Err(Refused::new(fault.error(), None)),
        }
    };
    let unparsed = || Refused::new(ApiError::invalid("the request could not be parsed"), None);
    if inline {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse))
            .unwrap_or_else(|_| Err(unparsed()))
    } else {
        (tokio::task::spawn_blocking(parse).await).unwrap_or_else(|_| Err(unparsed()))
    }
}

/// Reserves what a planned request may take of the limits it meets (its key's, its key's
/// tags', its model's): its samples, and where a limit counts tokens or dollars, its
/// prompt's tokens and the answer room of each sample ([`room`]). The prompt is bounded from
/// its bytes ([`prompt_bound`]) and counted only when that bound would be refused. The
/// reservation (none without limits) goes to the request's record, which settles it; a
/// refusal is logged with the request's id and the key's name.
async fn reserve<R>(
    gw: &Gateway,
    caller: &keys::Caller,
    plan: &Plan<R>,
    request_id: &str,
) -> Result<Reserved, ApiError> {
    let quota = &gw.inner.quota;
    let Some(applicable) = quota.applicable(caller, &plan.req.model) else {
        return Ok(Reserved::default());
    };
    let mut held = None;
    let applicable_counts = applicable.counts_tokens();
    let mut demand = crate::quota::Demand {
        samples: u64::from(plan.req.samples.max(1)),
        ..Default::default()
    };
    if applicable.counts_tokens() {
        demand.prompt_tokens = prompt_bound(&plan.opener).await;
        demand.prompt_bound = true;
        demand.room = room(&plan.req, &plan.opener.model);
        if stated_room(&plan.req).is_none() {
            held = Some(demand.room);
        }
    }
    let count = || prompt_tokens(&plan.opener);
    match quota.reserve(applicable, demand, count).await {
        Ok(reservation) => Ok(Reserved {
            bound: (reservation.is_some() && applicable_counts).then_some(demand.room),
            reservation,
            room: held,
        }),
        Err(e) => {
            tracing::info!(
                request_id = %request_id,
                key = caller.label(),
                model = %plan.req.model,
                status = e.status.as_u16(),
                "refused by its limits: {}",
                e.message
            );
            Err(e)
        }
    }
}

/// What [`reserve`] reserved: the reservation (none without limits), the answer room sent
/// upstream when the request states none and a limit counts tokens or dollars
/// ([`open::Opener::room`]), and the room every sample is held to under such a limit
/// ([`open::Opener::bound`]).
#[derive(Default)]
struct Reserved {
    reservation: Option<crate::quota::Reservation>,
    room: Option<u64>,
    bound: Option<u64>,
}

/// The answer limit a request states (`max_completion_tokens`, `max_tokens`; a Messages or
/// Responses request's is translated to one).
fn stated_room(req: &ChatRequest) -> Option<u64> {
    ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|field| serde_json::from_slice::<u64>(req.body.get(*field)?).ok())
}

/// The answer room a request's sample may take: the limit it states ([`stated_room`]), else
/// the largest `max_tokens` of its model's upstreams, else
/// [`crate::quota::ROOM_WITHOUT_LIMIT`].
fn room(req: &ChatRequest, model: &open::ModelRoutes) -> u64 {
    stated_room(req)
        .or_else(|| model.routes.iter().filter_map(|r| r.max_tokens).max())
        .unwrap_or(crate::quota::ROOM_WITHOUT_LIMIT)
}

/// A bound of a request's prompt tokens never below [`prompt_tokens`]'s count: its bytes,
/// and its function and tool definitions counted (on a blocking thread unless small);
/// `choicewise_usage::count_prompt_fields_at_most` says why it is a bound.
async fn prompt_bound(opener: &open::Opener) -> u64 {
    // Only the definitions are counted: without them, the bound is a scan of the bytes, and
    // the encoding is not read.
    let counted: usize = ["tools", "functions"]
        .iter()
        .filter_map(|k| opener.body.get(*k).map(|v| v.len()))
        .sum();
    let encoding = match counted {
        0 => choicewise_usage::DEFAULT_ENCODING,
        _ => first_encoding(opener),
    };
    let body = opener.body.clone();
    let bound = move || {
        let fields = body.iter().map(|(k, v)| (k.as_str(), &v[..]));
        choicewise_usage::count_prompt_fields_at_most(encoding, fields)
    };
    // A bound that panicked is none: the most, which every limit of tokens refuses, so that
    // the prompt is counted.
    let quick = counted == 0 || choicewise_usage::counts_quickly(encoding, counted);
    choicewise_core::counting::counted(quick, bound)
        .await
        .unwrap_or(u64::MAX)
}

/// The tokens of a request's prompt, counted as its accounting counts them (with its first
/// upstream's encoding; on a blocking thread unless small); 0 if it cannot be counted.
async fn prompt_tokens(opener: &open::Opener) -> u64 {
    let encoding = first_encoding(opener);
    let body = opener.body.clone();
    let count = move || {
        let fields = body.iter().map(|(k, v)| (k.as_str(), &v[..]));
        choicewise_usage::count_prompt_fields(encoding, fields).map_or(0, |c| c.total)
    };
    let bytes: usize = opener.body.values().map(|v| v.len()).sum();
    let quick = choicewise_usage::counts_quickly(encoding, bytes);
    choicewise_core::counting::counted(quick, count)
        .await
        .unwrap_or(0)
}

/// The encoding of the model's first upstream (the default when it has none).
fn first_encoding(opener: &open::Opener) -> choicewise_usage::EncodingName {
    (opener.model.routes.first()).map_or(choicewise_usage::DEFAULT_ENCODING, |r| r.encoding)
}

/// A request's run planned: its samples' opener, and what its answer needs besides.
struct Plan<R> {
    req: ChatRequest,
    reply: R,
    opener: open::Opener,
    /// The APIs of the model's upstreams, for the span.
    apis: Vec<choicewise_core::Dialect>,
    /// A streamed Messages answer's prompt tokens, being counted.
    estimate: Option<respond::PromptEstimate>,
    /// The hosted tools left out of the upstream request.
    dropped: Option<String>,
}

/// Plans the run of a parsed request for `model`: its hosted tools left out or the request
/// refused, as the model says; a streamed Messages answer's prompt estimate started; the
/// opener of its samples.
fn plan<R>(
    gw: &Gateway,
    read: Read<R>,
    model: Arc<open::ModelRoutes>,
    client: crate::upstream::resilience::ClientId,
) -> Result<Plan<R>, ApiError> {
    let Read {
        req,
        reply,
        native,
        hosted,
        prompt,
    } = read;
    let dropped = hosted_tools(gw, &req.model, &hosted)?;
    let estimate = prompt.map(|chat| {
        let encoding = (model.routes.first()).map_or_else(
            || choicewise_usage::encoding_for_model(&model.name).name,
            |r| r.encoding,
        );
        let bytes: usize = chat.values().map(|v| v.len()).sum();
        let count = move || {
            let fields = chat.iter().map(|(k, v)| (k.as_str(), &v[..]));
            choicewise_usage::count_prompt_fields(encoding, fields)
                .ok()
                .map(|count| count.total)
        };
        // A small prompt is counted here: a hand-off would cost more than the count.
        match choicewise_usage::counts_quickly(encoding, bytes) {
            true => respond::PromptEstimate::Counted(
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(count))
                    .ok()
                    .flatten(),
            ),
            false => respond::PromptEstimate::Counting(tokio::task::spawn_blocking(count)),
        }
    });
    let apis = model.routes.iter().map(|u| u.api).collect();
    let opener = open::Opener {
        models: gw.inner.models.clone(),
        budget: model.budget.clone(),
        model,
        body: req.body.clone(),
        native,
        logprobs: req.policy.confidence(),
        asked_logprobs: req.logprobs,
        logprobs_refused: Arc::default(),
        metrics: gw.inner.metrics.clone(),
        tries: Arc::default(),
        limits_set: Arc::default(),
        client,
        sent: Arc::default(),
        max_requests: gw.inner.limits.max_upstream_requests_per_request,
        bodies: Arc::default(),
        room: None,
        bound: None,
    };
    Ok(Plan {
        req,
        reply,
        opener,
        apis,
        estimate,
        dropped,
    })
}

/// The request's hosted tools, which the gateway cannot run: left out (their kinds, for
/// the log and the `x-choicewise-dropped-tools` header), or the request refused, as the
/// model says.
fn hosted_tools(
    gw: &Gateway,
    model: &str,
    hosted: &[api::Hosted],
) -> Result<Option<String>, ApiError> {
    if let Some(HostedTools::Refuse) = gw.inner.hosted_tools.get(model) {
        return match hosted.first() {
            Some(tool) => Err(tool.refused(model).into()),
            None => Ok(None),
        };
    }
    let mut kinds: Vec<&str> = Vec::new();
    for tool in hosted {
        if !kinds.contains(&tool.kind.as_str()) {
            kinds.push(&tool.kind);
        }
    }
    let dropped = (!kinds.is_empty()).then(|| kinds.join(","));
    if let Some(dropped) = &dropped {
        tracing::info!(
            model = %model,
            dropped_tools = %dropped,
            "hosted tools left out of the upstream request (hosted_tools = \"drop\")"
        );
    }
    Ok(dropped)
}

/// When a request must be over: everything it does ends by its deadline (opening its first
/// samples, the pick, the answer: `closing`); the pick's own deadline (`deadline_ms`)
/// counts from the request's start too, and opening its samples and the pick end by it.
struct Deadlines {
    request: Instant,
    request_s: f64,
    /// The pick's deadline when it comes before the request's: when, and as stated.
    pick: Option<(Instant, Duration)>,
}

impl Deadlines {
    /// The deadlines of a request `arrived` then, whose pick's deadline is `pick`.
    fn new(gw: &Gateway, arrived: Instant, pick: Option<Duration>) -> Self {
        let request_s = gw.inner.limits.request_deadline_s;
        let request = arrived + Duration::from_secs_f64(request_s);
        Deadlines {
            request,
            request_s,
            pick: pick
                .map(|d| (arrived + d, d))
                .filter(|(at, _)| *at < request),
        }
    }

    /// When the samples must be opened and picked by.
    fn picked_by(&self) -> Instant {
        self.pick.map_or(self.request, |(at, _)| at)
    }

    /// The 504 of a request past its deadline `while_` doing something, logged.
    fn passed(&self, request_id: &str, model: &str, while_: &str) -> ApiError {
        let (stated, key) = match self.pick {
            Some((_, d)) => (format!("{} ms", d.as_millis()), "deadline_ms"),
            None => (format!("{}s", self.request_s), "request_deadline_s"),
        };
        tracing::warn!(
            request_id = %request_id,
            model = %model,
            deadline = %stated,
            "the request passed its deadline ({key}) {while_}"
        );
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            format!("model {model:?}: the request passed its deadline ({stated}, {key}) {while_}"),
        )
        .code("request_deadline")
    }
}

/// Opens a planned request's first samples ([`Run::start`]), by the time its pick must be
/// made: the run, or why it could not start (a 504 past its deadline).
async fn start(
    opener: open::Opener,
    req: &ChatRequest,
    deadlines: &Deadlines,
    request_id: &str,
) -> Result<Run, ApiError> {
    let started = tokio::time::timeout_at(deadlines.picked_by().into(), Run::start(opener, req));
    let Ok(run) = started.await else {
        return Err(deadlines.passed(
            request_id,
            &req.model,
            "while its first samples were opened",
        ));
    };
    run
}

/// Why nothing was picked, when nothing was: the request passed its deadline first (504),
/// or every sample failed (502).
fn unpicked(
    picked: &Picked,
    deadlines: &Deadlines,
    request_id: &str,
    model: &str,
) -> Option<(ErrorType, ApiError)> {
    if !picked.samples.is_empty() {
        return None;
    }
    let reason = (picked.reason.as_deref()).unwrap_or("nothing was picked");
    if picked.timed_out {
        let while_ = format!("before its pick decided: {reason}");
        let e = deadlines.passed(request_id, model, &while_);
        return Some((ErrorType::RequestDeadline, e));
    }
    let e = ApiError::new(
        StatusCode::BAD_GATEWAY,
        "upstream_error",
        format!("model {model:?}: {reason}"),
    )
    .code("no_choice");
    Some((ErrorType::NoChoice, e))
}

/// A request ready to be answered: its pick made, what its answer is made of.
struct Ready<A: ClientApi> {
    picked: Picked,
    req: ChatRequest,
    answer: Answer<A>,
    closing: write::Closing,
    /// The hosted tools left out of the upstream request.
    dropped: Option<String>,
}

impl<A: ClientApi> Ready<A> {
    /// The answer, in the client's API, streamed or not; `finish` goes with its body.
    fn answer(self, finish: Finish) -> impl Future<Output = Response> + Send {
        let Ready {
            picked,
            req,
            answer,
            closing,
            dropped,
        } = self;
        let streamed = req.stream;
        let responding = respond::respond(finish, picked, req, answer, closing);
        async move {
            if streamed {
                // The answer's head and opening are written at the body's first poll, and
                // flushed alone if its choices have nothing yet. Stepping aside once lets the
                // tasks already woken by the upstream's first read (its reader, its choices'
                // actors) publish what it held: the head, the opening and those events then
                // go out in one write (one system call and one wake-up of the client fewer a
                // request at saturation: docs/benchmarks.md). An upstream that sent nothing
                // more is not waited for.
                tokio::task::yield_now().await;
            }
            let mut response = responding.await;
            if let Some(value) = dropped.and_then(|d| axum::http::HeaderValue::from_str(&d).ok()) {
                const DROPPED: HeaderName = HeaderName::from_static("x-choicewise-dropped-tools");
                response.headers_mut().insert(DROPPED, value);
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{chat::Chat, gemini::Gemini, messages::Messages, responses::Responses};

    #[test]
    fn small_bodies_without_a_vote_key_parse_on_the_worker() {
        let inline = |body: &[u8]| {
            let scan = wellformed::scan(body, wellformed::Paths::Indexed, &[]);
            parses_inline(body.len(), Some(&scan))
        };
        let small = br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
        assert!(inline(small));
        let vote = br#"{"model": "m", "choicewise": {"select": "vote", "vote_by": "(\\d+)"}}"#;
        assert!(!inline(vote), "a vote_by compiles off the workers");
        let escaped = br#"{"model": "m", "choicewise": {"vote\u005fby": "x"}}"#;
        assert!(!inline(escaped), "an escape could spell vote_by");
        let mut large = br#"{"model": "m", "messages": [{"role": "user", "content": ""#.to_vec();
        large.resize(INLINE_PARSE_BYTES + 1, b'a');
        assert!(!inline(&large), "a large body parses off the workers");
        assert!(
            !parses_inline(10, None),
            "an unscanned body parses off the workers"
        );
    }

    /// The most a request's handler future may weigh: it is moved whole as axum boxes it,
    /// and its steps within it as they are awaited, so its large steps are boxed where they
    /// are awaited and its record lives on the heap (12.5 KB in a release build before).
    const MAX_HANDLER_FUTURE: usize = 6 * 1024;

    fn handler_future_size<A: ClientApi>(gw: &Gateway) -> usize {
        let request = axum::http::Request::post("/v1/chat/completions")
            .body(Body::empty())
            .unwrap();
        let future = answer::<A>(State(gw.clone()), request);
        std::mem::size_of_val(&future)
    }

    #[test]
    fn a_handler_future_stays_small() {
        let gw = Gateway::of_one_model();
        for (api, size) in [
            ("chat", handler_future_size::<Chat>(&gw)),
            ("messages", handler_future_size::<Messages>(&gw)),
            ("responses", handler_future_size::<Responses>(&gw)),
            ("gemini", handler_future_size::<Gemini>(&gw)),
        ] {
            assert!(
                size <= MAX_HANDLER_FUTURE,
                "the {api} handler's future is {size} bytes (at most {MAX_HANDLER_FUTURE})"
            );
        }
        assert!(
            std::mem::size_of::<Finish>() <= 8,
            "the record is a pointer"
        );
    }
}
