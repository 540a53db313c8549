//! Puts that follow a layer link without the lock (§4.6.1, issue 14's YCSB-A): a writer locks
//! only the border node holding its key's slot, and descends through upper layers as a get
//! does. These tests stop a put between reading a layer's link and descending into the layer
//! while the layer is emptied and removed (§4.6.5) or its root splits (§4.6.4), and race
//! writers on keys sharing a few slices against layer removals, checking that no put is lost.
//!
//! `cargo test -p forest-masstree --features pause-points --test it -- put_layers::` (the
//! stress test runs without the feature too).

use std::sync::Arc;
use std::thread;

use forest_core::Index;
use forest_masstree::Masstree;

#[cfg(feature = "pause-points")]
pub(crate) mod paused {
    use std::sync::Arc;

    use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
    use forest_core::Index;
    use forest_masstree::Masstree;

    /// A tree holding `keys`, each with itself as its value.
    pub(crate) fn tree_with(keys: &[&[u8]]) -> Arc<Masstree> {
        let t = Arc::new(Masstree::new());
        for k in keys {
            assert!(t.insert(k, k).expect("within limits"));
        }
        t
    }

    /// `n` keys of the slice `abcdefgh`, numbered with `width` digits.
    pub(crate) fn slice_keys(n: u32, width: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("abcdefgh{i:0width$}").into_bytes())
            .collect()
    }

    /// Asserts that `k` holds `want`.
    pub(crate) fn has(t: &Masstree, k: &[u8], want: &[u8]) {
        let mut buf = Vec::new();
        assert!(t.get(k, &mut buf), "{:?} lost", String::from_utf8_lossy(k));
        assert_eq!(buf, want, "{:?}", String::from_utf8_lossy(k));
    }

    /// Puts `key` from the pauser, stops it once it has read the link of the layer below,
    /// runs `meanwhile` on the tree, lets the put go on and returns how often the pauser
    /// reached the pause point.
    pub(crate) fn put_paused(
        t: &Arc<Masstree>,
        key: &'static [u8],
        meanwhile: impl FnOnce(&Masstree),
    ) -> usize {
        let _turn = take_turn();
        let gate = arm("put:layer-link-read");
        let writer = {
            let t = Arc::clone(t);
            spawn_pauser(move || t.upsert(key, b"new").expect("within limits"))
        };
        gate.wait_paused();
        meanwhile(t);
        gate.release();
        writer.join().expect("writer");
        disarm();
        gate.reached_count()
    }

    #[test]
    fn put_lands_when_its_layer_is_removed_meanwhile() {
        // Goal: a put holding a validated link to a layer that is then emptied and removed
        // starts over and writes its key where it now belongs (layer 0). Method: two keys
        // sharing a slice make a layer; the pauser upserts a third with that slice and stops
        // after reading the link; both keys are removed (the layer goes); then the put goes on.
        let t = tree_with(&[b"abcdefgh-1", b"abcdefgh-2", b"zz"]);
        let reached = put_paused(&t, b"abcdefgh-3", |t| {
            assert!(t.remove(b"abcdefgh-1"));
            assert!(t.remove(b"abcdefgh-2"));
            assert!(t.stats().counter("layer_removals").expect("kept") >= 1);
        });
        assert_eq!(
            reached, 1,
            "the link of a removed layer is not followed again"
        );
        let mut buf = Vec::new();
        assert!(t.get(b"abcdefgh-3", &mut buf), "the put was lost");
        assert_eq!(buf, b"new");
        assert!(!t.get(b"abcdefgh-1", &mut buf));
        assert!(t.get(b"zz", &mut buf));
        assert_eq!(t.stats().key_count, 2);
    }

    #[test]
    fn put_lands_when_its_layer_root_splits_meanwhile() {
        // Goal: a put holding the link of a layer whose root then splits (the link now names
        // a non-root border node) climbs to the layer's new root and writes its key once.
        // Method: the pauser upserts into a two-key layer; 60 keys are inserted into that
        // layer meanwhile (several splits); then every key is read back.
        let t = tree_with(&[b"abcdefgh-1", b"abcdefgh-2"]);
        let more = slice_keys(60, 3);
        let added = more.clone();
        put_paused(&t, b"abcdefgh-0", move |t| {
            for k in &added {
                assert!(t.insert(k, k).expect("within limits"));
            }
            assert!(t.stats().counter("splits").expect("kept") >= 1);
        });
        let mut buf = Vec::new();
        assert!(t.get(b"abcdefgh-0", &mut buf), "the put was lost");
        assert_eq!(buf, b"new");
        for k in &more {
            assert!(t.get(k, &mut buf));
            assert_eq!(&buf, k);
        }
        assert_eq!(t.stats().key_count, 63);
    }
}

#[test]
fn puts_in_layers_race_layer_removals() {
    // Goal: no put is lost or misplaced while layers are made and removed under it. Method:
    // four threads each own a set of keys spread over 8 shared 8-byte slices (so each slice's
    // keys form a layer that all threads write into); each thread upserts, reads back and
    // removes its keys in rounds, so layers are emptied, removed and made again while the
    // other threads descend through their links without the lock. Every read after a put
    // must return that put's value; at the end, each thread's last round is present.
    const THREADS: u32 = 4;
    const ROUNDS: u32 = 300;
    let t = Arc::new(Masstree::new());
    let handles: Vec<_> = (0..THREADS)
        .map(|w| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let keys: Vec<Vec<u8>> = (0..16u32)
                    .map(|i| format!("slice-{:02}w{w}k{i:02}", i % 8).into_bytes())
                    .collect();
                let mut buf = Vec::new();
                for round in 0..ROUNDS {
                    let value = format!("w{w}r{round}").into_bytes();
                    for k in &keys {
                        t.upsert(k, &value).expect("within limits");
                    }
                    for k in &keys {
                        assert!(t.get(k, &mut buf), "lost {k:?} in round {round}");
                        assert_eq!(buf, value, "stale value of {k:?}");
                    }
                    if round + 1 < ROUNDS {
                        for k in &keys {
                            assert!(t.remove(k), "{k:?} vanished before its remove");
                        }
                    }
                }
                keys
            })
        })
        .collect();
    let mut buf = Vec::new();
    for (w, h) in handles.into_iter().enumerate() {
        for k in h.join().expect("writer") {
            assert!(t.get(&k, &mut buf));
            assert_eq!(buf, format!("w{w}r{}", ROUNDS - 1).into_bytes());
        }
    }
    assert_eq!(t.stats().key_count, u64::from(THREADS) * 16);
    assert!(t.stats().counter("layer_removals").expect("kept") >= 1);
}
