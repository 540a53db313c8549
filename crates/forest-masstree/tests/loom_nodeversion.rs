//! Loom model of the version-word protocol (§4.4–4.6): an optimistic reader against an insert
//! and against a split. Run: `RUSTFLAGS="--cfg loom" cargo test -p forest-masstree --test
//! loom_nodeversion --release`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use forest_masstree::nodeversion::{NodeVersion, ISBORDER, VSPLIT_MASK};

/// A node whose two data words must be read as a pair (a key and its value).
struct Node {
    version: NodeVersion,
    a: AtomicU64,
    b: AtomicU64,
}

fn node() -> Arc<Node> {
    Arc::new(Node {
        version: NodeVersion::new(ISBORDER),
        a: AtomicU64::new(0),
        b: AtomicU64::new(0),
    })
}

/// Fig. 7's read loop: snapshot, read, validate, retry. Returns the pair and whether the
/// reader saw a split when a validation failed.
fn optimistic_read(n: &Node) -> ((u64, u64), bool) {
    let mut saw_split = false;
    let mut v = n.version.stable();
    loop {
        let pair = (n.a.load(Ordering::Relaxed), n.b.load(Ordering::Relaxed));
        if !n.version.has_changed(v) {
            return (pair, saw_split);
        }
        let v2 = n.version.stable();
        saw_split |= (v2 ^ v) & VSPLIT_MASK != 0;
        v = v2;
    }
}

#[test]
fn reader_never_sees_a_half_done_insert() {
    // Goal: a validated read sees the insert's writes all or none. Method: the writer marks
    // inserting and writes both words; every interleaving's validated pair must be equal.
    loom::model(|| {
        let n = node();
        let w = {
            let n = Arc::clone(&n);
            thread::spawn(move || {
                n.version.lock();
                n.version.mark_insert();
                n.a.store(1, Ordering::Relaxed);
                n.b.store(1, Ordering::Relaxed);
                n.version.unlock();
            })
        };
        let ((a, b), saw_split) = optimistic_read(&n);
        assert_eq!(a, b);
        assert!(!saw_split, "an insert must not look like a split");
        w.join().expect("writer");
    });
}

#[test]
fn reader_detects_a_split() {
    // Goal: a reader overlapping a split either reads the old state consistently or learns
    // that a split happened (so it would retry from the root, Fig. 6). Method: the split moves
    // the pair to new values; a validated torn pair is never accepted, and a reader that had
    // to retry after the split started sees vsplit changed.
    loom::model(|| {
        let n = node();
        let w = {
            let n = Arc::clone(&n);
            thread::spawn(move || {
                n.version.lock();
                n.version.mark_split();
                n.a.store(2, Ordering::Relaxed);
                n.b.store(2, Ordering::Relaxed);
                n.version.unlock();
            })
        };
        let ((a, b), saw_split) = optimistic_read(&n);
        assert_eq!(a, b);
        if saw_split {
            assert_eq!(a, 2, "after a detected split the reader sees the new state");
        }
        w.join().expect("writer");
        assert_ne!(n.version.stable() & VSPLIT_MASK, 0);
    });
}
