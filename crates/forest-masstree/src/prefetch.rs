//! Prefetching a node's cache lines before searching it (§4.2, §4.8; §6.2 measures it).
//!
//! A prefetch is a hint: it never faults and never changes memory, so any address is allowed,
//! even one of a node freed meanwhile; the reader validates what it then reads as usual.

/// Bytes per cache line on the machines this targets.
const CACHE_LINE_BYTES: usize = 64;

/// Cache lines to fetch ahead for a node, given the bytes a search of an interior node and of
/// a border node reads from the node's start ([`crate::Masstree::PREFETCH_LINES`]): 5 at the
/// paper's widths.
pub const fn lines(interior_bytes: usize, border_bytes: usize) -> usize {
    let bytes = if interior_bytes > border_bytes {
        interior_bytes
    } else {
        border_bytes
    };
    bytes.div_ceil(CACHE_LINE_BYTES)
}

/// Asks the CPU to start loading the first `lines` cache lines at `p` (a constant per tree
/// shape, so the loop unrolls).
#[inline(always)]
pub fn node<T>(p: *const T, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for i in 0..lines {
        let line = p.cast::<i8>().wrapping_add(i * CACHE_LINE_BYTES);
        // SAFETY: `_mm_prefetch` only hints the cache; it does not dereference `line` in the
        // language's sense and cannot fault (module doc). SSE is baseline on x86_64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, lines);
}
