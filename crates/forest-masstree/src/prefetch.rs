//! Prefetching a node's cache lines before searching it (§4.2, §4.8; §6.2 measures it).
//!
//! A prefetch is a hint: it never faults and never changes memory, so any address is allowed,
//! even one of a node freed meanwhile; the reader validates what it then reads as usual.

/// Cache lines fetched ahead for a node: a border node's header, permutation, key slices and
/// `keylen` bytes and the start of its value pointers; an interior node's keys and children.
pub const NODE_LINES_PREFETCHED: usize = 5;

/// Bytes per cache line on the machines this targets.
const CACHE_LINE_BYTES: usize = 64;

/// Asks the CPU to start loading the first [`NODE_LINES_PREFETCHED`] lines at `p`.
#[inline(always)]
pub fn node<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    for i in 0..NODE_LINES_PREFETCHED {
        let line = p.cast::<i8>().wrapping_add(i * CACHE_LINE_BYTES);
        // SAFETY: `_mm_prefetch` only hints the cache; it does not dereference `line` in the
        // language's sense and cannot fault (module doc). SSE is baseline on x86_64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
