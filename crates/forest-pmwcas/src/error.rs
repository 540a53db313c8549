//! Errors of the PMwCAS API and of opening a pool file. Each names what and where.

/// A PMwCAS API misuse, an exhausted pool, or a pool file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `AddWord`/`ReserveEntry` named a word twice (§2.3: target addresses are unique).
    #[error("the word at byte offset {offset} is already a target of this PMwCAS")]
    DuplicateAddress {
        /// Byte offset of the word in the region.
        offset: u64,
    },
    /// The descriptor has no free entry.
    #[error("descriptor full: a PMwCAS holds at most {max} entries")]
    TooManyEntries {
        /// The limit, `ENTRIES_MAX`.
        max: usize,
    },
    /// An expected or new value uses the three PMwCAS control bits.
    #[error("value {value:#x} uses the PMwCAS control bits {mask:#x}")]
    ControlBits {
        /// The value given.
        value: u64,
        /// The control bits it may not use.
        mask: u64,
    },
    /// The word is not a target word of this pool's region (outside it, misaligned, or in the
    /// pool's own header or descriptors).
    #[error("not a target word of this pool (byte offset {offset:?})")]
    NotATargetWord {
        /// Its byte offset in the region, when it lies inside it.
        offset: Option<u64>,
    },
    /// `RemoveWord` named a word that is not in the descriptor.
    #[error("the word at byte offset {offset} is not a target of this PMwCAS")]
    NoSuchWord {
        /// Byte offset of the word in the region.
        offset: u64,
    },
    /// A slot named no reserved entry of this descriptor.
    #[error("slot {slot} does not name a reserved entry of this descriptor")]
    BadSlot {
        /// The slot.
        slot: usize,
    },
    /// `PMwCAS` was called with a reserved entry whose new value was never set.
    #[error("slot {slot} was reserved but its new value was never set")]
    SlotUnset {
        /// The slot.
        slot: usize,
    },
    /// A slot's new value was set twice after its memory was handed to the descriptor.
    #[error("slot {slot} already holds activated memory")]
    SlotActivated {
        /// The slot.
        slot: usize,
    },
    /// `RemoveWord` named an entry that holds activated memory (discard the descriptor instead).
    #[error("the entry at byte offset {offset} holds activated memory and cannot be removed")]
    EntryActivated {
        /// Byte offset of the word in the region.
        offset: u64,
    },
    /// Every descriptor stayed busy through the bounded wait.
    #[error("descriptor pool exhausted: all {descriptors} descriptors busy after {rounds} waits")]
    PoolExhausted {
        /// Descriptors in the pool.
        descriptors: usize,
        /// Wait rounds spent.
        rounds: usize,
    },
    /// The pool's configuration is not usable.
    #[error("pool configuration: {0}")]
    Config(String),
    /// The pool file is not a pool of this version and geometry, or is corrupt.
    #[error("pool file: {0}")]
    Format(String),
    /// Mapping or sizing the pool file failed.
    #[error("pool file I/O: {0}")]
    Io(String),
}
