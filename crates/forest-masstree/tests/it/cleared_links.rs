//! Review 13b: readers that meet a link the issue-13 fix (F4) clears. A split clears the layer
//! links of the slots it moves to the new sibling, and a layer removal clears its slot's link,
//! so an optimistic reader that matched such a slot before the change loads null where it
//! used to load the (still live, or retired) node. It must retry on its failed validation and
//! answer right: never "absent" for a present key, never a panic, never a hang.
//!
//! Run with `cargo test -p forest-masstree --features pause-points --test it -- cleared_links::`.
#![cfg(feature = "pause-points")]

use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
use forest_core::{Index, Order};
use forest_masstree::{Masstree, MasstreeConfig};

/// A 12-byte key whose first slice is `i` repeated, so that keys with the same `i` and
/// different `tail`s share a layer slot (§4.6.3).
fn layered(i: u8, tail: u8) -> Vec<u8> {
    let mut k = vec![i; 8];
    k.extend_from_slice(&[tail; 4]);
    k
}

/// A tree whose root border node is full (15 slots) of layer slots `0..15`, two keys in each
/// layer (value = key).
fn full_of_layers(permuter: bool) -> (Arc<Masstree>, Vec<Vec<u8>>) {
    let t = Arc::new(Masstree::with_config(MasstreeConfig {
        permuter,
        ..MasstreeConfig::default()
    }));
    let mut keys = Vec::new();
    for i in 0..15 {
        for tail in [1, 2] {
            let k = layered(i, tail);
            assert!(t.insert(&k, &k).expect("within limits"));
            keys.push(k);
        }
    }
    assert_eq!(
        t.stats().leaf_node_count,
        1 + 15,
        "one root border node and 15 layers"
    );
    (t, keys)
}

#[test]
fn get_stalled_on_a_layer_slot_that_a_split_moves_finds_its_key() {
    // Goal: a get that matched a layer slot and stalled before loading its link, while a
    // split moves the slot to a new sibling (clearing the link left behind, `move_slot`),
    // finds its key in the layer. Method: for both slot disciplines, the root border node
    // holds 15 layer slots; the pauser gets a key of the last one and stops at the matched
    // slot; a key inserted mid-node splits it, moving the upper half right.
    for permuter in [true, false] {
        let _turn = take_turn();
        let (t, _) = full_of_layers(permuter);
        let wanted = layered(14, 2);
        let gate = arm("get:slot-matched");
        let reader = {
            let (t, k) = (Arc::clone(&t), wanted.clone());
            spawn_pauser(move || {
                let mut buf = Vec::new();
                t.get(&k, &mut buf).then_some(buf)
            })
        };
        gate.wait_paused();
        let splits = t.stats().counters_named("splits");
        let middle = [6u8, 0xff];
        assert!(t.insert(&middle, &middle).expect("within limits"));
        assert!(
            t.stats().counters_named("splits") > splits,
            "the insert split"
        );
        gate.release();
        let got = reader.join().expect("reader");
        disarm();
        assert_eq!(
            got.as_deref(),
            Some(&wanted[..]),
            "permuter {permuter}: get of a present key"
        );
    }
}

#[test]
fn get_stalled_on_a_layer_slot_whose_layer_is_removed_answers_absent_or_a_value() {
    // Goal: a get stalled on a layer slot while the layer empties and goes (its slot's link
    // cleared, `remove_at`; the layer's node retired), then the key comes back in a new
    // layer, returns the old value, the new one or absent, each a state it overlapped, and
    // does not panic or hang. Method: both slot disciplines; the pauser gets a layered key
    // and stops at the matched slot; both keys of its layer are removed and one re-inserted.
    for permuter in [true, false] {
        let _turn = take_turn();
        let (t, _) = full_of_layers(permuter);
        let (a, b) = (layered(9, 1), layered(9, 2));
        let gate = arm("get:slot-matched");
        let reader = {
            let (t, a) = (Arc::clone(&t), a.clone());
            spawn_pauser(move || {
                let mut buf = Vec::new();
                t.get(&a, &mut buf).then_some(buf)
            })
        };
        gate.wait_paused();
        let removals = t.stats().counters_named("layer_removals");
        assert!(t.remove(&a) && t.remove(&b));
        assert!(
            t.stats().counters_named("layer_removals") > removals,
            "the layer went"
        );
        t.upsert(&a, b"new").expect("within limits");
        gate.release();
        let got = reader.join().expect("reader");
        disarm();
        assert!(
            matches!(got.as_deref(), None | Some(b"new")) || got.as_deref() == Some(&a[..]),
            "permuter {permuter}: get returned {got:?}"
        );
    }
}

#[test]
fn scan_stalled_mid_copy_of_a_node_whose_layer_slots_a_split_moves_sees_every_key() {
    // Goal: a scan stalled while copying a node (its permutation read, at its first layer
    // slot), while a split moves the later layer slots right and clears their links, hands
    // out every key once, in order: the cleared links it then loads make it re-read. Method:
    // both orders and slot disciplines; the pauser scans the whole tree and stops at its
    // first layer slot; a key inserted mid-node splits the root border node.
    for permuter in [true, false] {
        for order in [Order::Ascending, Order::Descending] {
            let _turn = take_turn();
            let (t, mut keys) = full_of_layers(permuter);
            let gate = arm("scan:layer-slot-read");
            let reader = {
                let t = Arc::clone(&t);
                spawn_pauser(move || {
                    let mut got = Vec::new();
                    t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
                        assert_eq!(k, v);
                        got.push(k.to_vec());
                        ControlFlow::Continue(())
                    });
                    got
                })
            };
            gate.wait_paused();
            let middle = vec![6u8, 0xff];
            assert!(t.insert(&middle, &middle).expect("within limits"));
            gate.release();
            let mut got = reader.join().expect("reader");
            disarm();
            if order == Order::Descending {
                got.reverse();
            }
            // The new key may or may not be seen; every old key is, once, in order.
            got.retain(|k| *k != middle);
            keys.sort();
            assert_eq!(got, keys, "permuter {permuter}, {order:?}");
        }
    }
}

/// Reads a named counter of `stats()`.
trait CounterNamed {
    fn counters_named(&self, name: &str) -> u64;
}

impl CounterNamed for forest_core::IndexStats {
    fn counters_named(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no counter {name}"))
    }
}
