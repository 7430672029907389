//! What cuts an answer short: the gateway's close or the request's deadline, and awaiting
//! a run's work unless it is cut.

use tokio::sync::watch;

use crate::ending::Cut;
use crate::engine::Run;

/// Why an answer is cut short, once it is: the gateway closes ([`Cut::ShutDown`],
/// [`Gateway::close`](crate::Gateway::close)) or the request passes its deadline
/// ([`Cut::PastDeadline`], `request_deadline_s`).
pub(crate) type Closing = watch::Receiver<Option<Cut>>;

/// Resolves once the answer is cut short, with why; never if nothing can cut it any more.
pub(crate) async fn closed(closing: &mut Closing) -> Cut {
    let why = (closing.wait_for(Option::is_some).await).map(|why| (*why).unwrap_or(Cut::ShutDown));
    match why {
        Ok(why) => why,
        Err(_) => std::future::pending().await,
    }
}

/// Why the answer was cut short, if it was.
pub(crate) fn cut_short(closing: &Closing) -> Option<Cut> {
    *closing.borrow()
}

/// Awaits `work`; if the gateway closes first, its run's samples still running are
/// cancelled (their upstreams closed), and `work` ends with what they had.
pub(crate) async fn until_closed<T>(
    work: impl std::future::Future<Output = T>,
    closing: &mut Closing,
    run: &Run,
) -> T {
    let mut work = std::pin::pin!(work);
    tokio::select! {
        done = &mut work => done,
        _ = closed(closing) => {
            run.completions.cancel_except(&[]);
            work.await
        }
    }
}
