//! The token counts' tests, in one binary (one link rather than seven). The heap's bounds
//! (`hostile_text.rs`) stay in a binary of their own: they measure the process's heap, which
//! no other test may share.

mod completion;
mod errors_and_robustness;
mod model_mapping;
mod observed_counts;
mod pretokenizer_equivalence;
mod prompt_bound;
mod published_examples;
