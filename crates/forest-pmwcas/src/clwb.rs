//! The `clwb` persister: cache-line write-back by the best instruction the CPU has, found once
//! by CPUID, then `sfence` (BzTree §2.1, §7.4: the paper used `clflush`, and expected `clwb`
//! to be cheaper because it keeps the line cached).
//!
//! `core::arch` offers `_mm_clflush` and `_mm_sfence` but no `clwb` or `clflushopt`
//! intrinsic on stable, so those two are one-instruction `asm!` blocks. This is one of the two
//! modules with `unsafe` (the other is `region.rs`). Invariants:
//! - An instruction is only issued after CPUID reported it (CPUID.7.0:EBX bit 24 `clwb`, bit 23
//!   `clflushopt`; CPUID.1:EDX bit 19 `clflush`, present on every x86-64).
//! - Only addresses inside the region's live words are flushed (the range is clamped to the
//!   region), so each flushed line is mapped.
//!
//! On other architectures `Clwb` flushes nothing and says so in its name (`clwb-unsupported`);
//! persistent mode there needs `msync`.

use std::ops::Range;

use crate::persist::{Persist, CACHE_LINE_BYTES};
use crate::region::Region;

/// Which write-back instruction the CPU offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushInstruction {
    /// `clwb`: write back, keep the line.
    Clwb,
    /// `clflushopt`: write back and evict, weakly ordered.
    Clflushopt,
    /// `clflush`: write back and evict, ordered.
    Clflush,
    /// Not x86-64: nothing to issue.
    Unsupported,
}

/// Cache-line write-back persister (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct Clwb {
    instruction: FlushInstruction,
}

impl Default for Clwb {
    fn default() -> Self {
        Self::detect()
    }
}

impl Clwb {
    /// Picks the best instruction by CPUID.
    pub fn detect() -> Self {
        Self {
            instruction: detect_instruction(),
        }
    }

    /// The instruction in use.
    pub fn instruction(&self) -> FlushInstruction {
        self.instruction
    }
}

#[cfg(target_arch = "x86_64")]
fn detect_instruction() -> FlushInstruction {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    #[allow(unused_unsafe)] // `__cpuid` is a safe fn in newer toolchains
    // SAFETY: CPUID exists on every x86-64 CPU; leaf 7 is only read when leaf 0 reports it.
    let (max_leaf, leaf1_edx) = unsafe { (__cpuid(0).eax, __cpuid(1).edx) };
    let leaf7_ebx = if max_leaf >= 7 {
        #[allow(unused_unsafe)]
        // SAFETY: leaf 7 is supported (checked above).
        unsafe {
            __cpuid_count(7, 0).ebx
        }
    } else {
        0
    };
    if leaf7_ebx & (1 << 24) != 0 {
        FlushInstruction::Clwb
    } else if leaf7_ebx & (1 << 23) != 0 {
        FlushInstruction::Clflushopt
    } else if leaf1_edx & (1 << 19) != 0 {
        FlushInstruction::Clflush
    } else {
        FlushInstruction::Unsupported
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_instruction() -> FlushInstruction {
    FlushInstruction::Unsupported
}

impl Persist for Clwb {
    const DURABLE: bool = true;

    #[inline]
    fn flush(&self, region: &Region, range: Range<usize>) {
        let len = region.len_bytes();
        let start = range.start.min(len) / CACHE_LINE_BYTES * CACHE_LINE_BYTES;
        let end = range.end.min(len);
        let base = region.base_ptr();
        let mut line = start;
        while line < end {
            let at = base.wrapping_add(line);
            flush_line(self.instruction, at);
            line += CACHE_LINE_BYTES;
        }
    }

    #[inline]
    fn fence(&self) {
        #[cfg(target_arch = "x86_64")]
        if self.instruction != FlushInstruction::Unsupported {
            // SAFETY: sfence has no preconditions on x86-64.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
    }

    fn name(&self) -> &'static str {
        match self.instruction {
            FlushInstruction::Unsupported => "clwb-unsupported",
            _ => "clwb",
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn flush_line(instruction: FlushInstruction, at: *mut u8) {
    match instruction {
        FlushInstruction::Clwb => {
            // SAFETY: CPUID reported clwb; `at` is inside the region's mapped words (module
            // invariant), so the line is mapped. clwb neither writes memory nor the stack.
            unsafe { std::arch::asm!("clwb [{0}]", in(reg) at, options(nostack, preserves_flags)) }
        }
        FlushInstruction::Clflushopt => {
            // SAFETY: CPUID reported clflushopt; the line is mapped (as above).
            unsafe {
                std::arch::asm!("clflushopt [{0}]", in(reg) at, options(nostack, preserves_flags))
            }
        }
        FlushInstruction::Clflush => {
            // SAFETY: CPUID reported clflush; the line is mapped (as above).
            unsafe { std::arch::x86_64::_mm_clflush(at) }
        }
        FlushInstruction::Unsupported => {}
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn flush_line(_instruction: FlushInstruction, _at: *mut u8) {}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;
    use crate::sync::atomic::Ordering;

    #[test]
    fn flushes_every_line_of_a_region_without_changing_it() {
        // Goal: the detected instruction runs on this CPU and leaves data intact. Method:
        // write a pattern, flush all of it and an out-of-range tail, fence, compare.
        let region = Region::heap(8192);
        for (i, w) in region.words().iter().enumerate() {
            w.store(i as u64 * 3, Ordering::Relaxed);
        }
        let clwb = Clwb::detect();
        clwb.flush(&region, 0..region.len_bytes() + 100);
        clwb.fence();
        for (i, w) in region.words().iter().enumerate() {
            assert_eq!(w.load(Ordering::Relaxed), i as u64 * 3);
        }
        #[cfg(target_arch = "x86_64")]
        assert_ne!(clwb.instruction(), FlushInstruction::Unsupported);
    }
}
