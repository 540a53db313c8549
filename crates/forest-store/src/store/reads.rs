//! Reads that answered "not found" because a page could not be loaded (a bwtree on its LSS;
//! review rev-lstore F3), counted per thread, so that a caller built on the reads without a
//! `Result` ([`crate::Store::get`], `get_many`, `scan`, ...) can still tell that one of its
//! own reads failed: the server turns the command's reply into an error and refuses the
//! command's writes (a write decided from a wrong "absent" would be wrong too).
//!
//! Why per thread: the tree's error slot is shared, so another thread may take an error
//! first or leave one behind; a thread's own count changes only by its own reads.

use std::cell::{Cell, RefCell};

use forest_core::Error;

std::thread_local! {
    /// Failed reads on this thread since it started.
    static FAILED: Cell<u64> = const { Cell::new(0) };
    /// The newest one's message.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A mark in this thread's failed reads ([`Self::mark`], then [`Self::since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadFailures(u64);

impl ReadFailures {
    /// This thread's failed reads so far.
    pub fn mark() -> Self {
        Self(FAILED.with(Cell::get))
    }

    /// The newest failure's message (file, offset, page), if a read on this thread answered
    /// "not found" because of a load error since the mark.
    pub fn since(self) -> Option<String> {
        if FAILED.with(Cell::get) == self.0 {
            return None;
        }
        Some(LAST.with(|last| last.borrow().clone()).unwrap_or_default())
    }
}

/// Counts a failed read on this thread.
pub(crate) fn note(error: &Error) {
    FAILED.with(|n| n.set(n.get() + 1));
    LAST.with(|last| *last.borrow_mut() = Some(error.to_string()));
}
