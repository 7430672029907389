//! Samples made on demand: a completion whose sources are opened when asked for
//! ([`CompletionsBuilder::samples`]), so that a combinator starts more only while it needs
//! them ([`Pick::window`](crate::Pick::window)).

use crate::builder::CompletionsBuilder;
use std::sync::Arc;

use crate::completion::{Mode, Sampling};
use crate::completions::Completions;
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
        let replacements = self.config.replace_failed;
        let completions = Completions::adding(self.into_config(), Mode::Samples(None));
        if max > 0 {
            let life = Arc::downgrade(&completions.life);
            let start = Arc::new(move |source| {
                // No handle left: nobody reads the sample.
                if let Some(life) = life.upgrade() {
                    let completions = Completions {
                        shared: life.shared.clone(),
                        life,
                    };
                    completions.add(source);
                }
            });
            completions.shared.lock().mode = Mode::Samples(Some(Sampling::new(
                max,
                Box::new(sample),
                replacements,
                start,
            )));
        }
        completions.added();
        completions
    }

    /// For [`samples`](Self::samples): up to `count` samples that fail (their stream ends in
    /// an error: cut, malformed, silent past the idle timeout) are each replaced by one more
    /// sample, `sample(k)` for the next `k`, started as the failure is seen, so that a pick
    /// still decides over as many samples as planned. The failed sample stays a failed
    /// choice. A source of several choices that fails counts one failed sample for each
    /// choice it had not finished (and each declared one that never appeared): give
    /// `sample(k)` for `k` past the planned samples one choice. Under a windowed vote
    /// ([`Pick::window`](crate::Pick::window)) a replacement joins its failed sample's window,
    /// started by the vote at the next position, and under a confidence-guided vote
    /// ([`Pick::confidence`](crate::Pick::confidence)) the replacement of a warmup sample
    /// joins the warmup. Replacing stops once sampling stops: a combinator's decision, a
    /// cancel, or [`stop_sampling`](Completions::stop_sampling); until then, sampling stays
    /// open after the last planned sample started, and the completion ends when every
    /// started sample has ended with no replacement due.
    ///
    /// ```
    /// use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sample = |k: usize| {
    ///     let sse = match k {
    ///         1 => "data: {\"choices\":[{\"delta\":{\"content\":\"Answer: 4\"}}]}\n\ndata: {oops\n\n".to_string(),
    ///         _ => "data: {\"choices\":[{\"delta\":{\"content\":\"Answer: 42\"},\"finish_reason\":\"stop\"}]}\n\n".to_string(),
    ///     };
    ///     Source::reader(std::io::Cursor::new(sse)).n(1)
    /// };
    /// let completions = Completions::builder().replace_failed(1).samples(3, sample);
    /// completions.start_more(3);
    /// let selection = completions.vote(|o| o.message.content.clone()).min_votes(3).await;
    /// assert_eq!(completions.started(), 4, "the failed sample 1 was replaced by sample 3");
    /// let mut voters = selection.selected; // in the order they finished
    /// voters.sort_unstable();
    /// assert_eq!(voters, [0, 2, 3]);
    /// # }
    /// ```
    pub fn replace_failed(mut self, count: usize) -> Self {
        self.config.replace_failed = count;
        self
    }
}

impl Completions {
    /// Starts up to `count` more samples of a completion made by
    /// [`samples`](CompletionsBuilder::samples); returns how many it took on (none once all
    /// were started, sampling stopped, or the completion was cancelled; none for a completion
    /// of fixed sources). They have started when it returns, unless the sample maker was
    /// running meanwhile (this call made from inside it, or from another thread): then that
    /// maker's caller starts them as soon as the maker returns. Starting the last one means no
    /// more will start.
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
        let started = self.shared.start_samples(count);
        // Replacements still possible keep sampling open: the last upstream to end stops it
        // (`CompletionShared::after_upstream_end`).
        let mut state = self.shared.lock();
        if state
            .sampling()
            .is_some_and(|s| s.made >= s.max && s.replacements == 0)
        {
            state.stop_sampling();
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
        self.shared.lock().stop_sampling();
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

    /// From now on the pick starts the replacements reserved for failed samples, in the
    /// places it gives them ([`start_more`](Self::start_more) as for any sample), rather
    /// than the reader as each failure is seen: a windowed vote puts a failed sample's
    /// replacement in that sample's window, a confidence-guided vote in its warmup.
    pub(crate) fn pick_starts_replacements(&self) {
        if let Some(s) = self.shared.lock().sampling() {
            s.pick_starts = true;
        }
    }

    /// From now on the readers start the replacements reserved for failed samples again,
    /// as each failure is seen (undoes [`pick_starts_replacements`](Self::pick_starts_replacements)):
    /// for a pick that hands over to one that places none (a confidence-guided vote falling
    /// back to the plain vote), so that no reserved replacement is left for nobody to start.
    /// Those reserved meanwhile are started by the caller's next
    /// [`start_more`](Self::start_more), as planned samples are.
    pub(crate) fn readers_start_replacements(&self) {
        if let Some(s) = self.shared.lock().sampling() {
            s.pick_starts = false;
        }
    }

    /// How many replacements of failed samples were reserved so far (each raised
    /// [`planned`](Self::planned) by one).
    pub(crate) fn replacements_reserved(&self) -> usize {
        self.shared.lock().sampling().map_or(0, |s| s.reserved)
    }

    /// Whether it is a completion of samples made on demand (sampling may have stopped).
    pub(crate) fn samples_made(&self) -> bool {
        matches!(self.shared.lock().mode, Mode::Samples(_))
    }

    /// The most samples this completion can have: `max` for one made by
    /// [`samples`](CompletionsBuilder::samples) while sampling goes on, else those started.
    pub(crate) fn planned(&self) -> usize {
        let mut state = self.shared.lock();
        match state.sampling() {
            Some(s) => s.max,
            None => state.upstreams.len(),
        }
    }
}
