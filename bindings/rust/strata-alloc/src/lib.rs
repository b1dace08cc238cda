//! strata as Rust's global allocator.
//!
//! ```ignore
//! #[global_allocator]
//! static A: strata_alloc::Strata = strata_alloc::Strata;
//! ```
//!
//! Allocations go to strata's `strata_*` entry points (the process's `malloc` is untouched):
//! alignments up to 16 bytes — every strata block has them — through `strata_malloc`,
//! `strata_calloc` and `strata_realloc`; larger ones through `strata_aligned_alloc`.  Frees
//! pass the layout back (`strata_free_sized`, `strata_free_aligned_sized`).  [`stats`] reads
//! strata's process-wide statistics.

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::{c_char, c_void, CStr};
use core::ptr;

use strata_sys as sys;

pub use sys::strata_stats_t as Stats;

/// The global allocator.  A unit struct: all state is strata's, process-wide.
#[derive(Clone, Copy, Debug, Default)]
pub struct Strata;

#[inline(always)]
fn natural(layout: &Layout) -> bool {
    layout.align() <= sys::STRATA_MIN_ALIGN
}

unsafe impl GlobalAlloc for Strata {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if natural(&layout) {
            sys::strata_malloc(layout.size()) as *mut u8
        } else {
            sys::strata_aligned_alloc(layout.align(), layout.size()) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if natural(&layout) {
            // strata_calloc skips the clearing for memory fresh from the OS.
            sys::strata_calloc(1, layout.size()) as *mut u8
        } else {
            let p = self.alloc(layout);
            if !p.is_null() {
                ptr::write_bytes(p, 0, layout.size());
            }
            p
        }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if natural(&layout) {
            sys::strata_free_sized(p as *mut c_void, layout.size())
        } else {
            sys::strata_free_aligned_sized(p as *mut c_void, layout.align(), layout.size())
        }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if natural(&layout) {
            return sys::strata_realloc(p as *mut c_void, new_size) as *mut u8;
        }
        // No aligned realloc in C: move the block when it does not fit, or when a shrink would
        // leave more than half of it unused (as strata_realloc does: a Vec of over-aligned
        // elements truncated and shrunk to fit gives its memory back).
        let usable = sys::strata_usable_size(p as *const c_void);
        if new_size <= usable && (new_size >= layout.size() || new_size >= usable / 2) {
            return p;
        }
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let q = self.alloc(new_layout);
        if !q.is_null() {
            ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
            self.dealloc(p, layout);
        }
        q
    }
}

/// strata's process-wide statistics now (see `strata_stats_t` in include/strata/strata.h).
pub fn stats() -> Stats {
    let mut s = Stats::default();
    unsafe { sys::strata_stats_get(&mut s) };
    s
}

/// The statistics as JSON, with per-size-class counts (`strata_stats_json`).
pub fn stats_json() -> String {
    json(sys::strata_stats_json)
}

/// The effective options as JSON (`strata_options_json`).
pub fn options_json() -> String {
    json(sys::strata_options_json)
}

fn json(f: unsafe extern "C" fn(*mut c_char, usize) -> usize) -> String {
    let mut buf = vec![0u8; 4096];
    loop {
        let need = unsafe { f(buf.as_mut_ptr() as *mut c_char, buf.len()) };
        if need < buf.len() {
            buf.truncate(need);
            return String::from_utf8_lossy(&buf).into_owned();
        }
        buf.resize(need + 1, 0);
    }
}

/// The usable size of a block strata returned: 0 for any other pointer (null, not strata's,
/// freed, inside a block, however wild).
///
/// # Safety
///
/// No other thread may free the block that `p` points into while the call runs: strata reads
/// the block's segment, which a free elsewhere may unmap under it (a fault, not an answer).
///
/// ```compile_fail,E0133
/// // Safe code could race it against a free on another thread.
/// let v = vec![1u8; 10];
/// let _ = strata_alloc::usable_size(v.as_ptr());
/// ```
pub unsafe fn usable_size<T: ?Sized>(p: *const T) -> usize {
    sys::strata_usable_size(p as *const c_void)
}

/// Returns free memory to the OS: all of it (`force`) or what is past the purge delay.
pub fn collect(force: bool) {
    unsafe { sys::strata_collect(force) }
}

/// strata's version, e.g. "0.1.0".
pub fn version() -> &'static str {
    unsafe { CStr::from_ptr(sys::strata_version()) }.to_str().unwrap_or("?")
}
