//! Framing a byte string equals framing any split of it, errors, `[DONE]` stops and the tail
//! included. Input: a limit byte, two split-seed bytes, the stream (see `StreamInput`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    choicewise_fuzz::check_framing(data);
});
