//! `choicewise feedback REQUEST_ID OUTCOME`: a grade of a request a gateway answered, posted
//! to its `POST /v1/feedback` (docs/gateway.md, "Grades from production") with the key of
//! the environment variable `--key-env` (the key that made the request, or the operator's);
//! prints the API's answer.

use clap::Args;
use serde_json::{Value, json};

use crate::Exit;

/// `choicewise feedback ...`.
#[derive(Debug, Args)]
pub struct FeedbackArgs {
    /// The request's id: the `x-request-id` of its answer.
    request_id: String,
    /// `right`, `wrong`, or a score from 0 to 1.
    outcome: String,
    /// Who says it (a test suite, a reviewer).
    #[arg(long)]
    source: Option<String>,
    /// The gateway's address.
    #[arg(long, env = "CHOICEWISE_URL", default_value = "http://127.0.0.1:8787")]
    url: String,
    /// The environment variable holding the key (the request's own, or the operator's);
    /// unset: no key (a gateway that asks none).
    #[arg(long, default_value = "CHOICEWISE_API_KEY")]
    key_env: String,
}

/// The outcome as the API takes it; an error names the argument.
fn outcome(text: &str) -> Result<Value, Exit> {
    match text {
        "right" | "wrong" => Ok(json!(text)),
        _ => match text.parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => Ok(json!(x)),
            _ => Err(Exit {
                message: format!("OUTCOME {text:?}: right, wrong, or a score from 0 to 1"),
                code: 2,
            }),
        },
    }
}

/// Runs `feedback`.
pub(crate) async fn run(args: FeedbackArgs) -> Result<(), Exit> {
    let mut body = json!({"request_id": args.request_id, "outcome": outcome(&args.outcome)?});
    if let Some(source) = args.source {
        body["source"] = json!(source);
    }
    let key = std::env::var(&args.key_env)
        .ok()
        .filter(|k| !k.trim().is_empty());
    let method = reqwest::Method::POST;
    let answer = crate::keys::request(
        &args.url,
        key.as_deref(),
        method,
        "/v1/feedback",
        Some(body),
    )
    .await?;
    crate::keys::printed(&answer);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_is_right_wrong_or_a_score() {
        assert_eq!(outcome("right").unwrap(), json!("right"));
        assert_eq!(outcome("0.5").unwrap(), json!(0.5));
        assert_eq!(outcome("1.5").unwrap_err().code, 2);
        assert!(
            outcome("fine")
                .unwrap_err()
                .message
                .contains("OUTCOME \"fine\"")
        );
    }
}
