//! [`Index::get_many`] against the model (issue 15): the batched lookup answers each key as
//! `get` does, visits every position once and in order, whatever the list holds.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::conformance::edge::binary_keys;
use crate::conformance::{show, Make, Model, Sizes};
use crate::index::Index;
use crate::limits::KEY_BYTES_MAX;

/// Lists of keys looked up per round: short and long (several of masstree's lock-step groups
/// of 16), with duplicates, absent and over-long keys.
const LISTS_PER_ROUND: usize = 64;
/// The longest list.
const LIST_KEYS_MAX: usize = 70;

/// The keys of [`get_many_model`]: the edge keys (the empty key, 8- and 16-byte slice
/// boundaries, prefixes of each other) and `count` more sharing long prefixes, so that masstree
/// has several layers and levels.
fn pool(count: usize) -> Vec<Vec<u8>> {
    let mut keys = binary_keys();
    for i in 0..count {
        let mut key = b"key:0000".to_vec();
        key.extend(format!("{i:08}").bytes());
        if i % 7 == 0 {
            key.extend(b"-longer-than-two-slices");
        }
        keys.push(key);
    }
    keys
}

/// Checks one list against the model: a visit per position, in order, with the model's value.
fn check_list(index: &dyn Index, model: &Model, list: &[&[u8]], what: &str) {
    let name = index.name();
    let mut next = 0;
    index.get_many(list, &mut |i, value| {
        assert_eq!(
            i, next,
            "[get_many_model] index {name}: {what}: visited position {i}, expected {next} (each position once, in order)"
        );
        let want = model.get(list[i]).map(Vec::as_slice);
        assert_eq!(
            value,
            want,
            "[get_many_model] index {name}: {what}: key #{i} {} gave {:?}, expected {:?}",
            show(list[i]),
            value.map(show),
            want.map(show)
        );
        next += 1;
    });
    assert_eq!(
        next,
        list.len(),
        "[get_many_model] index {name}: {what}: {next} positions visited of {}",
        list.len()
    );
}

/// Fills an index from a pool of keys, then, after each of three rounds of writes (inserts,
/// upserts to new values, removals of about a third), looks up random lists of keys (present,
/// removed, never written, over-long, repeated, the empty list) with `get_many` and compares
/// each answer with the model.
pub fn get_many_model(make: Make<'_>, sizes: &Sizes) {
    let index = make();
    let index = &*index;
    let seed = crate::conformance::seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    let keys = pool((sizes.order_key_count / 10).clamp(300, 3_000));
    let too_long = vec![b'k'; KEY_BYTES_MAX + 1];
    let absent: Vec<Vec<u8>> = (0..32)
        .map(|i| format!("absent:{i}").into_bytes())
        .collect();
    let mut model = Model::new();
    for round in 0..3u8 {
        for key in &keys {
            match rng.random_range(0..3) {
                0 => {
                    index.remove(key);
                    model.remove(key);
                }
                _ => {
                    let mut value = key.clone();
                    value.push(round);
                    value.truncate(rng.random_range(0..=value.len()));
                    index
                        .upsert(key, &value)
                        .unwrap_or_else(|e| panic!("[get_many_model] upsert failed: {e}"));
                    model.insert(key.clone(), value);
                }
            }
        }
        for list_number in 0..LISTS_PER_ROUND {
            let len = match list_number {
                0 => 0,
                1 => 1,
                _ => rng.random_range(0..=LIST_KEYS_MAX),
            };
            let list: Vec<&[u8]> = (0..len)
                .map(|_| match rng.random_range(0..20) {
                    0 => too_long.as_slice(),
                    1..=3 => absent[rng.random_range(0..absent.len())].as_slice(),
                    _ => keys[rng.random_range(0..keys.len())].as_slice(),
                })
                .collect();
            check_list(
                index,
                &model,
                &list,
                &format!("round {round}, list {list_number} of {len} keys (seed {seed})"),
            );
        }
    }
}
