//! Loom models of the LSS flush buffer's state word (`lss::buffer::SlotWord`): reservation,
//! seal and release racing, and the hand-off of a sealed buffer to its writer.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p forest-llama
//! --release --test loom_lss_buffer`.
//!
//! The buffer's bytes are loom cells: each reserving thread writes its range with `with_mut`,
//! the thread that hands the sealed buffer off reads every byte with `with`. Loom fails the
//! model if a read is not ordered after a write (the hand-off came before a writer's
//! release) or two writes touch one byte unordered (overlapping reservations).
#![cfg(loom)]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::atomic::Ordering;
use std::sync::Arc;

use forest_core::sync::cell::UnsafeCell;
use forest_llama::lss::buffer::{Reserve, SlotWord};
use loom::sync::atomic::{AtomicU32, AtomicUsize};

/// `sealed_at` before any seal.
const UNSEALED: u32 = u32::MAX;

/// A buffer of loom cells and what the model observed.
struct Model {
    word: SlotWord,
    bytes: Vec<UnsafeCell<u8>>,
    capacity: u32,
    hand_offs: AtomicUsize,
    /// The final offset the seal froze ([`UNSEALED`] before).
    sealed_at: AtomicU32,
}

impl Model {
    fn new(capacity: u32) -> Arc<Self> {
        let word = SlotWord::new_sealed();
        word.open(1, 0, 0);
        Arc::new(Self {
            word,
            bytes: (0..capacity).map(|_| UnsafeCell::new(0)).collect(),
            capacity,
            hand_offs: AtomicUsize::new(0),
            sealed_at: AtomicU32::new(UNSEALED),
        })
    }

    /// The writer's side of a hand-off: every byte below the frozen offset is written.
    fn hand_off(&self) {
        self.hand_offs.fetch_add(1, Ordering::Relaxed);
        let (offset, sealed, _) = self.word.peek();
        assert!(sealed);
        for cell in &self.bytes[..offset as usize] {
            // SAFETY: loom checks this read against the writers' writes.
            let byte = cell.with(|p| unsafe { *p });
            assert_ne!(
                byte, 0,
                "a reserved byte was not written before the hand-off"
            );
        }
    }

    /// Records the seal's frozen offset and hands off if no writer was active.
    fn sealed(&self, sealing: forest_llama::lss::buffer::Sealing) {
        self.sealed_at.store(sealing.offset, Ordering::Relaxed);
        if sealing.hand_off {
            self.hand_off();
        }
    }

    /// A poster: reserve `len` bytes, write them with `mark`, release; seal if they do not
    /// fit. Returns the reserved (offset, len), if any.
    fn post(&self, len: u32, mark: u8) -> Option<(u32, u32)> {
        match self.word.try_reserve(len, || self.capacity) {
            Reserve::Reserved { offset } => {
                for cell in &self.bytes[offset as usize..(offset + len) as usize] {
                    // SAFETY: loom checks that no other access to this byte is unordered.
                    cell.with_mut(|p| unsafe { *p = mark });
                }
                if self.word.release() {
                    self.hand_off();
                }
                Some((offset, len))
            }
            Reserve::DoesNotFit { .. } => {
                if let Some(sealing) = self.word.seal() {
                    self.sealed(sealing);
                }
                None
            }
            Reserve::Sealed => None,
        }
    }

    /// Checks the outcome: one seal, one hand-off, `reserved` contiguous from 0 to the seal.
    fn check(&self, mut reserved: Vec<(u32, u32)>) {
        let sealed_at = self.sealed_at.load(Ordering::Relaxed);
        assert_ne!(sealed_at, UNSEALED, "someone sealed");
        assert_eq!(
            self.hand_offs.load(Ordering::Relaxed),
            1,
            "exactly one hand-off"
        );
        reserved.sort_unstable();
        let mut end = 0;
        for (offset, len) in reserved {
            assert_eq!(offset, end, "reservations are contiguous and disjoint");
            end = offset + len;
        }
        assert_eq!(
            end, sealed_at,
            "the seal froze the offset after the last reservation"
        );
        assert!(end <= self.capacity);
    }
}

// Goal: two posters that each reserve twice into a buffer too small for all four: the ranges
// are disjoint and contiguous, one thread seals, exactly one thread hands the buffer off, and
// only after every reserved byte was written. Method: loom over all interleavings.
#[test]
fn two_posters_reserve_seal_and_hand_off_once() {
    loom::model(|| {
        let model = Model::new(6);
        let threads: Vec<_> = (1..=2u8)
            .map(|mark| {
                let model = Arc::clone(&model);
                loom::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..2 {
                        match model.post(2, mark) {
                            Some(range) => mine.push(range),
                            None => break,
                        }
                    }
                    mine
                })
            })
            .collect();
        let reserved: Vec<(u32, u32)> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        // Four posts of 2 into 6 bytes: the fourth does not fit and seals.
        assert_eq!(reserved.len(), 3);
        model.check(reserved);
    });
}

// Goal: three posters race one buffer that fits two of them: the third seals, the last
// writer (or the sealer, if it came last) hands off once. Method: loom, three threads of one
// post each.
#[test]
fn three_posters_race_the_seal() {
    loom::model(|| {
        let model = Model::new(4);
        let threads: Vec<_> = (1..=3u8)
            .map(|mark| {
                let model = Arc::clone(&model);
                loom::thread::spawn(move || model.post(2, mark))
            })
            .collect();
        let reserved: Vec<(u32, u32)> = threads
            .into_iter()
            .filter_map(|t| t.join().unwrap())
            .collect();
        assert_eq!(reserved.len(), 2, "two of three fit");
        model.check(reserved);
    });
}

// Goal: Mk-Stable's seal of a buffer with an active writer: the seal does not hand off, the
// writer's release does, after its bytes are written. Method: one thread reserves and
// writes, the other seals, loom over the interleavings.
#[test]
fn seal_racing_an_active_writer() {
    loom::model(|| {
        let model = Model::new(8);
        let writer = {
            let model = Arc::clone(&model);
            loom::thread::spawn(move || model.post(3, 1))
        };
        let sealer = {
            let model = Arc::clone(&model);
            loom::thread::spawn(move || model.sealed(model.word.seal().unwrap()))
        };
        let reserved: Vec<(u32, u32)> = writer.join().unwrap().into_iter().collect();
        sealer.join().unwrap();
        model.check(reserved);
    });
}
