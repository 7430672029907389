//! The `choicewise` command: the process-wide settings, then [`choicewise_cli::run`].

use std::process::ExitCode;

mod allocator;

/// The process's allocator: glibc's kept a gateway's peak memory long after a load, where
/// mimalloc returns freed pages to the system (`src/memory.rs` says how `serve` tunes it),
/// asked by its plain entry points where they align enough (`src/allocator.rs`).
#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

fn main() -> ExitCode {
    no_transparent_huge_pages();
    ExitCode::from(choicewise_cli::run(std::env::args_os()))
}

/// No transparent huge pages for the process's memory from here on. mimalloc commits its
/// arenas at once where the system overcommits; the kernel then backs them with huge pages,
/// and every touched 2 MiB counts as resident: a replay's peak and the gateway's memory were
/// about twice what the process used (docs/benchmarks.md has the figures). mimalloc has an
/// option for it, read only before its first allocation, which comes before `main`.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: `prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)` takes integers and touches no memory of
    // ours; it fails harmlessly on a kernel without transparent huge pages.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
