//! Any bytes as an event's data: parsing a chunk never panics, and a parsed chunk equals its
//! `into_owned()`, a second parse, and its serialise-then-parse.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    choicewise_fuzz::invariants::check_chunk_parse(data);
});
