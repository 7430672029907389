//! Property: for any multi-choice completion, any interleaving of its choices' updates (a
//! choice first seen after a higher index, several choices in one chunk) and any split of the
//! bytes into reads give, choice for choice, the same events and the same assembled result as
//! the orderly stream (each choice's updates in one run, read in one piece).

use crate::common::streams::{completion, interleave, orderly, sse};

use std::sync::LazyLock;

use choicewise_core::{ChatCompletion, ChoiceEvent, Completions, Source};
use choicewise_test_support::upstream;
use proptest::prelude::*;

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

async fn outcome(reads: Vec<Vec<u8>>) -> (ChatCompletion, Vec<(u32, Vec<ChoiceEvent>)>) {
    crate::common::observe(Completions::new(Source::sse(upstream(reads)))).await
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_and_any_split_give_the_orderly_result(
        choices in completion(),
        picks in prop::collection::vec(0usize..4, 0..200),
        group in prop::collection::vec(any::<bool>(), 0..200),
        sizes in prop::collection::vec(1usize..40, 1..8),
    ) {
        let reference = RUNTIME.block_on(outcome(vec![sse(&orderly(&choices))]));
        let shuffled = sse(&interleave(&choices, &picks, &group));
        let actual = RUNTIME.block_on(outcome(crate::common::split(&shuffled, &sizes)));
        prop_assert_eq!(&actual.0.choices, &reference.0.choices);
        prop_assert_eq!(&actual.1, &reference.1);
        // And the reference is what the updates say, for the texts.
        for (c, updates) in reference.0.choices.iter().zip(&choices) {
            let text: String = updates.iter()
                .filter_map(|u| u["delta"]["content"].as_str()).collect();
            prop_assert_eq!(c.message.content.as_deref(), Some(text.as_str()));
        }
    }
}
