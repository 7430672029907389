//! Arbitrary bytes through `Demux`, the demultiplexer without a runtime: no panic, and the
//! same outcome however the bytes are split into reads. No runtime is built per input.
//! Input: a limit byte, two split-seed bytes, the stream (see `StreamInput`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    choicewise_fuzz::invariants::check_demux(data);
});
