//! Epoch protection for descriptors and for memory freed by policy (BzTree §2.2, §2.3
//! "Memory management"): a thread pins before it reads a target word and stays pinned while
//! it may touch a descriptor it found there; a finished descriptor is released (its policies
//! applied, then back to its free list) only after every thread pinned at its retirement has
//! unpinned.
//!
//! Normal builds use crossbeam-epoch's global collector. crossbeam-epoch is not loom-aware, so
//! under `--cfg loom` a stand-in with the same contract runs instead: a pinned-thread count and
//! a retired list under one loom mutex; an unpin that leaves no thread pinned runs the list.
//! Everything retired then was retired before that moment by a thread that has since unpinned,
//! and no thread pinned at its retirement is still pinned, which is the epoch guarantee the
//! protocol relies on (`execute.rs`, "Reuse").

/// A pinned thread's protection; deferred work runs after every guard pinned before it drops.
pub struct Guard {
    #[cfg(not(loom))]
    inner: crossbeam_epoch::Guard,
    #[cfg(loom)]
    domain: std::sync::Arc<loom_domain::Domain>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

/// The reclamation domain of one pool.
#[derive(Default)]
pub(crate) struct Domain {
    #[cfg(loom)]
    inner: std::sync::Arc<loom_domain::Domain>,
}

impl Domain {
    /// Pins the calling thread.
    pub(crate) fn pin(&self) -> Guard {
        #[cfg(not(loom))]
        {
            Guard {
                inner: crossbeam_epoch::pin(),
            }
        }
        #[cfg(loom)]
        {
            self.inner.pin();
            Guard {
                domain: std::sync::Arc::clone(&self.inner),
            }
        }
    }
}

impl Guard {
    /// Runs `f` once no thread pinned now is still pinned.
    pub(crate) fn defer(&self, f: impl FnOnce() + Send + 'static) {
        #[cfg(not(loom))]
        self.inner.defer(f);
        #[cfg(loom)]
        self.domain.defer(Box::new(f));
    }

    /// Pushes this thread's deferred work towards running (a pool-exhaustion wait).
    pub fn flush(&self) {
        #[cfg(not(loom))]
        self.inner.flush();
    }

    /// Unpins and pins again, letting the epoch advance past this thread.
    pub fn repin(&mut self) {
        #[cfg(not(loom))]
        self.inner.repin();
        #[cfg(loom)]
        {
            self.domain.unpin();
            self.domain.pin();
        }
    }
}

#[cfg(loom)]
impl Drop for Guard {
    fn drop(&mut self) {
        self.domain.unpin();
    }
}

#[cfg(loom)]
mod loom_domain {
    use loom::sync::Mutex;

    type Deferred = Box<dyn FnOnce() + Send>;

    #[derive(Default)]
    pub(crate) struct Domain {
        state: Mutex<(usize, Vec<Deferred>)>,
    }

    impl Domain {
        pub(crate) fn pin(&self) {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state.0 += 1;
        }

        pub(crate) fn unpin(&self) {
            let run = {
                let mut state = self
                    .state
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                state.0 -= 1;
                if state.0 == 0 {
                    std::mem::take(&mut state.1)
                } else {
                    Vec::new()
                }
            };
            for f in run {
                f();
            }
        }

        pub(crate) fn defer(&self, f: Deferred) {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state.1.push(f);
        }
    }
}
