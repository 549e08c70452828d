//! The process's memory allocator: mimalloc, for Rust's allocations (`#[global_allocator]`) and,
//! through `libmimalloc-sys`'s `override` feature, for the C libraries' `malloc`/`free`
//! (librdkafka's messages, buffers and header lists).
//!
//! Why: a forwarded record costs librdkafka several small allocations and frees on the
//! consumer's, the producer's and the pipeline's threads (the fetched message's op, the produced
//! message, its header list and each header), and glibc's allocator (its arenas, fastbins and
//! `malloc_consolidate`) made them about a fifth of the CPU per record at 100-byte values.
//! Measured side by side in one run on Apache Kafka (BENCHMARKS.md, "Fifth sitting"): at 100 B
//! kafka-dedup forwards 1.13-1.57x the records a second of the same build on glibc, at 0.67-1.00x
//! its CPU per record; at 1 KB the rate moves within the runs' noise (0.80-1.28x, 6 runs).
//!
//! The cost is memory: mimalloc keeps freed pages per thread for reuse and purges them after a
//! delay (`MIMALLOC_PURGE_DELAY`, milliseconds, 1000 by default in mimalloc 3), so the resident
//! set of a full-speed run is 1.1-1.4x glibc's; a held fingerprint costs 29.5 B of peak RSS at
//! 10M held (glibc: 25.5 B, same sitting). Built with `no_thp`: mimalloc does not ask for
//! transparent huge pages (`madvise(MADV_HUGEPAGE)`), which made the resident set 1.7-1.8x glibc's
//! for a few percent of rate. mimalloc's `MIMALLOC_*` environment variables apply as documented by
//! mimalloc (`MIMALLOC_VERBOSE=1` prints its options at start).
//!
//! Declared in the library so that the binary, the tests and the benchmarks (which run the
//! pipeline in-process and measure its memory) all run on the same allocator.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands the allocator's free memory back to the operating system now (`mi_collect(true)`:
/// this thread's free pages, and the abandoned ones of exited threads) instead of after
/// mimalloc's purge delay. Called after a large release of memory: the store's page cache once a
/// recovery has read 16 MiB of snapshot chunks (`store::Store`'s cache release). Never fails.
pub fn return_free_memory() {
    // SAFETY: mi_collect takes no pointer; it frees or purges only pages that hold no live block.
    unsafe { libmimalloc_sys::mi_collect(true) };
}
