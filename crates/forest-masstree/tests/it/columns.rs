//! §4.7 values with columns through `ColumnIndex`: partial gets and puts, and atomic
//! multi-column puts under concurrency.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use forest_core::index::{row_columns, row_decode, row_encode, ColumnIndex};
use forest_core::{Error, Index, Order, VALUE_BYTES_MAX};
use forest_masstree::Masstree;

#[test]
fn column_puts_change_only_their_columns() {
    // Goal: a put of some columns keeps the others, gets return the columns asked for (empty
    // past the row's end), a plain value reads as column 0, and an oversized row is refused
    // without a change. Method: a short sequence with every case, checked after each step.
    let t = Masstree::new();
    let mut out = Vec::new();
    assert!(!t.get_columns(b"k", &[0], &mut out));
    t.put_columns(b"k", &[(0, b"zero"), (2, b"two")])
        .expect("small");
    assert!(t.get_columns(b"k", &[2, 1, 0, 9], &mut out));
    assert_eq!(out, vec![b"two".to_vec(), vec![], b"zero".to_vec(), vec![]]);
    t.put_columns(b"k", &[(1, b"one"), (2, b"TWO")])
        .expect("small");
    assert!(t.get_columns(b"k", &[0, 1, 2], &mut out));
    assert_eq!(
        out,
        vec![b"zero".to_vec(), b"one".to_vec(), b"TWO".to_vec()]
    );
    // get and scan see the whole row.
    let mut whole = Vec::new();
    assert!(t.get(b"k", &mut whole));
    assert_eq!(row_columns(&whole), vec![&b"zero"[..], b"one", b"TWO"]);
    t.upsert(b"plain", b"just bytes").expect("small");
    assert!(t.get_columns(b"plain", &[0, 1], &mut out));
    assert_eq!(out, vec![b"just bytes".to_vec(), vec![]]);
    t.put_columns(b"plain", &[(1, b"more")]).expect("small");
    assert!(t.get_columns(b"plain", &[0, 1], &mut out));
    assert_eq!(out, vec![b"just bytes".to_vec(), b"more".to_vec()]);
    let big = vec![7u8; VALUE_BYTES_MAX];
    let err = t
        .put_columns(b"k", &[(3, &big)])
        .expect_err("over the value limit");
    assert!(matches!(err, Error::ValueTooLong { .. }));
    assert!(t.put_columns(b"k", &[(usize::MAX, b"x")]).is_err());
    assert!(t.get_columns(b"k", &[0, 1, 2, 3], &mut out));
    assert_eq!(out[2], b"TWO");
    assert!(out[3].is_empty());
}

#[test]
fn rows_and_plain_values_never_pass_for_each_other() {
    // Goal: whether a value is a row is stored beside it, not guessed from its bytes. Method:
    // a plain value whose bytes are a valid row encoding reads as column 0 whole; a row reads
    // through get and scan as exactly its row_encode encoding; a put of columns over that
    // plain value keeps it whole as column 0; a plain upsert over a row makes it plain again.
    let t = Masstree::new();
    let mut looks_like_row = Vec::new();
    row_encode(&[b"a", b"bc"], &mut looks_like_row).expect("small");
    assert!(row_decode(&looks_like_row).is_some());
    t.upsert(b"plain", &looks_like_row).expect("small");
    let mut out = Vec::new();
    assert!(t.get_columns(b"plain", &[0, 1], &mut out));
    assert_eq!(out, vec![looks_like_row.clone(), vec![]]);
    let mut whole = Vec::new();
    assert!(t.get(b"plain", &mut whole));
    assert_eq!(whole, looks_like_row);

    t.put_columns(b"row", &[(0, b"x"), (1, b"")])
        .expect("small");
    let mut expected = Vec::new();
    row_encode(&[b"x", b""], &mut expected).expect("small");
    assert!(t.get(b"row", &mut whole));
    assert_eq!(whole, expected);
    let mut scanned = Vec::new();
    t.scan(
        Bound::Included(&b"row"[..]),
        Bound::Included(&b"row"[..]),
        Order::Ascending,
        &mut |_, v| {
            scanned.push(v.to_vec());
            ControlFlow::Continue(())
        },
    );
    assert_eq!(scanned, vec![expected]);
    assert!(t.get_columns(b"row", &[0, 1, 2], &mut out));
    assert_eq!(out, vec![b"x".to_vec(), vec![], vec![]]);

    t.put_columns(b"plain", &[(2, b"z")]).expect("small");
    assert!(t.get_columns(b"plain", &[0, 1, 2], &mut out));
    assert_eq!(out, vec![looks_like_row.clone(), vec![], b"z".to_vec()]);

    // A row's encoding written back through the plain API is a plain value again.
    t.upsert(b"row", &whole).expect("small");
    assert!(t.get_columns(b"row", &[0, 1], &mut out));
    assert_eq!(out, vec![whole.clone(), vec![]]);
}

const COLUMNS: usize = 4;
const PUTS: u64 = if cfg!(forest_optimized) {
    200_000
} else {
    20_000
};

#[test]
fn readers_never_see_two_stamps_in_one_row() {
    // Goal: a multi-column put is atomic (§4.7): readers see all of it or none. Method: two
    // writers put one stamp into all COLUMNS columns of a few hot keys; a third writer puts
    // junk into column COLUMNS only; readers get all columns (and scan rows) and require the
    // first COLUMNS columns to carry one stamp.
    let t = Arc::new(Masstree::new());
    let keys: Vec<Vec<u8>> = (0..8u32).map(|i| format!("row-{i}").into_bytes()).collect();
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..2u64 {
        let (t, keys) = (Arc::clone(&t), keys.clone());
        writers.push(thread::spawn(move || {
            for i in 0..PUTS {
                let stamp = (i * 2 + w).to_le_bytes();
                let cols: Vec<(usize, &[u8])> = (0..COLUMNS).map(|c| (c, &stamp[..])).collect();
                let k = &keys[(i % keys.len() as u64) as usize];
                t.put_columns(k, &cols).expect("small");
            }
        }));
    }
    {
        let (t, keys, done) = (Arc::clone(&t), keys.clone(), Arc::clone(&done));
        writers.push(thread::spawn(move || {
            let mut i = 0u64;
            while !done.load(Ordering::Relaxed) {
                let junk = vec![b'j'; (i % 40) as usize];
                t.put_columns(&keys[(i % 8) as usize], &[(COLUMNS, &junk)])
                    .expect("small");
                i += 1;
            }
        }));
    }
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (t, keys, done) = (Arc::clone(&t), keys.clone(), Arc::clone(&done));
            thread::spawn(move || {
                let all: Vec<usize> = (0..COLUMNS).collect();
                let mut out = Vec::new();
                let mut checked = 0u64;
                while !done.load(Ordering::Relaxed) || checked == 0 {
                    if r == 0 {
                        for k in &keys {
                            if t.get_columns(k, &all, &mut out) {
                                assert!(out.iter().all(|c| *c == out[0]), "torn row {out:?}");
                                checked += 1;
                            }
                        }
                    } else {
                        t.scan(
                            Bound::Unbounded,
                            Bound::Unbounded,
                            Order::Ascending,
                            &mut |_, v| {
                                let cols = row_columns(v);
                                if cols.len() > 1 {
                                    assert!(
                                        cols[..COLUMNS].iter().all(|c| *c == cols[0]),
                                        "torn row"
                                    );
                                    checked += 1;
                                }
                                ControlFlow::Continue(())
                            },
                        );
                    }
                }
                checked
            })
        })
        .collect();
    for w in writers.drain(..2) {
        w.join().expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("junk writer");
    }
    for r in readers {
        assert!(r.join().expect("reader") > 0, "a reader checked nothing");
    }
    // Every row ends with one stamp from the last put to it in all COLUMNS columns.
    let mut out = Vec::new();
    let all: Vec<usize> = (0..COLUMNS).collect();
    for k in &keys {
        assert!(t.get_columns(k, &all, &mut out));
        assert!(out.iter().all(|c| *c == out[0] && c.len() == 8));
    }
}
