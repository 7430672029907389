//! `choicewise keys`: a gateway's keys over its admin API (`/admin/keys`, docs/keys.md), with
//! the operator's key read from an environment variable. Each command prints the API's JSON
//! answer (`list` a table unless `--json`); a refusal is the API's message, exit 1.

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use crate::Exit;

/// Where the gateway is and who asks.
#[derive(Debug, Args)]
pub struct Gateway {
    /// The gateway's address.
    #[arg(long, env = "CHOICEWISE_URL", default_value = "http://127.0.0.1:8787")]
    url: String,
    /// The environment variable holding the operator's key (`[admin] key_env`).
    #[arg(long, default_value = "CHOICEWISE_ADMIN_KEY")]
    key_env: String,
}

/// A key's settings, as `POST` and `PATCH /admin/keys` take them.
#[derive(Debug, Args)]
pub struct Settings {
    /// The models it may use, comma-separated (`--models ""`: every one).
    #[arg(long)]
    models: Option<String>,
    /// Its tags, comma-separated (each an `[[auth.tags]]`).
    #[arg(long)]
    tags: Option<String>,
    /// A limit, `NAME=AMOUNT` (`requests_per_minute=60`, `usd_per_day=1.5`); repeated for
    /// several. `PATCH` replaces the key's limits with those given.
    #[arg(long = "limit", value_name = "NAME=AMOUNT")]
    limits: Vec<String>,
    /// When it expires: RFC 3339 (`2026-12-31T00:00:00Z`), or `never`.
    #[arg(long)]
    expires_at: Option<String>,
}

/// `choicewise keys ...`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// List the keys (the configuration's and the admin API's).
    List {
        #[command(flatten)]
        gateway: Gateway,
        /// The API's JSON rather than a table.
        #[arg(long)]
        json: bool,
    },
    /// Show a key and what is left of each of its limits.
    Show {
        /// The key's name.
        name: String,
        #[command(flatten)]
        gateway: Gateway,
    },
    /// Make a key: its secret is printed once (`key` of the answer).
    Create {
        /// The key's name.
        name: String,
        #[command(flatten)]
        settings: Settings,
        #[command(flatten)]
        gateway: Gateway,
    },
    /// Change a key's models, tags, limits or expiry.
    Set {
        /// The key's name.
        name: String,
        #[command(flatten)]
        settings: Settings,
        #[command(flatten)]
        gateway: Gateway,
    },
    /// Give a key a new secret (printed once); the old one is refused from then on.
    Rotate {
        /// The key's name.
        name: String,
        #[command(flatten)]
        gateway: Gateway,
    },
    /// Revoke a key: refused by every replica within a second.
    Revoke {
        /// The key's name.
        name: String,
        #[command(flatten)]
        gateway: Gateway,
    },
}

/// The body of a create or change from `settings`; an error names the flag.
fn body(settings: &Settings) -> Result<Map<String, Value>, Exit> {
    let list = |text: &str| -> Value {
        let items: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        json!(items)
    };
    let mut body = Map::new();
    if let Some(models) = &settings.models {
        let all = models.trim().is_empty();
        body.insert(
            "models".into(),
            if all { Value::Null } else { list(models) },
        );
    }
    if let Some(tags) = &settings.tags {
        body.insert("tags".into(), list(tags));
    }
    if !settings.limits.is_empty() {
        let mut limits = Map::new();
        for limit in &settings.limits {
            let Some((name, amount)) = limit.split_once('=') else {
                return Err(format!("--limit {limit:?}: expected NAME=AMOUNT").into());
            };
            let amount: Value = match amount.trim().parse::<u64>() {
                Ok(n) => json!(n),
                Err(_) => match amount.trim().parse::<f64>() {
                    Ok(x) if x.is_finite() => json!(x),
                    _ => {
                        return Err(format!("--limit {limit:?}: the amount is not a number").into());
                    }
                },
            };
            limits.insert(name.trim().to_string(), amount);
        }
        body.insert("limits".into(), Value::Object(limits));
    }
    if let Some(at) = &settings.expires_at {
        let at = match at.as_str() {
            "never" => Value::Null,
            at => json!(at),
        };
        body.insert("expires_at".into(), at);
    }
    Ok(body)
}

/// One call of the admin API: its JSON answer, or its error's message (exit 1).
async fn call(
    gateway: &Gateway,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value, Exit> {
    let key = std::env::var(&gateway.key_env)
        .ok()
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| {
            format!(
                "the environment variable {} (the operator's key, [admin] key_env) is not set",
                gateway.key_env
            )
        })?;
    request(&gateway.url, Some(&key), method, path, body).await
}

/// One call of a gateway at `base` with `key` (`Authorization: Bearer`): its JSON answer,
/// or its error's message with its status (exit 1).
pub(crate) async fn request(
    base: &str,
    key: Option<&str>,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value, Exit> {
    let url = format!("{}{path}", base.trim_end_matches('/'));
    let mut request = reqwest::Client::new()
        .request(method, &url)
        .timeout(std::time::Duration::from_secs(30));
    if let Some(key) = key {
        request = request.bearer_auth(key.trim());
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = (request.send().await).map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let text = (response.text().await).map_err(|e| format!("{url}: {e}"))?;
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if status.is_success() {
        return Ok(value);
    }
    let message = value["error"]["message"].as_str().map_or_else(
        || format!("{status} from {url}"),
        |m| format!("{m} ({})", status.as_u16()),
    );
    Err(message.into())
}

pub(crate) fn printed(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// The keys as a table: name, origin, models, limits, expiry.
fn table(list: &Value) -> String {
    let mut rows = vec![[
        "NAME".to_string(),
        "ORIGIN".into(),
        "MODELS".into(),
        "LIMITS".into(),
        "EXPIRES".into(),
    ]];
    for key in list["data"].as_array().into_iter().flatten() {
        let models = match key["models"].as_array() {
            None => "all".to_string(),
            Some(models) => (models.iter().filter_map(Value::as_str))
                .collect::<Vec<_>>()
                .join(","),
        };
        let limits = (key["limits"].as_object().into_iter().flatten())
            .map(|(name, amount)| format!("{name}={amount}"))
            .collect::<Vec<_>>()
            .join(" ");
        let expires = match (&key["expires_at"], key["expired"].as_bool()) {
            (Value::String(at), Some(true)) => format!("{at} (expired)"),
            (Value::String(at), _) => at.clone(),
            _ => "never".into(),
        };
        rows.push([
            key["name"].as_str().unwrap_or_default().to_string(),
            key["origin"].as_str().unwrap_or_default().to_string(),
            models,
            limits,
            expires,
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = (row.iter().zip(&widths))
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Runs a `keys` command.
pub(crate) async fn run(command: KeysCommand) -> Result<(), Exit> {
    use reqwest::Method;
    let path = |name: &str| format!("/admin/keys/{name}");
    match command {
        KeysCommand::List { gateway, json } => {
            let list = call(&gateway, Method::GET, "/admin/keys", None).await?;
            match json {
                true => printed(&list),
                false => print!("{}", table(&list)),
            }
        }
        KeysCommand::Show { name, gateway } => {
            printed(&call(&gateway, Method::GET, &path(&name), None).await?);
        }
        KeysCommand::Create {
            name,
            settings,
            gateway,
        } => {
            let mut body = body(&settings)?;
            body.insert("name".into(), json!(name));
            let made = call(
                &gateway,
                Method::POST,
                "/admin/keys",
                Some(Value::Object(body)),
            );
            printed(&made.await?);
        }
        KeysCommand::Set {
            name,
            settings,
            gateway,
        } => {
            let body = Value::Object(body(&settings)?);
            printed(&call(&gateway, Method::PATCH, &path(&name), Some(body)).await?);
        }
        KeysCommand::Rotate { name, gateway } => {
            let body = json!({"rotate": true});
            printed(&call(&gateway, Method::PATCH, &path(&name), Some(body)).await?);
        }
        KeysCommand::Revoke { name, gateway } => {
            printed(&call(&gateway, Method::DELETE, &path(&name), None).await?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_make_the_apis_body_and_a_bad_limit_is_named() {
        let settings = Settings {
            models: Some("small, large".into()),
            tags: None,
            limits: vec!["requests_per_minute=60".into(), "usd_per_day=1.5".into()],
            expires_at: Some("never".into()),
        };
        assert_eq!(
            Value::Object(body(&settings).unwrap()),
            json!({"models": ["small", "large"], "expires_at": null,
                   "limits": {"requests_per_minute": 60, "usd_per_day": 1.5}})
        );
        let bad = Settings {
            models: Some(String::new()),
            tags: None,
            limits: vec!["requests_per_minute".into()],
            expires_at: None,
        };
        let e = body(&bad).unwrap_err();
        assert!(
            e.message.contains("--limit \"requests_per_minute\""),
            "{}",
            e.message
        );
        let list = json!({"data": [{"name": "a", "origin": "admin", "models": null,
                                    "limits": {"requests_per_minute": 60}, "expires_at": null}]});
        assert_eq!(
            table(&list),
            "NAME  ORIGIN  MODELS  LIMITS                  EXPIRES\na     admin   all     requests_per_minute=60  never\n"
        );
    }
}
