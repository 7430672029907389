//! Any text in fragments through the incremental partial-JSON parser: no panic, split
//! invariance, agreement with serde_json, prefix-consistent intermediate values. Input: a
//! split-seed byte, then the text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    choicewise_fuzz::invariants::check_partial_json(data);
});
