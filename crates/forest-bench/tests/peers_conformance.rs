//! The shared conformance kit against every peer adapter, byte-key variants (the `u64`
//! variants take only 8-byte keys, so the kit's arbitrary keys do not apply; their own test
//! is at the end). Goal: peers obey the same `Index` contract as engines, so the benchmark
//! compares like with like.

use forest_bench::peers::{BTreeMapRwLock, HashMapPeer, SccTree, SkipList};

forest_core::conformance_tests!(
    skiplist,
    || SkipList::<Box<[u8]>>::new(),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    scc_tree,
    || SccTree::<Box<[u8]>>::new(),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    btreemap_rwlock,
    || BTreeMapRwLock::<Box<[u8]>>::new(),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    hashmap,
    || HashMapPeer::<Box<[u8]>>::new(),
    sizes = forest_core::conformance::Sizes::for_variant()
);

/// `masstree-rs`: every kit check but `edge_size_limits`, since the crate stores keys of at
/// most 256 bytes (its documented limit) and the kit round-trips 16 KiB keys; the adapter's
/// own limit test replaces it. The random model and stress checks are left out too:
/// masstree 0.9.5 loses keys on some sequences of short binary keys
/// (`known_defect_loses_a_key` replays one) and under concurrent disjoint writes (a remove of
/// a present key returned false, seed 17365114009145080678), so they fail on random seeds.
/// The peer is a benchmark reference, not part of forest; docs/BENCHMARKS.md notes it.
mod masstree_rs {
    use std::sync::Arc;

    use forest_bench::peers::MasstreeRs;
    use forest_core::conformance::{edge, order, scan, share, Sizes};
    use forest_core::{Error, Index};

    fn shared() -> impl Fn() -> Arc<dyn Index> {
        share(MasstreeRs::new)
    }

    macro_rules! checks {
        ($($module:ident :: $check:ident),* $(,)?) => {
            $(
                #[test]
                fn $check() {
                    $module::$check(&shared(), &Sizes::for_variant());
                }
            )*
        };
    }

    checks!(
        edge::edge_binary_keys,
        edge::edge_get_replaces_out,
        order::order_ascending,
        order::order_descending,
        order::order_random,
        scan::scan_bounds,
        scan::scan_crossing_and_equal_bounds,
        scan::scan_early_stop,
        scan::scan_visitor_reenters,
    );

    #[test]
    fn known_defect_loses_a_key() {
        // Goal: keep the reason the model checks are off visible, and notice when a new
        // masstree release fixes it. Method: replay the minimal sequence the kit found
        // (seed 9374882336951736313) and check what masstree 0.9.5 answers for b"\x01".
        let keys: [&[u8]; 16] = [
            b"b\x00",
            b"aa",
            b"\x01b",
            b"ab",
            b"\x01\x00",
            b"a",
            b"b",
            b"b\x01",
            b"\x01\x01",
            b"a\x00",
            b"\x01",
            b"\x01\x00\x00",
            b"\xff",
            b"\x01a",
            b"ba",
            b"",
        ];
        let index = MasstreeRs::new();
        for (i, k) in keys.iter().enumerate() {
            if matches!(i, 1 | 2 | 8 | 11 | 12 | 14) {
                index.upsert(k, b"").expect("upsert");
            } else {
                assert!(index.insert(k, b"").expect("insert"), "insert {k:?}");
            }
        }
        let mut out = Vec::new();
        assert!(
            !index.get(b"\x01", &mut out),
            "masstree-rs now keeps b\"\\x01\": put the model checks back"
        );
    }

    #[test]
    fn key_limit_is_an_error_not_a_panic() {
        // Goal: keys over the crate's 256 bytes are refused cleanly and change nothing;
        // 256-byte keys and the kit's largest values work. Method: write, read, scan past it.
        let index = MasstreeRs::new();
        let long = vec![b'k'; 257];
        assert!(matches!(
            index.insert(&long, b"v"),
            Err(Error::KeyTooLong { len: 257, max: 256 })
        ));
        assert!(index.upsert(&long, b"v").is_err());
        assert!(index.update(&long, b"v").is_err());
        let mut out = Vec::new();
        assert!(!index.get(&long, &mut out));
        assert!(!index.remove(&long));
        let max = vec![b'k'; 256];
        let big = vec![7u8; forest_core::VALUE_BYTES_MAX];
        assert!(index.insert(&max, &big).expect("256-byte key"));
        assert!(index.get(&max, &mut out));
        assert_eq!(out, big);
        // A bound longer than any storable key still bounds correctly.
        let mut seen = Vec::new();
        index.scan(
            std::ops::Bound::Included(&long[..]),
            std::ops::Bound::Unbounded,
            forest_core::Order::Ascending,
            &mut |k, _| {
                seen.push(k.to_vec());
                std::ops::ControlFlow::Continue(())
            },
        );
        assert!(seen.is_empty(), "k^256 < k^257");
        assert_eq!(index.stats().key_count, 1);
    }
}

/// The `u64` key variants: keys round-trip and scans come in numeric order.
mod u64_keys {
    use std::ops::{Bound, ControlFlow};

    use forest_bench::peers;
    use forest_core::Order;

    #[test]
    fn u64_variants_round_trip_keys_in_numeric_order() {
        // Goal: peers on u64 keys store 8-byte big-endian keys faithfully and scan them in
        // numeric order both ways; other key lengths are refused. Method: insert shuffled
        // values spanning the byte boundaries, read back, scan, and try a 9-byte key.
        let values: Vec<u64> = vec![
            0,
            1,
            255,
            256,
            65_535,
            65_536,
            1 << 32,
            u64::MAX - 1,
            u64::MAX,
            7,
        ];
        for name in ["skiplist", "scc-tree", "btreemap-rwlock", "hashmap"] {
            let index = peers::build_with_key::<u64>(name).expect("peer");
            for v in &values {
                assert!(
                    index
                        .insert(&v.to_be_bytes(), &v.to_le_bytes())
                        .expect("8 bytes"),
                    "{name}"
                );
            }
            let mut out = Vec::new();
            for v in &values {
                assert!(index.get(&v.to_be_bytes(), &mut out), "{name} {v}");
                assert_eq!(out, v.to_le_bytes());
            }
            let mut sorted = values.clone();
            sorted.sort_unstable();
            for order in [Order::Ascending, Order::Descending] {
                let mut seen = Vec::new();
                index.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, _| {
                    seen.push(u64::from_be_bytes(k.try_into().expect("8-byte key")));
                    ControlFlow::Continue(())
                });
                let mut expected = sorted.clone();
                if order == Order::Descending {
                    expected.reverse();
                }
                assert_eq!(seen, expected, "{name} {order:?}");
            }
            // A short lower bound: keys >= [0x00, 0x01] are those >= 0x0001_0000_0000_0000.
            let mut seen = 0;
            index.scan(
                Bound::Included(&[0, 1][..]),
                Bound::Unbounded,
                Order::Ascending,
                &mut |_, _| {
                    seen += 1;
                    ControlFlow::Continue(())
                },
            );
            assert_eq!(seen, 2, "{name}: only u64::MAX - 1 and u64::MAX");
            assert!(index.insert(&[1; 9], b"v").is_err(), "{name}");
            assert!(!index.get(&[1; 9], &mut out));
            assert_eq!(index.stats().key_count, values.len() as u64);
        }
    }
}
