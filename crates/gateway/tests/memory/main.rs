//! The gateway's memory bounds, read from the process's own figures (the counting
//! allocator's heap, the resident set): one test binary of their own, since other tests
//! running beside them in one process would move those figures. A test that reads them holds
//! [`ONE_AT_A_TIME`], so that no two measure at once.

#[path = "../common/mod.rs"]
mod common;

mod answer_side;
mod ceiling;
mod cost_fuzz;
mod memory_choices;
mod memory_logprobs;
mod messages_cost;
mod requests;
mod slow_client;
mod under_attack;

/// The heap, counted: the peak of every allocation the process makes.
#[global_allocator]
pub static HEAP: choicewise_test_support::CountingAlloc =
    choicewise_test_support::CountingAlloc::new();

/// Held by every test that reads the process's figures.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
