//! Edge cases of keys, values and limits: the empty key and value, 00 and FF bytes, keys that
//! are prefixes of each other or differ only in trailing zeros (where slice- or prefix-based
//! engines go wrong), the size limits of [`crate::limits`] at and one past the maximum, and the
//! reuse of `get`'s output buffer.

use std::collections::BTreeSet;
use std::ops::Bound;

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::conformance::{
    assert_matches_model, collect, diff_records, expected, show, show_bound, BoundPair, Make,
    Model, Sizes,
};
use crate::error::Error;
use crate::index::{Index, Order};
use crate::limits::{KEY_BYTES_MAX, VALUE_BYTES_MAX};

/// Keys that stress byte-wise ordering and prefix handling.
pub fn binary_keys() -> Vec<Vec<u8>> {
    let mut keys: BTreeSet<Vec<u8>> = [
        &b""[..],
        b"\0",
        b"\0\0",
        b"\0\0\0",
        b"\0\xff",
        b"\x01",
        b"a",
        b"a\0",
        b"a\0\0",
        b"a\0\0\0",
        b"a\0\x01",
        b"a\x01",
        b"ab",
        b"ab\0",
        b"abc",
        b"abcdefgh",
        b"abcdefgh\0",
        b"abcdefgh\xff",
        b"abcdefghi",
        b"abcdefghijklmnop",
        b"abcdefghijklmnop\0",
        b"b",
        b"\x7f",
        b"\x80",
        b"\xff",
        b"\xff\0",
        b"\xff\xff",
        b"\xff\xff\xff",
    ]
    .iter()
    .map(|k| k.to_vec())
    .collect();
    // Lengths around Masstree's 8-byte slices and 16-byte two-slice keys.
    for len in [7, 8, 9, 15, 16, 17, 24, 25] {
        keys.insert(vec![0; len]);
        keys.insert(vec![0xFF; len]);
        let mut a_zeros = vec![0; len];
        a_zeros[0] = b'a';
        keys.insert(a_zeros);
        let mut zeros_a = vec![0; len];
        zeros_a[len - 1] = b'a';
        keys.insert(zeros_a);
    }
    keys.into_iter().collect()
}

/// A value for key number `i` of round `round`; every fifth is empty.
fn binary_value(i: usize, round: u8) -> Vec<u8> {
    if i.is_multiple_of(5) {
        Vec::new()
    } else {
        let len = i % 11;
        (0..len).map(|j| (i + j) as u8 ^ round).collect()
    }
}

/// Binary keys: insert (shuffled), duplicate inserts, upserts to empty values, updates of
/// present and absent keys, bounded scans at the ends, removal of half, then of all.
pub fn edge_binary_keys(make: Make<'_>, _sizes: &Sizes) {
    const CHECK: &str = "edge_binary_keys";
    let index = make();
    let index = &*index;
    let name = index.name();
    let keys = binary_keys();
    let seed = crate::conformance::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut shuffled: Vec<usize> = (0..keys.len()).collect();
    shuffled.shuffle(&mut rng);
    let mut model = Model::new();

    for &i in &shuffled {
        let value = binary_value(i, 0);
        let got = index.insert(&keys[i], &value);
        assert!(
            matches!(got, Ok(true)),
            "[{CHECK}] index {name}: insert({}) of an absent key returned {got:?}, expected Ok(true) (seed {seed})",
            show(&keys[i])
        );
        model.insert(keys[i].clone(), value);
    }
    assert_matches_model(CHECK, index, &model, "after inserting the binary keys");

    for (i, key) in keys.iter().enumerate() {
        let got = index.insert(key, b"must not replace");
        assert!(
            matches!(got, Ok(false)),
            "[{CHECK}] index {name}: insert({}) of a present key returned {got:?}, expected Ok(false)",
            show(key)
        );
        let absent = [
            key.as_slice(),
            b"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        ]
        .concat();
        let got = index.update(&absent, b"must not appear");
        assert!(
            matches!(got, Ok(false)),
            "[{CHECK}] index {name}: update({}) of an absent key returned {got:?}, expected Ok(false)",
            show(&absent)
        );
        if i % 2 == 0 {
            index.upsert(key, b"").unwrap_or_else(|e| {
                panic!(
                    "[{CHECK}] index {name}: upsert({}, b\"\") failed: {e}",
                    show(key)
                )
            });
            model.insert(key.clone(), Vec::new());
        } else {
            let value = binary_value(i, 1);
            let got = index.update(key, &value);
            assert!(
                matches!(got, Ok(true)),
                "[{CHECK}] index {name}: update({}) of a present key returned {got:?}, expected Ok(true)",
                show(key)
            );
            model.insert(key.clone(), value);
        }
    }
    assert_matches_model(
        CHECK,
        index,
        &model,
        "after upserts to empty values and updates",
    );

    let empty: &[u8] = b"";
    let top: &[u8] = &[0xFF; 26];
    let bound_pairs: [BoundPair<'_>; 6] = [
        (Bound::Included(empty), Bound::Included(empty)),
        (Bound::Excluded(empty), Bound::Unbounded),
        (Bound::Unbounded, Bound::Excluded(b"\0")),
        (Bound::Included(b"a"), Bound::Excluded(b"a\0\x01")),
        (Bound::Excluded(b"a\0"), Bound::Included(b"ab")),
        (Bound::Excluded(b"\xff"), Bound::Included(top)),
    ];
    for (lower, upper) in bound_pairs {
        for order in [Order::Ascending, Order::Descending] {
            let scan = collect(index, lower, upper, order, None);
            let want = expected(&model, lower, upper, order, None);
            if let Some(diff) = diff_records(&scan.records, &want) {
                panic!(
                    "[{CHECK}] index {name}: scan({}, {}, {order:?}): {diff}",
                    show_bound(lower),
                    show_bound(upper)
                );
            }
        }
    }

    for (i, key) in keys.iter().enumerate() {
        if i % 2 == 1 {
            let got = index.remove(key);
            assert!(
                got,
                "[{CHECK}] index {name}: remove({}) of a present key returned false",
                show(key)
            );
            model.remove(key);
            let again = index.remove(key);
            assert!(
                !again,
                "[{CHECK}] index {name}: a second remove({}) returned true",
                show(key)
            );
        }
    }
    assert_matches_model(CHECK, index, &model, "after removing every other key");
    for (i, key) in keys.iter().enumerate() {
        let mut out = Vec::new();
        assert!(
            i % 2 == 0 || !index.get(key, &mut out),
            "[{CHECK}] index {name}: get({}) found {} after the key was removed",
            show(key),
            show(&out)
        );
    }

    for key in &keys {
        let want = model.remove(key).is_some();
        let got = index.remove(key);
        assert_eq!(
            got,
            want,
            "[{CHECK}] index {name}: remove({}) returned {got}, expected {want}",
            show(key)
        );
    }
    assert_matches_model(CHECK, index, &model, "after removing every key");
}

/// A pattern value of `len` bytes, so a truncated or garbled copy shows.
fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ salt).collect()
}

/// Asserts that a write was refused with the expected error and changed nothing.
fn assert_refused(
    index: &dyn Index,
    model: &Model,
    what: &str,
    got: Result<String, Error>,
    key_too_long: bool,
) {
    const CHECK: &str = "edge_size_limits";
    let name = index.name();
    match (&got, key_too_long) {
        (Err(Error::KeyTooLong { len, max }), true)
            if *len == KEY_BYTES_MAX + 1 && *max == KEY_BYTES_MAX => {}
        (Err(Error::ValueTooLong { len, max }), false)
            if *len == VALUE_BYTES_MAX + 1 && *max == VALUE_BYTES_MAX => {}
        _ => {
            let want = if key_too_long {
                format!(
                    "Err(KeyTooLong {{ len: {}, max: {KEY_BYTES_MAX} }})",
                    KEY_BYTES_MAX + 1
                )
            } else {
                format!(
                    "Err(ValueTooLong {{ len: {}, max: {VALUE_BYTES_MAX} }})",
                    VALUE_BYTES_MAX + 1
                )
            };
            panic!("[{CHECK}] index {name}: {what} returned {got:?}, expected {want}");
        }
    }
    assert_matches_model(CHECK, index, model, &format!("after the refused {what}"));
}

/// Maximum-size keys and values round-trip; one byte more is an error on every write and
/// changes nothing; over-long keys find nothing on get and remove.
pub fn edge_size_limits(make: Make<'_>, _sizes: &Sizes) {
    const CHECK: &str = "edge_size_limits";
    let index = make();
    let index = &*index;
    let name = index.name();
    let mut model = Model::new();

    let max_key_a = vec![b'k'; KEY_BYTES_MAX];
    let mut max_key_b = vec![b'k'; KEY_BYTES_MAX];
    max_key_b[KEY_BYTES_MAX - 1] = 0;
    let max_key_c = vec![0xFF; KEY_BYTES_MAX];
    let max_value = pattern(VALUE_BYTES_MAX, 0);
    let writes: [(&[u8], Vec<u8>); 5] = [
        (&max_key_a, b"small".to_vec()),
        (&max_key_b, max_value.clone()),
        (&max_key_c, Vec::new()),
        (b"", pattern(VALUE_BYTES_MAX, 0x5A)),
        (b"m", pattern(VALUE_BYTES_MAX - 1, 0x33)),
    ];
    for (key, value) in &writes {
        let got = index.insert(key, value);
        assert!(
            matches!(got, Ok(true)),
            "[{CHECK}] index {name}: insert({}, {}) returned {got:?}, expected Ok(true)",
            show(key),
            show(value)
        );
        model.insert(key.to_vec(), value.clone());
    }
    assert_matches_model(
        CHECK,
        index,
        &model,
        "after inserting maximum-size keys and values",
    );
    let got = index.update(&max_key_a, &max_value);
    assert!(
        matches!(got, Ok(true)),
        "[{CHECK}] index {name}: update of a maximum-length key to a maximum-size value returned {got:?}"
    );
    model.insert(max_key_a.clone(), max_value.clone());
    index.upsert(&max_key_c, &max_value).unwrap_or_else(|e| {
        panic!("[{CHECK}] index {name}: upsert of a maximum-length key and value failed: {e}")
    });
    model.insert(max_key_c.clone(), max_value.clone());
    assert_matches_model(
        CHECK,
        index,
        &model,
        "after update and upsert to maximum-size values",
    );

    // One byte too long, sharing its first KEY_BYTES_MAX bytes with a stored key.
    let long_key = [max_key_a.as_slice(), b"k"].concat();
    let long_value = pattern(VALUE_BYTES_MAX + 1, 0x77);
    let small: &[u8] = b"small";
    let refusals: [(&str, &[u8], &[u8], bool); 10] = [
        ("insert(over-long key, small value)", &long_key, small, true),
        ("upsert(over-long key, small value)", &long_key, small, true),
        ("update(over-long key, small value)", &long_key, small, true),
        (
            "insert(absent key, over-long value)",
            b"absent",
            &long_value,
            false,
        ),
        (
            "insert(present key, over-long value)",
            b"m",
            &long_value,
            false,
        ),
        (
            "upsert(absent key, over-long value)",
            b"absent",
            &long_value,
            false,
        ),
        (
            "upsert(present key, over-long value)",
            &max_key_b,
            &long_value,
            false,
        ),
        (
            "update(absent key, over-long value)",
            b"absent",
            &long_value,
            false,
        ),
        (
            "update(present key, over-long value)",
            b"",
            &long_value,
            false,
        ),
        (
            "update(present maximum-length key, over-long value)",
            &max_key_a,
            &long_value,
            false,
        ),
    ];
    for (what, key, value, key_too_long) in refusals {
        let op = what.split('(').next().unwrap_or(what);
        let got = match op {
            "insert" => index.insert(key, value).map(|r| format!("Ok({r})")),
            "upsert" => index.upsert(key, value).map(|()| "Ok(())".to_string()),
            _ => index.update(key, value).map(|r| format!("Ok({r})")),
        };
        assert_refused(index, &model, what, got, key_too_long);
    }

    let mut out = b"untouched".to_vec();
    for key in [
        long_key.clone(),
        vec![0xFF; KEY_BYTES_MAX + 1],
        vec![0; 4 * KEY_BYTES_MAX],
    ] {
        assert!(
            !index.get(&key, &mut out),
            "[{CHECK}] index {name}: get of a {}-byte key found {}",
            key.len(),
            show(&out)
        );
        assert!(
            !index.remove(&key),
            "[{CHECK}] index {name}: remove of a {}-byte key returned true",
            key.len()
        );
    }
    assert_matches_model(
        CHECK,
        index,
        &model,
        "after get and remove with over-long keys",
    );
}

/// `get` replaces the whole contents of a reused buffer, longer or shorter than the value,
/// and an empty value empties it.
pub fn edge_get_replaces_out(make: Make<'_>, _sizes: &Sizes) {
    const CHECK: &str = "edge_get_replaces_out";
    let index = make();
    let name = index.name();
    let long = pattern(1000, 9);
    let entries: [(&[u8], &[u8]); 3] = [(b"short", b"abc"), (b"empty", b""), (b"long", &long)];
    for (key, value) in entries {
        let got = index.insert(key, value);
        assert!(
            matches!(got, Ok(true)),
            "[{CHECK}] index {name}: insert({}) returned {got:?}",
            show(key)
        );
    }
    let mut out = vec![0xAA; 4096];
    for (key, value) in entries.iter().chain(entries.iter().rev()) {
        assert!(
            index.get(key, &mut out),
            "[{CHECK}] index {name}: get({}) found nothing",
            show(key)
        );
        assert_eq!(
            out,
            *value,
            "[{CHECK}] index {name}: get({}) into a reused buffer left {}, expected exactly {}",
            show(key),
            show(&out),
            show(value)
        );
    }
    let mut fresh = Vec::new();
    assert!(
        index.get(b"long", &mut fresh),
        "[{CHECK}] index {name}: get(b\"long\") found nothing"
    );
    assert_eq!(
        fresh, long,
        "[{CHECK}] index {name}: get(b\"long\") into a new buffer"
    );
}
