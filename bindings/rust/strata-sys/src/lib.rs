//! Raw bindings to strata's C API (include/strata/strata.h), linked statically from this
//! repository's sources.  Use the `strata-alloc` crate for a global allocator and safe statistics.
#![no_std]
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_void};

/// `strata_stats_t`: process-wide statistics (see include/strata/strata.h for each field).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct strata_stats_t {
    pub in_use_bytes: u64,
    pub committed_bytes: u64,
    pub committed_peak: u64,
    pub reserved_bytes: u64,
    pub malloc_count: u64,
    pub free_count: u64,
    pub remote_free_count: u64,
    pub huge_count: u64,
    pub mmap_calls: u64,
    pub munmap_calls: u64,
    pub madvise_calls: u64,
    pub segments: u64,
    pub abandoned_segments: u64,
    pub reclaimed_segments: u64,
    pub threads: u64,
    pub bad_free_count: u64,
}

extern "C" {
    pub fn strata_malloc(size: usize) -> *mut c_void;
    pub fn strata_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn strata_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    pub fn strata_free(p: *mut c_void);
    pub fn strata_free_sized(p: *mut c_void, size: usize);
    pub fn strata_free_aligned_sized(p: *mut c_void, alignment: usize, size: usize);
    pub fn strata_posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int;
    pub fn strata_aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
    pub fn strata_usable_size(p: *const c_void) -> usize;
    pub fn strata_collect(force: bool);
    pub fn strata_stats_get(out: *mut strata_stats_t);
    pub fn strata_stats_print();
    pub fn strata_stats_json(buf: *mut c_char, len: usize) -> usize;
    pub fn strata_options_json(buf: *mut c_char, len: usize) -> usize;
    pub fn strata_version() -> *const c_char;
}

/// Every block strata returns is aligned to this many bytes.
pub const STRATA_MIN_ALIGN: usize = 16;
