//! `POST /v1/feedback`: a grade of a request from production (its answer right or wrong, or
//! a score from 0 to 1, and who said it), kept beside the request's record in the records
//! database (`choicewise_records::Grade`), where `picks record --from-records` reads it as the
//! item's grade. The key that made the request may grade it, and the operator's key any.
//!
//! A request just answered may not be written yet (the records' writer batches): it is
//! looked for during a second, the gateway's own queue flushed, before it is called unknown.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::state::Gateway;

/// The longest request id and source a grade may carry.
const MAX_ID: usize = 512;
const MAX_SOURCE: usize = 256;

/// How long a request not on record yet is looked for (see [`graded`]).
const FOUND_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Who grades, as the records name keys.
const OPERATOR: &str = "(operator)";

/// A grade as the body gave it.
#[derive(Debug, PartialEq)]
struct Given {
    request_id: String,
    score: f64,
    outcome: &'static str,
    source: Option<String>,
}

/// 400 naming the field `param`.
fn invalid(param: &str, what: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("{param}: {what}"))
        .param(param)
        .code("invalid_value")
}

/// The grade of `body`, or a 400 naming the field that is wrong.
fn given(body: &Bytes) -> Result<Given, ApiError> {
    let object: Map<String, Value> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => object,
        Ok(_) => return Err(ApiError::invalid("the body must be a JSON object")),
        Err(e) => return Err(ApiError::invalid(format!("the body is not JSON: {e}"))),
    };
    if let Some(unknown) =
        (object.keys()).find(|k| !["request_id", "outcome", "source"].contains(&k.as_str()))
    {
        return Err(invalid(
            unknown,
            "unknown field (request_id, outcome and source are known)",
        ));
    }
    let request_id = match object.get("request_id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID => id.clone(),
        Some(Value::String(_)) => {
            return Err(invalid("request_id", format!("1 to {MAX_ID} bytes")));
        }
        Some(_) => return Err(invalid("request_id", "must be a string")),
        None => {
            return Err(invalid(
                "request_id",
                "missing: the x-request-id of the answer graded",
            ));
        }
    };
    let (score, outcome) = match object.get("outcome") {
        Some(Value::String(s)) if s == "right" => (1.0, "right"),
        Some(Value::String(s)) if s == "wrong" => (0.0, "wrong"),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => (x, "score"),
            _ => return Err(invalid("outcome", "a score must be from 0 to 1")),
        },
        Some(_) => {
            return Err(invalid(
                "outcome",
                "must be \"right\", \"wrong\" or a number from 0 to 1",
            ));
        }
        None => {
            return Err(invalid(
                "outcome",
                "missing: \"right\", \"wrong\" or a number from 0 to 1",
            ));
        }
    };
    let source = match object.get("source") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() <= MAX_SOURCE => Some(s.clone()),
        Some(Value::String(_)) => {
            return Err(invalid("source", format!("at most {MAX_SOURCE} bytes")));
        }
        Some(_) => return Err(invalid("source", "must be a string")),
    };
    Ok(Given {
        request_id,
        score,
        outcome,
        source,
    })
}

/// `POST /v1/feedback`.
pub(crate) async fn give(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    match graded(&gw, &headers, &uri, &body).await {
        Ok(answer) => answer,
        Err(e) => e.into_response(),
    }
}

async fn graded(
    gw: &Gateway,
    headers: &HeaderMap,
    uri: &Uri,
    body: &Bytes,
) -> Result<Response, ApiError> {
    // Who grades: the operator (any request), else a client's key (its own requests).
    let operator = (gw.inner.operator.as_ref()).is_some_and(|o| o.check(headers, uri).is_ok());
    let by = match operator {
        true => OPERATOR.to_string(),
        false => {
            let keys = gw.inner.admission.keys.load();
            keys.authorize(headers, uri)?.label().to_string()
        }
    };
    let given = given(body)?;
    let Some(records) = gw.inner.records.get() else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "invalid_request_error",
            "grades are kept with the records: this gateway has no [records]",
        )
        .code("no_records"));
    };
    let database = records.database();
    let unavailable = |e: String| {
        tracing::warn!(records = %database.shown(), "a grade not kept: {e}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "api_error",
            format!("the records database is unavailable; send the grade again later ({e})"),
        )
        .code("records_unavailable")
    };
    let store = database.store().await.map_err(unavailable)?;
    // A request answered moments ago may not be written yet: its record is made once its
    // last byte is handed to the socket, then waits in this replica's queue (flushed here)
    // or another's (written within its linger). Looked for again for up to a second.
    let deadline = std::time::Instant::now() + FOUND_WITHIN;
    let keys = loop {
        let keys = (store.request_keys(&given.request_id).await)
            .map_err(|e| unavailable(e.to_string()))?;
        if !keys.is_empty() || std::time::Instant::now() >= deadline {
            break keys;
        }
        records.flush().await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // Another key's request is as unknown as one never made: its existence is not told.
    if keys.is_empty() || !(operator || keys.contains(&by)) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "no request with id {:?} is on record for this key",
                given.request_id
            ),
        )
        .code("request_not_found"));
    }
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut grade = choicewise_records::Grade::new(given.score, given.outcome, by, at_ms);
    if let Some(source) = &given.source {
        grade = grade.source(source.clone());
    }
    (store.add_grade(&given.request_id, &grade).await).map_err(|e| unavailable(e.to_string()))?;
    Ok(axum::Json(json!({
        "object": "feedback",
        "request_id": given.request_id,
        "outcome": given.outcome,
        "score": given.score,
        "source": given.source,
    }))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(body: Value) -> Result<Given, String> {
        given(&Bytes::from(body.to_string())).map_err(|e| e.message)
    }

    #[test]
    fn a_grade_is_right_wrong_or_a_score() {
        let right = of(json!({"request_id": "r1", "outcome": "right", "source": "ci"})).unwrap();
        assert_eq!(
            (right.score, right.outcome, right.source.as_deref()),
            (1.0, "right", Some("ci"))
        );
        assert_eq!(
            of(json!({"request_id": "r1", "outcome": "wrong"}))
                .unwrap()
                .score,
            0.0
        );
        let score = of(json!({"request_id": "r1", "outcome": 0.25})).unwrap();
        assert_eq!((score.score, score.outcome), (0.25, "score"));
    }

    #[test]
    fn a_bad_grade_names_its_field() {
        let cases = [
            (json!({"outcome": "right"}), "request_id: missing"),
            (
                json!({"request_id": 7, "outcome": "right"}),
                "request_id: must be a string",
            ),
            (
                json!({"request_id": "", "outcome": "right"}),
                "request_id: 1 to 512 bytes",
            ),
            (json!({"request_id": "r"}), "outcome: missing"),
            (
                json!({"request_id": "r", "outcome": "fine"}),
                "outcome: must be",
            ),
            (
                json!({"request_id": "r", "outcome": 1.5}),
                "outcome: a score must be from 0 to 1",
            ),
            (
                json!({"request_id": "r", "outcome": -0.1}),
                "outcome: a score must be",
            ),
            (
                json!({"request_id": "r", "outcome": "right", "source": 3}),
                "source: must be a string",
            ),
            (
                json!({"request_id": "r", "outcome": "right", "grade": 1}),
                "grade: unknown field",
            ),
            (json!(["r"]), "the body must be a JSON object"),
        ];
        for (body, said) in cases {
            let e = of(body.clone()).unwrap_err();
            assert!(e.starts_with(said), "{body}: {e}");
        }
        assert!(
            given(&Bytes::from_static(b"{"))
                .unwrap_err()
                .message
                .contains("not JSON")
        );
    }
}
