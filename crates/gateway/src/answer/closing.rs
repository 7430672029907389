//! What cuts an answer short: the gateway's close or the request's deadline. Watched by the
//! answer itself (its write loop, its tail), with no task of its own; awaiting a run's work
//! unless it is cut is [`Running::until_closed`](crate::answer::finish::Running::until_closed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::watch;

use crate::answer::ending::Cut;

/// What cuts a request's answer short, once it does: the gateway closes
/// ([`Cut::ShutDown`], [`Gateway::close`](crate::Gateway::close)) or the request passes its
/// deadline ([`Cut::PastDeadline`], `request_deadline_s`, logged once).
#[derive(Clone)]
pub(crate) struct Closing {
    /// The gateway's close.
    gateway: watch::Receiver<bool>,
    deadline: Instant,
    /// Who the deadline's warning names.
    request: Arc<Request>,
}

/// The request a deadline's warning names, and whether it was given.
struct Request {
    id: String,
    model: String,
    deadline_s: f64,
    warned: AtomicBool,
}

impl Closing {
    /// What cuts short the answer of request `id` (of `model`): the gateway's close
    /// (`gateway`), or `deadline` (`request_deadline_s`: `deadline_s`), whichever comes
    /// first.
    pub(crate) fn new(
        gateway: watch::Receiver<bool>,
        deadline: Instant,
        (id, model, deadline_s): (&str, &str, f64),
    ) -> Self {
        let request = Request {
            id: id.to_string(),
            model: model.to_string(),
            deadline_s,
            warned: AtomicBool::new(false),
        };
        Closing {
            gateway,
            deadline,
            request: Arc::new(request),
        }
    }

    /// The deadline passed: said once in the log.
    fn past_deadline(&self) -> Cut {
        let request = &self.request;
        if !request.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                request_id = %request.id,
                model = %request.model,
                request_deadline_s = request.deadline_s,
                "the request passed its deadline: its answer ends now"
            );
        }
        Cut::PastDeadline
    }
}

/// Resolves once the answer is cut short, with why; never if nothing can cut it any more.
pub(crate) async fn closed(closing: &mut Closing) -> Cut {
    let deadline = closing.deadline;
    let shut = async {
        if closing.gateway.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = shut => Cut::ShutDown,
        () = tokio::time::sleep_until(deadline.into()) => closing.past_deadline(),
    }
}

/// Why the answer was cut short, if it was.
pub(crate) fn cut_short(closing: &Closing) -> Option<Cut> {
    if *closing.gateway.borrow() {
        Some(Cut::ShutDown)
    } else if Instant::now() >= closing.deadline {
        Some(closing.past_deadline())
    } else {
        None
    }
}
