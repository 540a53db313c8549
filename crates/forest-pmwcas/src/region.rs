//! The memory a pool lives in: one contiguous run of 8-byte words, in an anonymous mapping
//! (volatile mode, simulated crash images), in a shared mapping of a file (persistent mode,
//! §3.1), or on the heap as modeled atomics (loom, shuttle).
//!
//! Everything in a region is addressed by byte offset from its start, never by address: a
//! file is mapped at a different address in each run, and descriptors and target words record
//! offsets only (see `word.rs`). The region holds the pool's header and descriptors and the
//! user's words (node heap), laid out by `layout.rs`.
//!
//! This is one of the two modules with `unsafe` (the other is `clwb.rs`). Invariants:
//! - The word slice covers exactly the mapping, 8-aligned (mappings are page-aligned), and
//!   lives as long as the `Region`.
//! - Every access to region memory through this crate is atomic (`AtomicU64`, which has
//!   `u64`'s layout and interior mutability), so the shared slice may alias the mapping that
//!   other code writes through [`Region::base_ptr`].
//! - The file is never truncated or remapped while a `Region` maps it (the region owns the
//!   mapping; its length is fixed at open).

#[cfg(not(any(loom, shuttle)))]
use crate::error::Error;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::word::Word;

/// Bytes of one word.
pub const WORD_BYTES: usize = 8;
/// Granularity of region sizes: a page, so that a mapped region is whole pages (a cache line
/// under loom and shuttle, where every word is a modeled atomic).
pub const REGION_ALIGN_BYTES: usize = if cfg!(any(loom, shuttle)) { 64 } else { 4096 };

enum Storage {
    /// Loom and shuttle models: modeled atomics on the heap.
    #[cfg(any(loom, shuttle))]
    Heap(Box<[AtomicU64]>),
    /// Volatile regions and crash images: an anonymous mapping, zero pages until touched.
    #[cfg(not(any(loom, shuttle)))]
    Anonymous(memmap2::MmapMut),
    #[cfg(not(any(loom, shuttle)))]
    Mapped(memmap2::MmapMut),
}

/// A run of words that a pool lives in (see the module doc).
pub struct Region {
    storage: Storage,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("bytes", &self.len_bytes())
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

impl Region {
    /// A zeroed volatile region of `bytes` (rounded up to [`REGION_ALIGN_BYTES`]): an
    /// anonymous mapping, so a large node heap costs nothing until it is used.
    ///
    /// # Panics
    /// If the system refuses the mapping (out of address space): there is no region to run on.
    pub fn heap(bytes: usize) -> Self {
        let bytes = bytes.div_ceil(REGION_ALIGN_BYTES).max(1) * REGION_ALIGN_BYTES;
        #[cfg(not(any(loom, shuttle)))]
        {
            let map = memmap2::MmapMut::map_anon(bytes)
                .unwrap_or_else(|e| panic!("anonymous mapping of {bytes} bytes failed: {e}"));
            Self {
                storage: Storage::Anonymous(map),
            }
        }
        #[cfg(any(loom, shuttle))]
        {
            Self {
                storage: Storage::Heap(
                    (0..bytes / WORD_BYTES).map(|_| AtomicU64::new(0)).collect(),
                ),
            }
        }
    }

    /// A volatile region holding `image` (a simulated crash image, `sim.rs`).
    pub fn from_image(image: &[u64]) -> Self {
        let region = Self::heap(image.len() * WORD_BYTES);
        for (word, &value) in region.words().iter().zip(image) {
            word.store(value, Ordering::Relaxed);
        }
        region
    }

    /// Maps the file at `path` shared, creating it with `bytes` (rounded up to a page) if it is
    /// missing or empty; an existing file keeps its length.
    #[cfg(not(any(loom, shuttle)))]
    pub fn map_file(path: &std::path::Path, bytes: usize) -> Result<Self, Error> {
        let io =
            |what: &str, e: std::io::Error| Error::Io(format!("{what} {}: {e}", path.display()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io("open", e))?;
        let mut len = file.metadata().map_err(|e| io("stat", e))?.len();
        if len == 0 {
            len = (bytes.div_ceil(REGION_ALIGN_BYTES) * REGION_ALIGN_BYTES) as u64;
            file.set_len(len).map_err(|e| io("size", e))?;
        }
        if len % REGION_ALIGN_BYTES as u64 != 0 {
            return Err(Error::Format(format!(
                "{} is {len} bytes, not a whole number of {REGION_ALIGN_BYTES}-byte pages",
                path.display()
            )));
        }
        // SAFETY: the mapping is shared with no other mapping of this process (the pool is
        // the file's only user, issue 16); the file is not truncated while mapped (module
        // invariant); all access goes through atomics or the raw base pointer.
        let map =
            unsafe { memmap2::MmapOptions::new().map_mut(&file) }.map_err(|e| io("map", e))?;
        Ok(Self {
            storage: Storage::Mapped(map),
        })
    }

    /// Whether the region maps a file.
    pub fn is_mapped(&self) -> bool {
        match &self.storage {
            #[cfg(any(loom, shuttle))]
            Storage::Heap(_) => false,
            #[cfg(not(any(loom, shuttle)))]
            Storage::Anonymous(_) => false,
            #[cfg(not(any(loom, shuttle)))]
            Storage::Mapped(_) => true,
        }
    }

    /// The region's words.
    #[inline]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        match &self.storage {
            #[cfg(any(loom, shuttle))]
            Storage::Heap(words) => words,
            #[cfg(not(any(loom, shuttle)))]
            Storage::Anonymous(map) | Storage::Mapped(map) => {
                // SAFETY: module invariants: the mapping is page-aligned (so 8-aligned), its
                // length is a whole number of pages (so of words), it lives as long as `self`,
                // and `AtomicU64` has `u64`'s size and alignment, with interior mutability for
                // the stores made through it.
                unsafe {
                    std::slice::from_raw_parts(
                        map.as_ptr().cast::<AtomicU64>(),
                        map.len() / WORD_BYTES,
                    )
                }
            }
        }
    }

    /// The word at byte `offset`, if it is an aligned offset inside the region (crate only:
    /// users reach target words through `Pool::word`, which keeps them out of the pool).
    #[inline]
    pub(crate) fn word(&self, offset: u64) -> Option<&Word> {
        if !offset.is_multiple_of(WORD_BYTES as u64) {
            return None;
        }
        let atomic = self
            .words()
            .get(usize::try_from(offset).ok()? / WORD_BYTES)?;
        // SAFETY: `Word` is `repr(transparent)` over `AtomicU64`, so the reference casts.
        Some(unsafe { &*std::ptr::from_ref(atomic).cast::<Word>() })
    }

    /// The byte offset of `word`, if it lies in this region.
    #[inline]
    pub fn offset_of(&self, word: &Word) -> Option<u64> {
        let words = self.words();
        // `WORD_BYTES` except under shuttle, whose modeled atomic is larger than its value.
        let stride = size_of::<AtomicU64>();
        let base = words.as_ptr() as usize;
        let at = std::ptr::from_ref(word) as usize;
        let offset = at.checked_sub(base)?;
        (offset < size_of_val(words) && offset % stride == 0)
            .then_some((offset / stride * WORD_BYTES) as u64)
    }

    /// The raw word at byte `offset`, control bits included: for [`Persist`] implementations
    /// that copy bytes to a durable image (`Sim`). Never a substitute for `Pool::read`.
    ///
    /// [`Persist`]: crate::Persist
    pub fn load_for_flush(&self, offset: u64) -> Option<u64> {
        self.word(offset).map(Word::load_raw)
    }

    /// Length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.words().len() * WORD_BYTES
    }

    /// The region's first byte, for users that copy variable-length data (records) into their
    /// part of it and flush it before it becomes visible (§6.2). Any write through it must
    /// not touch a word while PMwCAS may change it.
    pub fn base_ptr(&self) -> *mut u8 {
        self.words().as_ptr().cast_mut().cast::<u8>()
    }

    /// Asks the kernel to back bytes `range` of an anonymous region with transparent huge
    /// pages (`madvise(MADV_HUGEPAGE)`; the usual THP setting `madvise` grants them only on
    /// request). Best effort: an error (no THP support, a range the kernel refuses) leaves
    /// ordinary pages. A node heap read at random through a descent touches one 4 KiB page
    /// per node, more than the TLB holds at a million keys (issue 16, BENCHMARKS session 19).
    /// Mapped files and loom or shuttle regions are left alone.
    pub fn advise_huge_pages(&self, range: std::ops::Range<usize>) {
        let _ = &range;
        // memmap2 has `Advice::HugePage` on Linux only (review rev-bz4 F2).
        #[cfg(all(target_os = "linux", not(any(loom, shuttle))))]
        if let Storage::Anonymous(map) = &self.storage {
            let page = REGION_ALIGN_BYTES;
            let start = range.start / page * page;
            let end = range.end.min(map.len());
            if start < end {
                let _ = map.advise_range(memmap2::Advice::HugePage, start, end - start);
            }
        }
    }

    /// A copy of every word (relaxed loads): what a test compares, or a crash image's start.
    pub fn snapshot(&self) -> Vec<u64> {
        self.words()
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect()
    }

    /// `msync` of the pages holding `range` (bytes); heap regions have nothing to sync.
    #[cfg(not(any(loom, shuttle)))]
    pub(crate) fn sync_range(&self, range: std::ops::Range<usize>) -> std::io::Result<()> {
        match &self.storage {
            Storage::Anonymous(_) => Ok(()),
            Storage::Mapped(map) => map.flush_range(range.start, range.len()),
        }
    }
}
