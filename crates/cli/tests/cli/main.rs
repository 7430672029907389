//! The command-line tool as its users run it: the built `choicewise` binary, its commands
//! against loopback servers, recordings, the console in Chromium, and the docs' own commands.
//!
//! One test binary (not one a file): it is linked once, and tests that mostly wait on their
//! processes run beside those that compute, which separate binaries would run one after the
//! other. Filter by module: `cargo test -p choicewise-cli --test cli chat::`.

// Most of these tests wait on the processes they start: two a core at once.
choicewise_test_support::waiting_tests!();

mod chat;
mod console;
mod docs;
mod keys;
mod nginx;
mod records;
mod records_data;
mod replay;
mod serve;
