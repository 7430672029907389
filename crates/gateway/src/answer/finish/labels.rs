//! What a request is, for its record's labels: known as it arrives ([`Arrival`]), and once
//! its body is read ([`Asked`]), each set once.

use std::sync::Arc;

use axum::http::HeaderMap;

/// What is known of a request as it arrives, before its body is read.
pub(crate) struct Arrival {
    /// The API the client speaks, as the metrics name it (`chat`, `messages`, `responses`).
    pub(crate) api: &'static str,
    /// The name of the key that sent it (`(unnamed)` for a key of `keys_env`; none without
    /// `[auth]`).
    pub(crate) key: Option<Arc<str>>,
    /// The count of a request whose client goes away before any answer
    /// (`admission::layers::count`), which learns its model from the record.
    pub(crate) counted_as: Option<crate::metrics::RequestModel>,
}

/// What a request asked for, once its body is read (or read far enough to say).
pub(crate) struct Asked {
    /// The model asked for, configured or not.
    pub(crate) model: String,
    /// Whether the model is one of the gateway's.
    pub(crate) configured: bool,
    /// Whether the answer was asked streamed.
    pub(crate) stream: bool,
}

/// A request's labels, in its metrics, its log line, its span and its row.
pub(crate) struct Labels {
    /// The request's id (`x-request-id`), shared by what names it.
    pub(crate) request_id: Arc<str>,
    pub(crate) api: &'static str,
    pub(crate) key: Option<Arc<str>>,
    /// The model asked for, configured or not, once read: the span's.
    pub(crate) asked: Option<String>,
    /// The configured model asked for (empty for any other): the metrics' label.
    pub(crate) model: String,
    /// The answer was asked streamed (the row's `stream`).
    pub(crate) stream: bool,
}

impl Labels {
    /// The labels of a request arriving with `headers`, as `arrival` says.
    pub(super) fn arriving(headers: &HeaderMap, arrival: &Arrival) -> Labels {
        Labels {
            request_id: Arc::from(
                (headers.get("x-request-id"))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default(),
            ),
            api: arrival.api,
            key: arrival.key.clone(),
            asked: None,
            model: String::new(),
            stream: false,
        }
    }

    /// The request read: what it asked for.
    pub(super) fn read(&mut self, asked: Asked) {
        if asked.configured {
            self.model.clone_from(&asked.model);
        }
        self.asked = Some(asked.model);
        self.stream = asked.stream;
    }

    /// The key's name, empty for none.
    pub(crate) fn key(&self) -> &str {
        self.key.as_deref().unwrap_or_default()
    }
}
