//! The memory-tool build (`RUSTFLAGS="--cfg forest_memcheck"`): nothing freed is recycled,
//! so every node and base-page buffer goes back to the allocator (through the epoch, as
//! always) and AddressSanitizer or Valgrind sees each free; with debug assertions on, each is
//! also overwritten with [`POISON_BYTE`] just before, so a use-after-free reads garbage even
//! without a memory tool.
//!
//! Normally a thread keeps the node allocations it freed for its next deltas
//! (`Node::into_owned`) and its freed base pages' buffers for its next consolidations
//! (`page_buffers.rs`): a use-after-free there reads a live, recycled allocation, which no
//! memory tool reports. A cfg rather than a cargo feature, so that `--all-features` test runs
//! keep recycling on, as shipped.

/// Whether freed nodes and buffers are kept for reuse: always but in the memory-tool build.
pub(crate) const RECYCLES: bool = cfg!(not(forest_memcheck));

/// Whether freed nodes and buffers are poisoned: the memory-tool build with debug assertions.
pub const POISONS: bool = cfg!(all(forest_memcheck, debug_assertions));

/// The byte freed nodes and buffers are filled with.
pub const POISON_BYTE: u8 = 0xDB;

/// Bytes of one node allocation (a delta, or a base page's header), for tests that watch the
/// allocator.
pub const NODE_BYTES: usize = std::mem::size_of::<crate::delta::Node>();
