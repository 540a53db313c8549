//! The memory-tool build (`RUSTFLAGS="--cfg forest_memcheck"`, `scripts/memcheck.sh`): with
//! debug assertions on, every node and block is overwritten with [`POISON_BYTE`] just before it
//! goes back to the allocator, so a use-after-free reads garbage that trips an assertion (a
//! node's version word becomes `nodeversion::POISON`) even without a memory tool.
//!
//! The crate recycles no memory of its own: every node and block is freed to the allocator
//! once the epoch allows, so under AddressSanitizer or Valgrind each free is visible. A cfg
//! rather than a cargo feature, so that `--all-features` test runs stay as shipped.
//!
//! Invariant: `free_box` is given a pointer from `Box::into_raw` of the same type, once, when
//! no other thread can reach it; it then owns the allocation.

use std::alloc::Layout;
use std::mem::MaybeUninit;

/// Whether freed memory is poisoned: the memory-tool cfg in a debug build.
pub const POISONS: bool = cfg!(all(forest_memcheck, debug_assertions));

/// The byte freed memory is filled with: all ones, so a poisoned version word equals the
/// `nodeversion::POISON` that `stable` and `lock` assert against.
pub const POISON_BYTE: u8 = 0xff;

const _: () = assert!(u64::from_ne_bytes([POISON_BYTE; 8]) == crate::nodeversion::POISON);

/// The allocation layouts of a default-shape tree's border and interior nodes ([`crate::Masstree`]
/// of 15 slots and fanout 16), so that the memory-tool test can tell a freed node by its layout.
pub const NODE_LAYOUTS: [Layout; 2] = [
    Layout::new::<crate::border::Border<15, 16>>(),
    Layout::new::<crate::interior::Interior<15, 16>>(),
];

/// Drops and frees the `Box<T>` behind `p`, poisoning its bytes in between when [`POISONS`].
///
/// # Safety
/// `p` came from `Box::into_raw(Box<T>)`, is freed once, and no other thread can reach it.
pub(crate) unsafe fn free_box<T>(p: *mut T) {
    if POISONS {
        // SAFETY: the caller's duty: `p` is a live `Box<T>` we own. After `drop_in_place` its
        // bytes are dead, so overwriting them is sound; `MaybeUninit<T>` has `T`'s layout,
        // so the box frees the same allocation without dropping `T` twice.
        unsafe {
            std::ptr::drop_in_place(p);
            std::ptr::write_bytes(p.cast::<u8>(), POISON_BYTE, std::mem::size_of::<T>());
            drop(Box::from_raw(p.cast::<MaybeUninit<T>>()));
        }
    } else {
        // SAFETY: as above.
        drop(unsafe { Box::from_raw(p) });
    }
}
