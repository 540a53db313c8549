//! The paper's hard cases (§4.1, §4.2, §4.6.3, §4.6.4): shared prefixes of 8, 16 and 64 bytes,
//! keys that differ only in length or trailing zeros, and gets that run during splits and
//! layer creation; each on the default tree and on the §6.2 factor-analysis variants
//! (`hard_cases!` below), plus readers racing the in-place shifts of a tree without the
//! permuter.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use forest_core::{Index, Order};
use forest_masstree::{Masstree, Masstree10x8, Masstree15x32, MasstreeConfig, SuffixStorage};

/// Runs each hard case below on the trees `$make` builds.
macro_rules! hard_cases {
    ($name:ident, $make:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn shared_prefixes_of_8_16_and_64_bytes() {
                // Goal and method: see the helper of the same name.
                super::shared_prefixes_of_8_16_and_64_bytes(&$make());
            }

            #[test]
            fn keys_differing_only_in_length_or_trailing_zeros() {
                // Goal and method: see the helper of the same name.
                super::keys_differing_only_in_length_or_trailing_zeros(&$make());
            }

            #[test]
            fn gets_during_splits_and_new_layers_never_miss() {
                // Goal and method: see the helper of the same name.
                super::gets_during_splits_and_new_layers_never_miss(Arc::new($make()));
            }

            #[test]
            fn scans_during_splits_and_new_layers_see_every_stable_key_once() {
                // Goal and method: see the helper of the same name.
                super::scans_during_splits_and_new_layers_see_every_stable_key_once(Arc::new(
                    $make(),
                ));
            }

            #[test]
            fn longest_keys_sharing_all_but_the_last_byte() {
                // Goal and method: see the helper of the same name.
                super::longest_keys_sharing_all_but_the_last_byte(&$make());
            }
        }
    };
}

fn config(f: impl FnOnce(&mut MasstreeConfig)) -> Masstree {
    let mut c = MasstreeConfig::default();
    f(&mut c);
    Masstree::with_config(c)
}

hard_cases!(default_config, Masstree::new);
hard_cases!(permuter_off, || config(|c| c.permuter = false));
hard_cases!(suffix_separate, || config(
    |c| c.suffix = SuffixStorage::Separate
));
hard_cases!(suffix_layers, || config(
    |c| c.suffix = SuffixStorage::Layers
));
hard_cases!(fanout_10x8, || Masstree10x8::with_widths(
    MasstreeConfig::default()
));
hard_cases!(fanout_15x32, || Masstree15x32::with_widths(
    MasstreeConfig::default()
));

fn scan_all(t: &dyn Index, order: Order) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        ControlFlow::Continue(())
    });
    out
}

fn check_against(t: &dyn Index, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut buf = Vec::new();
    for (k, v) in model {
        assert!(t.get(k, &mut buf), "missing {k:?}");
        assert_eq!(&buf, v, "wrong value for {k:?}");
    }
    let asc: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scan_all(t, Order::Ascending), asc);
    let desc: Vec<_> = asc.iter().rev().cloned().collect();
    assert_eq!(scan_all(t, Order::Descending), desc);
    assert_eq!(t.stats().key_count, model.len() as u64);
}

/// Goal: keys sharing 8-, 16- and 64-byte prefixes live in deeper layers and stay findable
/// and ordered. Method: insert them mixed with short keys, compare with a BTreeMap, remove
/// half, compare again.
fn shared_prefixes_of_8_16_and_64_bytes(t: &dyn Index) {
    let mut model = BTreeMap::new();
    for prefix_len in [8usize, 16, 64] {
        let prefix: Vec<u8> = (0..prefix_len).map(|i| b'a' + (i % 26) as u8).collect();
        for i in 0..300u32 {
            let mut k = prefix.clone();
            k.extend_from_slice(format!("{i:05}").as_bytes());
            let v = format!("v{prefix_len}-{i}").into_bytes();
            assert!(t.insert(&k, &v).expect("within limits"));
            model.insert(k, v);
        }
        // The prefix itself and a prefix one byte short, both stored above the new layers.
        for k in [prefix.clone(), prefix[..prefix_len - 1].to_vec()] {
            let v = b"short".to_vec();
            t.upsert(&k, &v).expect("within limits");
            model.insert(k, v);
        }
    }
    assert!(t.stats().counter("layers").expect("kept") >= 3);
    check_against(t, &model);
    let keys: Vec<_> = model.keys().cloned().collect();
    for k in keys.iter().step_by(2) {
        assert!(t.remove(k));
        model.remove(k);
    }
    check_against(t, &model);
    for k in keys.iter().step_by(2) {
        assert!(t.insert(k, b"again").expect("within limits"));
        model.insert(k.clone(), b"again".to_vec());
    }
    check_against(t, &model);
}

/// Goal: keylen tells apart keys with the same slice (§4.2). Method: "AB" followed by 0..=24
/// zero bytes, and the same after 8- and 16-byte prefixes, all distinct; values say which.
fn keys_differing_only_in_length_or_trailing_zeros(t: &dyn Index) {
    let mut model = BTreeMap::new();
    for base in [&b"AB"[..], b"01234567", b"0123456789abcdef", b""] {
        for zeros in 0..=24 {
            let mut k = base.to_vec();
            k.extend(std::iter::repeat_n(0u8, zeros));
            let v = format!("{}+{zeros}", base.len()).into_bytes();
            assert!(
                t.insert(&k, &v).expect("within limits"),
                "{k:?} seen as a duplicate"
            );
            model.insert(k, v);
        }
    }
    check_against(t, &model);
    // Updating one must not touch its neighbours in length.
    assert!(t.update(b"AB\0\0\0", b"changed").expect("within limits"));
    model.insert(b"AB\0\0\0".to_vec(), b"changed".to_vec());
    assert!(t.remove(b"01234567\0"));
    model.remove(&b"01234567\0"[..]);
    check_against(t, &model);
}

/// Goal: a get concurrent with border splits, interior splits and layer creation finds every
/// key present throughout (§4.6.4's no lost keys). Method: stable keys are inserted first;
/// writers then insert many keys between them (splits) and long keys sharing the stable
/// keys' slices (new layers); readers loop over the stable keys checking their values.
fn gets_during_splits_and_new_layers_never_miss(t: Arc<impl Index + 'static>) {
    let stable: Vec<Vec<u8>> = (0..2_000u32)
        .map(|i| format!("k{:06}-stable-{i}", i * 16).into_bytes())
        .collect();
    for k in &stable {
        t.insert(k, k).expect("within limits");
    }
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (t, done, stable) = (Arc::clone(&t), Arc::clone(&done), stable.clone());
            thread::spawn(move || {
                let mut buf = Vec::new();
                let mut rounds = 0u32;
                while !done.load(Ordering::Relaxed) || rounds == 0 {
                    for k in &stable {
                        assert!(t.get(k, &mut buf), "lost {:?}", String::from_utf8_lossy(k));
                        assert_eq!(&buf, k);
                    }
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let writers: Vec<_> = (0..2u32)
        .map(|w| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                for i in 0..60_000u32 {
                    let n = i * 2 + w;
                    // Same 8-byte slices as stable keys, other tails: new layers, then splits.
                    let k = format!("k{:06}-other-{n}", (n % 2_000) * 16).into_bytes();
                    t.upsert(&k, b"x").expect("within limits");
                    let k = format!("k{:06}", n).into_bytes();
                    t.upsert(&k, b"y").expect("within limits");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("reader") > 0);
    }
    let s = t.stats();
    assert!(s.counter("splits").expect("kept") > 0);
    assert!(s.counter("layers").expect("kept") > 0);
    assert!(s.height > 2, "height {}", s.height);
}

#[test]
fn stats_count_keys_and_nodes() {
    // Goal: stats report keys, height and nodes. Method: 10 000 sequential inserts, then
    // removes of all; key_count follows, height grows past 1.
    let t = Masstree::new();
    for i in 0..10_000u32 {
        t.insert(&i.to_be_bytes(), b"v").expect("within limits");
    }
    let s = t.stats();
    assert_eq!(s.key_count, 10_000);
    assert!(s.height >= 2);
    assert!(s.leaf_node_count >= 10_000 / 15);
    // Sequential inserts leave nodes full (§4.3), so border nodes stay few.
    assert!(
        s.leaf_node_count <= 10_000 / 14 + 1,
        "{} borders",
        s.leaf_node_count
    );
    for i in 0..10_000u32 {
        assert!(t.remove(&i.to_be_bytes()));
    }
    assert_eq!(t.stats().key_count, 0);
}

/// Goal: scans in both orders, overlapping border splits and layer creation, return every
/// stable key exactly once, in strict order. Method: stable keys with 16-byte shared
/// prefixes are inserted first; writers add keys that share their slices (new layers, then
/// splits inside layers); scanners check order and count the stable keys they pass.
fn scans_during_splits_and_new_layers_see_every_stable_key_once(t: Arc<impl Index + 'static>) {
    let stable: Vec<Vec<u8>> = (0..1_000u32)
        .map(|i| format!("prefix-{:04}-0123456789-stable", i * 4).into_bytes())
        .collect();
    for k in &stable {
        t.insert(k, b"s").expect("within limits");
    }
    let done = Arc::new(AtomicBool::new(false));
    let scanners: Vec<_> = [Order::Ascending, Order::Descending]
        .into_iter()
        .map(|order| {
            let (t, done) = (Arc::clone(&t), Arc::clone(&done));
            thread::spawn(move || {
                let mut rounds = 0u32;
                while !done.load(Ordering::Relaxed) || rounds == 0 {
                    let mut last: Option<Vec<u8>> = None;
                    let mut stable_seen = 0usize;
                    t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
                        if let Some(l) = &last {
                            match order {
                                Order::Ascending => assert!(k > &l[..], "out of order"),
                                Order::Descending => assert!(k < &l[..], "out of order"),
                            }
                        }
                        if k.ends_with(b"-stable") {
                            assert_eq!(v, b"s");
                            stable_seen += 1;
                        }
                        last = Some(k.to_vec());
                        ControlFlow::Continue(())
                    });
                    assert_eq!(stable_seen, 1_000, "a stable key was lost or repeated");
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let writer = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            for i in 0..20_000u32 {
                let k = format!("prefix-{:04}-0123456789-w{i}", (i % 1_000) * 4).into_bytes();
                t.upsert(&k, b"w").expect("within limits");
                if i % 3 == 0 {
                    assert!(t.remove(&k));
                }
            }
        })
    };
    writer.join().expect("writer");
    done.store(true, Ordering::Relaxed);
    for s in scanners {
        assert!(s.join().expect("scanner") > 0);
    }
}

/// Goal: two KEY_BYTES_MAX keys differing in the last byte build ~2 048 layers, and get,
/// scans both ways and remove still work (bounded recursion depth in scans and stats).
fn longest_keys_sharing_all_but_the_last_byte(t: &dyn Index) {
    let mut a = vec![7u8; forest_core::KEY_BYTES_MAX];
    let mut b = a.clone();
    *a.last_mut().expect("non-empty") = 1;
    *b.last_mut().expect("non-empty") = 2;
    assert!(t.insert(&a, b"a").expect("within limits"));
    assert!(t.insert(&b, b"b").expect("within limits"));
    let mut model = BTreeMap::new();
    model.insert(a.clone(), b"a".to_vec());
    model.insert(b.clone(), b"b".to_vec());
    check_against(t, &model);
    assert!(t.stats().counter("layers").expect("kept") >= 2_000);
    assert!(t.remove(&a));
    model.remove(&a);
    check_against(t, &model);
}

#[test]
fn sorted_nodes_shift_under_readers() {
    // Goal: without the permuter, inserts and removes shift border slots in place, and a get
    // overlapping a shift retries rather than missing a key or reading another's value.
    // Method: preload every fourth 8-byte key; two writers insert and remove the keys
    // between them (each insert or remove shifts the slots after it, and splits happen);
    // two readers loop over the preloaded keys, each must be found with its own value.
    let t = Arc::new(config(|c| c.permuter = false));
    let count: u64 = if cfg!(forest_optimized) {
        20_000
    } else {
        2_000
    };
    let stable: Vec<[u8; 8]> = (0..count).map(|i| (i * 4).to_be_bytes()).collect();
    for k in &stable {
        assert!(t.insert(k, k).expect("within limits"));
    }
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (t, done, stable) = (Arc::clone(&t), Arc::clone(&done), stable.clone());
            thread::spawn(move || {
                let mut buf = Vec::new();
                let mut rounds = 0u32;
                while !done.load(Ordering::Relaxed) || rounds == 0 {
                    for k in &stable {
                        assert!(t.get(k, &mut buf), "lost {k:?}");
                        assert_eq!(&buf, k);
                    }
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                for round in 0..3u64 {
                    for i in 0..count {
                        let k = (i * 4 + 1 + w).to_be_bytes();
                        assert!(t.insert(&k, b"between").expect("within limits"));
                        if (i + round) % 2 == 0 {
                            assert!(t.remove(&k));
                        }
                    }
                    for i in 0..count {
                        let k = (i * 4 + 1 + w).to_be_bytes();
                        if (i + round) % 2 != 0 {
                            assert!(t.remove(&k));
                        }
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("reader") > 0);
    }
    let mut model = BTreeMap::new();
    for k in &stable {
        model.insert(k.to_vec(), k.to_vec());
    }
    check_against(&*t, &model);
    assert!(t.stats().counter("splits").expect("kept") > 0);
}
