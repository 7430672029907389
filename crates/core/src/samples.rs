//! Samples made on demand: a completion whose sources are opened when asked for
//! ([`CompletionsBuilder::samples`]), so that a combinator starts more only while it needs
//! them ([`Pick::window`](crate::Pick::window)).

use crate::builder::CompletionsBuilder;
use crate::completion::Sampling;
use crate::completions::Completions;
use crate::log::lock;
use crate::source::Source;

impl CompletionsBuilder {
    /// A completion of up to `max` samples, each a [`Source`] that `sample(k)` makes for
    /// sample `k` (0, 1, ...) when it is started, not before: [`Completions::start_more`]
    /// starts them, and so does a windowed [`vote`](Completions::vote) (see
    /// [`Pick::window`](crate::Pick::window)), window by window. The samples are numbered as
    /// in a [`fan_out`](Self::fan_out) (sample `k`'s choices after those of the samples
    /// before it), so with one choice each (the usual `n = 1` request), sample `k` is choice
    /// `k`. The completion's choices appear as their samples start; it ends once every
    /// sample started has ended and no more will start (all `max` started, or
    /// [`stop_sampling`](Completions::stop_sampling), or a cancel).
    ///
    /// ```
    /// use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let answer = |k: usize| format!(
    ///     "data: {{\"choices\":[{{\"delta\":{{\"content\":\"sample {k}\"}},\"finish_reason\":\"stop\"}}]}}\n\n");
    /// let completions = Completions::builder()
    ///     .samples(8, move |k| Source::reader(std::io::Cursor::new(answer(k))).n(1));
    /// assert_eq!(completions.start_more(2), 2); // samples 0 and 1 start
    /// completions.stop_sampling();              // no more: 6 are never made
    /// let whole = completions.collect().await.unwrap();
    /// assert_eq!(whole.choices.len(), 2);
    /// assert_eq!(whole.choices[1].message.content.as_deref(), Some("sample 1"));
    /// assert_eq!(completions.started(), 2);
    /// # }
    /// ```
    pub fn samples<F>(self, max: usize, sample: F) -> Completions
    where
        F: FnMut(usize) -> Source + Send + 'static,
    {
        let completions = Completions::start(self.into_config(), true, Vec::new(), max > 0);
        completions.shared.lock().sampled = true;
        *lock(&completions.shared.sampling) = Some(Sampling {
            made: 0,
            max,
            make: Box::new(sample),
        });
        completions
    }
}

impl Completions {
    /// Starts up to `count` more samples of a completion made by
    /// [`samples`](CompletionsBuilder::samples); returns how many started (none once all were
    /// started, sampling stopped, or the completion was cancelled; none for a completion of
    /// fixed sources). Starting the last one means no more will start.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::builder().samples(3, |_| Source::reader(&b"data: [DONE]\n\n"[..]));
    /// assert_eq!(c.start_more(2), 2);
    /// assert_eq!(c.start_more(5), 1); // only one was left
    /// assert!(c.outcome().await.is_ok());
    /// # }
    /// ```
    pub fn start_more(&self, count: usize) -> usize {
        let mut started = 0;
        loop {
            if started == count {
                break;
            }
            let source = {
                let mut sampling = lock(&self.shared.sampling);
                let Some(s) = sampling.as_mut() else {
                    break;
                };
                if s.made >= s.max || self.shared.is_closing() {
                    break;
                }
                let k = s.made;
                s.made += 1;
                (s.make)(k)
            };
            self.add(source);
            started += 1;
        }
        let exhausted = match &*lock(&self.shared.sampling) {
            Some(s) => s.made >= s.max,
            None => false,
        };
        if exhausted {
            self.stop_sampling();
        }
        started
    }

    /// No more samples will start: the completion ends once those started have.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::builder().samples(4, |_| Source::reader(&b"data: [DONE]\n\n"[..]));
    /// c.stop_sampling();
    /// assert!(c.collect().await.unwrap().choices.is_empty());
    /// # }
    /// ```
    pub fn stop_sampling(&self) {
        *lock(&self.shared.sampling) = None;
        self.seal();
    }

    /// How many samples were started (how many sources the completion reads, for one of
    /// fixed sources).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::builder().fan_out([Source::reader(&b""[..]), Source::reader(&b""[..])]);
    /// assert_eq!(c.started(), 2);
    /// # }
    /// ```
    pub fn started(&self) -> usize {
        self.shared.lock().upstreams.len()
    }

    /// Whether it is a completion of samples made on demand (sampling may have stopped).
    pub(crate) fn samples_made(&self) -> bool {
        self.shared.lock().sampled
    }

    /// The most samples this completion can have: `max` for one made by
    /// [`samples`](CompletionsBuilder::samples) while sampling goes on, else those started.
    pub(crate) fn planned(&self) -> usize {
        match &*lock(&self.shared.sampling) {
            Some(s) => s.max,
            None => self.started(),
        }
    }
}
