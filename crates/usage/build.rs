//! Writes each encoding's ordinary tokens into `OUT_DIR`, in rank order, for `src/bpe.rs` to
//! embed: `o200k_base.ranks` and `cl100k_base.ranks`, each token its length (two bytes, little
//! endian) then its bytes.
//!
//! tiktoken-rs parses its embedded tables into a whole tokenizer (two maps, a sorted copy, a
//! regex a thread) of which the counting needs only the ranks; doing it at each process's first
//! count cost most of that count (docs/usage.md, "Performance"). Here it is done once, at build
//! time, from the same tables, and a process reads the ranks straight from its binary.

use std::path::Path;

use tiktoken_rs::{CoreBPE, Rank};

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR for a build script");
    let out = Path::new(&out);
    let o200k = tiktoken_rs::o200k_base().expect("tiktoken-rs's o200k_base parses");
    write(&out.join("o200k_base.ranks"), &o200k);
    let cl100k = tiktoken_rs::cl100k_base().expect("tiktoken-rs's cl100k_base parses");
    write(&out.join("cl100k_base.ranks"), &cl100k);
}

/// The ordinary tokens of `table` (ranks 0, 1, … up to the first special token or the first
/// rank it does not have), written to `path`.
fn write(path: &Path, table: &CoreBPE) {
    let special: Vec<Rank> = (table.special_tokens().into_iter())
        .flat_map(|s| table.encode_with_special_tokens(s))
        .collect();
    let mut ranks = Vec::new();
    for rank in (0..Rank::MAX).take_while(|r| !special.contains(r)) {
        let Ok(bytes) = table.decode_bytes(&[rank]) else {
            break;
        };
        let len = u16::try_from(bytes.len()).expect("a token is shorter than 64 KiB");
        ranks.extend_from_slice(&len.to_le_bytes());
        ranks.extend_from_slice(&bytes);
    }
    std::fs::write(path, ranks).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
