//! Run-time knobs for the factor analysis of §6.2 (and §4.8's linear vs binary search), so
//! one build can measure what each design feature is worth on this machine.
//!
//! Each knob is read once per node visited from the tree's own (immutable) config, a
//! perfectly predicted branch, so the default path pays no measurable cost.
//!
//! Which of §6.2's features are switchable here, and why the others are not:
//! - `+Prefetch`: [`MasstreeConfig::prefetch`].
//! - in-node search (§4.8: linear "can be up to 5% faster" on Intel): [`MasstreeConfig::search`].
//! - `+Permuter`: not switchable. Without the permutation a border insert must shift keys in
//!   place, which needs a different reader protocol (readers could see a half-shifted node
//!   without the `inserting` mark on every insert); it is the design, not a setting.
//! - fanout (15/16) and node layout: compile-time array sizes; changing them is a
//!   different type, not a run-time knob.
//! - suffixes stored beside the node vs inline: one layout, not switchable.
//! - `+Flow`, `+Superpage`: the allocator is the process's (system malloc by default).

/// How a node is searched for a key (§4.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeSearch {
    /// Scan keys in order (the paper's choice; better locality).
    #[default]
    Linear,
    /// Halve the range each step (border nodes through the permutation).
    Binary,
}

/// Configuration of a [`crate::Masstree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MasstreeConfig {
    /// Prefetch a child node's cache lines before searching it (§4.2, §6.2 "+Prefetch").
    pub prefetch: bool,
    /// In-node search of border and interior nodes.
    pub search: NodeSearch,
}

impl Default for MasstreeConfig {
    fn default() -> Self {
        Self {
            prefetch: true,
            search: NodeSearch::Linear,
        }
    }
}
