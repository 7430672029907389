//! Arbitrary bytes through `Completions::new(Source::sse(..))`: no panic (not even a caught one), no
//! hang, no actor left behind, and the same outcome however the bytes are split into reads.
//! Input: a limit byte, two split-seed bytes, the stream (see `StreamInput`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    choicewise_fuzz::runtime().block_on(choicewise_fuzz::invariants::check_pipeline(data));
    choicewise_fuzz::assert_no_actor_left();
});
