//! A multi-choice completion built from the input (per-choice updates: text, reasoning,
//! refusal, tool-call fragments by index/id/name, arguments as JSON values, logprobs,
//! finishes), streamed orderly and interleaved + split as the input says: `collect()` and
//! every choice's events are the same.
//!
//! With `CHOICEWISE_FUZZ_DUMP=1` the scenario is printed as JSON before it runs: that is the
//! form `fuzz/regressions/merge_interleaving/*.json` keeps, for `tests/hostile.rs` to replay.
#![no_main]

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use choicewise_fuzz::ArbScenario;
use libfuzzer_sys::fuzz_target;

fn dump() -> bool {
    static DUMP: OnceLock<bool> = OnceLock::new();
    *DUMP.get_or_init(|| std::env::var_os("CHOICEWISE_FUZZ_DUMP").is_some())
}

fuzz_target!(|data: &[u8]| {
    let Ok(arb) = ArbScenario::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let Some(scenario) = arb.scenario() else {
        return;
    };
    if dump() {
        println!("{}", serde_json::to_string_pretty(&scenario).unwrap());
    }
    choicewise_fuzz::runtime().block_on(choicewise_fuzz::invariants::check_merge(&scenario));
    choicewise_fuzz::assert_no_actor_left();
});
