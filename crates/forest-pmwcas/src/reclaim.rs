//! Epoch protection for descriptors and for memory freed by policy (BzTree §2.2, §2.3
//! "Memory management"): a thread pins before it reads a target word and stays pinned while
//! it may touch a descriptor it found there; a finished descriptor is released (its policies
//! applied, then back to its free list) only after every thread pinned at its retirement has
//! unpinned.
//!
//! Normal builds give each pool its own crossbeam-epoch `Collector` (not the global one): a
//! pool's deferred releases (which write its region: free lists, chunk headers, statuses) run
//! only on threads that pin this pool, and its epoch waits only for them. With the global
//! collector any thread of the process that pinned for anything ran them, and any thread
//! pinned anywhere held them back: a test copying a quiescent tree's region (a kill image)
//! raced a release run by another test's thread and got a torn image, and a count of memory
//! in use depended on the other tests (issue 16, the `left_repeat` and `rev_bzperf` flakes).
//! Each thread keeps its handles to the last [`HANDLES_CACHED`] pools it pinned in a
//! thread-local list (most recent first); an evicted handle unregisters its thread, and a
//! collector outlives its pool until the last handle to it is gone.
//!
//! crossbeam-epoch is not loom-aware, so
//! under `--cfg loom` a stand-in with the same contract runs instead, and under `--cfg shuttle`
//! too (crossbeam-epoch keys its participants by OS thread and shuttle runs every thread on
//! one, and its global collector would run one execution's releases in a later one). The
//! stand-in, under one mutex of the model checker's: a clock; each guard takes a stamp from it
//! when it pins, each retirement one when it is deferred; a retirement runs at the unpin that
//! leaves no guard with a stamp below its own. Guards stamped below a retirement are exactly
//! those pinned at it, so this is the epoch guarantee the protocol relies on (`execute.rs`,
//! "Reuse"). (An earlier stand-in ran retirements only when no guard at all was pinned; under
//! shuttle's PCT scheduler four threads that kept overlapping pins never let that happen and
//! exhausted a small pool for good, where a real epoch advances.)

/// A pinned thread's protection; deferred work runs after every guard pinned before it drops.
pub struct Guard {
    #[cfg(not(any(loom, shuttle)))]
    inner: crossbeam_epoch::Guard,
    #[cfg(any(loom, shuttle))]
    domain: std::sync::Arc<model_domain::Domain>,
    #[cfg(any(loom, shuttle))]
    stamp: u64,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

/// Handles to the collectors of the pools a thread pinned last (module doc).
#[cfg(not(any(loom, shuttle)))]
pub const HANDLES_CACHED: usize = 8;

/// The reclamation domain of one pool.
pub(crate) struct Domain {
    #[cfg(not(any(loom, shuttle)))]
    collector: crossbeam_epoch::Collector,
    /// Unique per domain in the process (never reused): the key of the thread-local handles.
    #[cfg(not(any(loom, shuttle)))]
    id: u64,
    #[cfg(any(loom, shuttle))]
    inner: std::sync::Arc<model_domain::Domain>,
}

impl Default for Domain {
    fn default() -> Self {
        #[cfg(not(any(loom, shuttle)))]
        {
            static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            Self {
                collector: crossbeam_epoch::Collector::new(),
                id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            }
        }
        #[cfg(any(loom, shuttle))]
        {
            Self {
                inner: std::sync::Arc::default(),
            }
        }
    }
}

#[cfg(not(any(loom, shuttle)))]
thread_local! {
    /// This thread's handles (domain id, handle), most recently pinned first.
    static HANDLES: std::cell::RefCell<Vec<(u64, crossbeam_epoch::LocalHandle)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Domain {
    /// Pins the calling thread.
    #[inline]
    pub(crate) fn pin(&self) -> Guard {
        #[cfg(not(any(loom, shuttle)))]
        {
            let cached = HANDLES.try_with(|handles| {
                // A pin may run deferred work that pins again (a release): that nested pin
                // finds the list borrowed and takes a handle of its own.
                let mut handles = handles.try_borrow_mut().ok()?;
                if let Some((id, h)) = handles.first() {
                    if *id == self.id {
                        return Some((h.pin(), None));
                    }
                }
                let evicted = match handles.iter().position(|(id, _)| *id == self.id) {
                    Some(i) => {
                        handles.swap(0, i);
                        None
                    }
                    None => {
                        let evicted = (handles.len() >= HANDLES_CACHED)
                            .then(|| handles.pop())
                            .flatten();
                        handles.insert(0, (self.id, self.collector.register()));
                        evicted
                    }
                };
                Some((handles[0].1.pin(), evicted))
            });
            let inner = match cached {
                // Dropped outside the borrow: unregistering may run deferred work.
                Ok(Some((guard, evicted))) => {
                    drop(evicted);
                    guard
                }
                // Nested, or the thread's locals are being destroyed: a handle for this pin
                // only (the guard keeps its participant registered until it drops).
                _ => self.collector.register().pin(),
            };
            Guard { inner }
        }
        #[cfg(any(loom, shuttle))]
        {
            Guard {
                stamp: self.inner.pin(),
                domain: std::sync::Arc::clone(&self.inner),
            }
        }
    }
}

impl Guard {
    /// Runs `f` once no thread pinned now is still pinned.
    pub(crate) fn defer(&self, f: impl FnOnce() + Send + 'static) {
        #[cfg(not(any(loom, shuttle)))]
        self.inner.defer(f);
        #[cfg(any(loom, shuttle))]
        self.domain.defer(Box::new(f));
    }

    /// Pushes this thread's deferred work towards running (a pool-exhaustion wait).
    pub fn flush(&self) {
        #[cfg(not(any(loom, shuttle)))]
        self.inner.flush();
    }

    /// Unpins and pins again, letting the epoch advance past this thread.
    pub fn repin(&mut self) {
        #[cfg(not(any(loom, shuttle)))]
        self.inner.repin();
        #[cfg(any(loom, shuttle))]
        {
            self.domain.unpin(self.stamp);
            self.stamp = self.domain.pin();
        }
    }
}

#[cfg(any(loom, shuttle))]
impl Drop for Guard {
    fn drop(&mut self) {
        self.domain.unpin(self.stamp);
    }
}

#[cfg(any(loom, shuttle))]
mod model_domain {
    use std::collections::BTreeSet;

    use crate::sync::Mutex;

    type Deferred = Box<dyn FnOnce() + Send>;

    #[derive(Default)]
    struct State {
        clock: u64,
        /// Stamps of the guards pinned now.
        pinned: BTreeSet<u64>,
        /// Deferred work with the stamp it was retired at.
        retired: Vec<(u64, Deferred)>,
    }

    #[derive(Default)]
    pub(crate) struct Domain {
        state: Mutex<State>,
    }

    impl Domain {
        fn state(&self) -> impl std::ops::DerefMut<Target = State> + '_ {
            self.state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        /// Pins a guard; returns its stamp.
        pub(crate) fn pin(&self) -> u64 {
            let mut state = self.state();
            state.clock += 1;
            let stamp = state.clock;
            state.pinned.insert(stamp);
            stamp
        }

        /// Unpins the guard stamped `stamp`, then runs the retirements that no guard still
        /// pinned predates (outside the lock: they may pin and retire themselves).
        pub(crate) fn unpin(&self, stamp: u64) {
            let run: Vec<Deferred> = {
                let mut state = self.state();
                state.pinned.remove(&stamp);
                let oldest = state.pinned.first().copied().unwrap_or(u64::MAX);
                let (run, keep) = std::mem::take(&mut state.retired)
                    .into_iter()
                    .partition(|&(retired, _)| retired < oldest);
                state.retired = keep;
                run.into_iter().map(|(_, f)| f).collect()
            };
            for f in run {
                f();
            }
        }

        pub(crate) fn defer(&self, f: Deferred) {
            let mut state = self.state();
            state.clock += 1;
            let stamp = state.clock;
            state.retired.push((stamp, f));
        }
    }
}
