//! The knobs of §6.2's factor analysis (and §4.8's linear vs binary search), so that one
//! build, and one `forest bench` run, can measure what each design feature is worth on this
//! machine. Every combination is a complete Masstree: it passes the conformance kit and the
//! hard cases (`tests/conformance.rs`, `tests/hard_cases.rs`).
//!
//! Run-time knobs ([`MasstreeConfig`], fixed for a tree's life, read once per node or per
//! operation: a perfectly predicted branch on the default path):
//! - `prefetch` (§4.2, Fig. 8 "+Prefetch"): fetch all of a child's cache lines before
//!   searching it; the line count is [`crate::Masstree::PREFETCH_LINES`], from the node sizes.
//! - `search` (§4.8: linear "can be up to 5% faster" than binary on Intel): in-node search.
//! - `permuter` (§4.6.2, Fig. 8 "+Permuter"): off gives the paper's "B-tree" border node,
//!   kept physically sorted. An insert or remove, under the node lock, marks the version
//!   inserting and shifts the slots after its position in place; the permutation stays the
//!   identity over the live slots, so readers run the same code and the version check
//!   (`vinsert`) makes the ones that overlap a shift retry (crate::border invariants).
//! - `suffix` (§4.2 "keysuffixes", Fig. 9 "+Permuter" vs Masstree for long keys): where the
//!   key bytes past a slot's slice live. [`SuffixStorage::Block`] (default) keeps them in the
//!   slot's value block; [`SuffixStorage::Separate`] in a block of their own reached from the
//!   value block (one more dependent miss per suffix compare, freed with the value block);
//!   [`SuffixStorage::Layers`] stores none: every key longer than its slice goes into a
//!   layer, created at once even for one key, so every key byte is compared as a slice.
//!
//! Compile-time shape (§4.2: "tree nodes of four cache lines ... allow a fanout of 15"):
//! border slots `W` and interior fanout `F` are const parameters of
//! [`crate::Masstree`]`<W, F>`, so node sizes really change: the paper's 15/16 (border node 7
//! cache lines here, interior 5), [`crate::Masstree10x8`] (5 and 3 lines, a deeper tree) and
//! [`crate::Masstree15x32`] (interior nodes of 9 lines, a shallower tree). A border node needs
//! at least 10 slots: all keys with one slice share a border node, and up to 10 keys share a
//! slice (§4.2), so the paper's narrower "4-tree" shapes are not Masstrees.
//!
//! Not switchable: `+Flow` and `+Superpage` (the allocator is the process's), `+IntCmp`
//! (slices are always compared as integers), and the binary tree and 4-tree baselines of
//! Fig. 8 (other data structures; `forest bench` has peers instead).

/// How a node is searched for a key (§4.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeSearch {
    /// Scan keys in order (the paper's choice; better locality).
    #[default]
    Linear,
    /// Halve the range each step (border nodes through the permutation).
    Binary,
}

/// Where a border node keeps the key bytes past a slot's slice (§4.2 "keysuffixes", Fig. 9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SuffixStorage {
    /// In the slot's value block: one allocation per key, one pointer chase to compare.
    #[default]
    Block,
    /// In a heap block of its own, reached from the value block by pointer: a suffix compare
    /// costs one more dependent miss (the paper's "suffix in separate memory").
    Separate,
    /// Nowhere: a key longer than its slice always goes into a deeper layer, created at once
    /// even for one key, so every key byte is compared as part of an 8-byte slice.
    Layers,
}

/// Configuration of a [`crate::Masstree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MasstreeConfig {
    /// Prefetch a child node's cache lines before searching it (§4.2, §6.2 "+Prefetch").
    pub prefetch: bool,
    /// In-node search of border and interior nodes.
    pub search: NodeSearch,
    /// Order border nodes through the permutation (§4.6.2, §6.2 "+Permuter"); when off, a
    /// border node's slots stay physically sorted and inserts and removes shift them.
    pub permuter: bool,
    /// Where key suffixes live.
    pub suffix: SuffixStorage,
}

impl Default for MasstreeConfig {
    fn default() -> Self {
        Self {
            prefetch: true,
            search: NodeSearch::Linear,
            permuter: true,
            suffix: SuffixStorage::Block,
        }
    }
}
