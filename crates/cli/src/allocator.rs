//! The process's allocator: mimalloc, asked through its plain entry points wherever they
//! give the alignment asked.
//!
//! The `mimalloc` crate's allocator asks every allocation of `mi_malloc_aligned`, whose quick
//! path serves only blocks up to 1 KiB whose free block happens to be aligned; any other (a
//! read buffer, an answer's bytes) takes its general path, which rounds the size to a bin and,
//! unless that bin is a power of two, over-allocates by the alignment and aligns within: a
//! streamed request through the gateway made dozens of such calls (docs/benchmarks.md,
//! "mimalloc asked by its plain entry points"). Every mimalloc block starts on a word (its
//! sizes are whole words, a page's first block is 16-byte aligned), so an alignment of a word
//! or less needs nothing of the aligned entry points: `mi_malloc`, `mi_zalloc` and
//! `mi_realloc` serve those, the aligned ones the rest (a runtime's cache-padded cells).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// What every mimalloc block is aligned to, whatever its size.
const EVERY_BLOCK: usize = std::mem::size_of::<usize>();

/// Whether a block of `layout` is served by mimalloc's plain entry points: any of their
/// blocks has its alignment.
fn plain(layout: Layout) -> bool {
    layout.align() <= EVERY_BLOCK
}

/// mimalloc, by its plain entry points for alignments of a word or less.
pub(crate) struct MiMalloc;

// SAFETY: each method hands the layout's size to mimalloc and returns its block, which is
// aligned to a word at least (`EVERY_BLOCK`), and to the layout's alignment where that is
// larger (the aligned entry points); `dealloc` and `realloc` take blocks mimalloc gave.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls taking sizes and alignments (a power of two, from `Layout`).
        unsafe {
            match plain(layout) {
                true => mi::mi_malloc(layout.size()),
                false => mi::mi_malloc_aligned(layout.size(), layout.align()),
            }
        }
        .cast()
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            match plain(layout) {
                true => mi::mi_zalloc(layout.size()),
                false => mi::mi_zalloc_aligned(layout.size(), layout.align()),
            }
        }
        .cast()
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` is a block of this allocator (GlobalAlloc's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` is a block of this allocator of `layout` (GlobalAlloc's contract); the
        // new block keeps the layout's alignment as `alloc` gives it.
        unsafe {
            let ptr = ptr.cast::<c_void>();
            match plain(layout) {
                true => mi::mi_realloc(ptr, new_size),
                false => mi::mi_realloc_aligned(ptr, new_size, layout.align()),
            }
        }
        .cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes across the small blocks' 1 KiB and the large ones, at every alignment from 1 to
    /// 4 KiB, allocated plain and zeroed, grown and shrunk: each block aligned as asked, a
    /// zeroed one all zeros, a moved one with its bytes.
    #[test]
    fn every_size_and_alignment_gets_its_alignment_and_its_bytes() {
        let sizes = (1..=256)
            .chain((264..=5120).step_by(8).flat_map(|s| [s - 1, s, s + 1]))
            .chain([16 << 10, 100_000, 1 << 20, (4 << 20) + 8]);
        let bytes = |n: usize, b: u8| vec![b; n];
        let mut checked = 0;
        for size in sizes {
            for align in (0..=12).map(|k| 1usize << k) {
                let layout = Layout::from_size_align(size, align).unwrap();
                let what = format!("{size} bytes at {align}");
                let aligned = |p: *mut u8| !p.is_null() && (p as usize).is_multiple_of(align);
                // SAFETY: non-zero sizes; each block read within its size and freed once, by
                // this allocator, with the layout it has then.
                unsafe {
                    let a = MiMalloc.alloc(layout);
                    assert!(aligned(a), "{what}");
                    a.write_bytes(0xA5, size);
                    let z = MiMalloc.alloc_zeroed(layout);
                    assert!(aligned(z), "{what}, zeroed");
                    assert!(
                        std::slice::from_raw_parts(z, size) == bytes(size, 0),
                        "{what}"
                    );
                    MiMalloc.dealloc(z, layout);
                    let grown_size = size * 3 + 1;
                    let grown = MiMalloc.realloc(a, layout, grown_size);
                    assert!(aligned(grown), "{what}, grown");
                    let kept = std::slice::from_raw_parts(grown, size);
                    assert!(kept == bytes(size, 0xA5), "{what}, grown: its bytes");
                    grown.write_bytes(0x5A, grown_size);
                    let grown_layout = Layout::from_size_align(grown_size, align).unwrap();
                    let shrunk_size = size.div_ceil(2);
                    let shrunk = MiMalloc.realloc(grown, grown_layout, shrunk_size);
                    assert!(aligned(shrunk), "{what}, shrunk");
                    let kept = std::slice::from_raw_parts(shrunk, shrunk_size);
                    assert!(
                        kept == bytes(shrunk_size, 0x5A),
                        "{what}, shrunk: its bytes"
                    );
                    MiMalloc.dealloc(shrunk, Layout::from_size_align(shrunk_size, align).unwrap());
                }
                checked += 1;
            }
        }
        assert!(checked > 25_000, "{checked}");
    }
}
