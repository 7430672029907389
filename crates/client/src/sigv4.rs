//! AWS Signature Version 4 over each request to an API that asks for it
//! ([`Authorisation::SigV4`](choicewise_core::upstream::Authorisation::SigV4): Bedrock's),
//! by AWS's own signer (`aws-sigv4`): the method, the path as sent, the host, the content
//! type and the body's SHA-256, at the time of each try.

use std::fmt;
use std::time::SystemTime;

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use crate::error::{ClientError, ClientErrorKind};

/// AWS credentials: an access key, its secret and, for temporary credentials, a session
/// token. Never printed: `Debug` names the access key's id only.
///
/// ```
/// use choicewise_client::AwsCredentials;
/// let c = AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG").session_token("FwoGZXIv");
/// let shown = format!("{c:?}");
/// assert!(shown.contains("AKIDEXAMPLE") && !shown.contains("wJalr") && !shown.contains("FwoGZXIv"));
/// ```
#[derive(Clone)]
pub struct AwsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl AwsCredentials {
    /// An access key and its secret.
    ///
    /// ```
    /// let c = choicewise_client::AwsCredentials::new("AKID", "secret");
    /// assert_eq!(c.access_key_id(), "AKID");
    /// ```
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        AwsCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }

    /// The session token of temporary credentials (`AWS_SESSION_TOKEN`), sent as
    /// `x-amz-security-token` and signed.
    ///
    /// ```
    /// let c = choicewise_client::AwsCredentials::new("AKID", "secret").session_token("t");
    /// assert!(c.has_session_token());
    /// ```
    pub fn session_token(mut self, token: impl Into<String>) -> Self {
        self.session_token = Some(token.into()).filter(|t| !t.is_empty());
        self
    }

    /// The credentials of the environment, as AWS's tools read them:
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` (optional);
    /// None unless both of the first two are set and not empty.
    ///
    /// ```
    /// let env = |name: &str| match name {
    ///     "AWS_ACCESS_KEY_ID" => Some("AKID".to_string()),
    ///     "AWS_SECRET_ACCESS_KEY" => Some("secret".to_string()),
    ///     _ => None,
    /// };
    /// let c = choicewise_client::AwsCredentials::from_env_with(env).unwrap();
    /// assert!(!c.has_session_token());
    /// assert!(choicewise_client::AwsCredentials::from_env_with(|_| None).is_none());
    /// ```
    pub fn from_env_with(env: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        let credentials =
            AwsCredentials::new(set("AWS_ACCESS_KEY_ID")?, set("AWS_SECRET_ACCESS_KEY")?);
        Some(match set("AWS_SESSION_TOKEN") {
            Some(token) => credentials.session_token(token),
            None => credentials,
        })
    }

    /// [`from_env_with`](Self::from_env_with) the process's environment.
    ///
    /// ```
    /// let _maybe = choicewise_client::AwsCredentials::from_env();
    /// ```
    pub fn from_env() -> Option<Self> {
        Self::from_env_with(|name| std::env::var(name).ok())
    }

    /// The access key's id (not a secret: it names the key).
    ///
    /// ```
    /// assert_eq!(choicewise_client::AwsCredentials::new("AKID", "s").access_key_id(), "AKID");
    /// ```
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// Whether a session token is set.
    ///
    /// ```
    /// assert!(!choicewise_client::AwsCredentials::new("AKID", "s").has_session_token());
    /// ```
    pub fn has_session_token(&self) -> bool {
        self.session_token.is_some()
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// What signs each request of a client: the credentials, the region and the service.
#[derive(Clone)]
pub(crate) struct Signer {
    credentials: aws_credential_types::Credentials,
    region: String,
    service: &'static str,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // aws-credential-types' own Debug redacts the secret and the token.
        f.debug_struct("Signer")
            .field("credentials", &self.credentials)
            .field("region", &self.region)
            .field("service", &self.service)
            .finish()
    }
}

impl Signer {
    pub(crate) fn new(credentials: &AwsCredentials, region: &str, service: &'static str) -> Self {
        Signer {
            credentials: aws_credential_types::Credentials::new(
                &credentials.access_key_id,
                &credentials.secret_access_key,
                credentials.session_token.clone(),
                None,
                "choicewise",
            ),
            region: region.to_string(),
            service,
        }
    }

    /// `headers` with the signature of a `POST` of `body` to `uri` now: `x-amz-date`,
    /// `authorization` and, with a session token, `x-amz-security-token`. What is signed is
    /// the host (from `uri`), the content type and the body; a proxy's headers are not.
    pub(crate) fn sign(
        &self,
        uri: &http::Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<HeaderMap, ClientError> {
        let failed = |what: String| {
            ClientError::invalid(ClientErrorKind::InvalidRequest, format!("signing: {what}"))
        };
        let identity = self.credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(self.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| failed(e.to_string()))?
            .into();
        let signed =
            (headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())).map(|v| ("content-type", v));
        let uri = uri.to_string();
        let request = SignableRequest::new(
            "POST",
            uri.as_str(),
            signed.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| failed(e.to_string()))?;
        let (instructions, _) = sign(request, &params)
            .map_err(|e| failed(e.to_string()))?
            .into_parts();
        let mut out = headers.clone();
        for (name, value) in instructions.headers() {
            let name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| failed(e.to_string()))?;
            let mut value = HeaderValue::from_str(value).map_err(|e| failed(e.to_string()))?;
            if name == http::header::AUTHORIZATION || name.as_str() == "x-amz-security-token" {
                value.set_sensitive(true);
            }
            out.insert(name, value);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_covers_the_host_the_type_and_the_body_and_changes_with_them() {
        let signer = Signer::new(
            &AwsCredentials::new("AKIDEXAMPLE", "secret").session_token("tok"),
            "us-east-1",
            "bedrock",
        );
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let uri: http::Uri = "http://127.0.0.1:9/model/a%3A0/converse-stream"
            .parse()
            .unwrap();
        let one = signer.sign(&uri, &headers, b"{}").unwrap();
        let auth = one["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
            "{auth}"
        );
        assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
        assert!(
            auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
            "{auth}"
        );
        assert_eq!(one["x-amz-security-token"], "tok");
        assert!(one["authorization"].is_sensitive());
        let other = signer.sign(&uri, &headers, b"{ }").unwrap();
        let signature = |h: &HeaderMap| {
            let a = h["authorization"].to_str().unwrap().to_string();
            a[a.find("Signature=").unwrap()..].to_string()
        };
        assert_ne!(signature(&one), signature(&other));
    }
}
