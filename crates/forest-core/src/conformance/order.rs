//! Insertion and removal orders that stress both ends of a tree: ascending (always the
//! rightmost leaf splits), descending (the leftmost), random. Enough keys for several levels of
//! small nodes; then 90 % removed, then all (empty and underfull nodes, merges), then
//! reinsertion into the emptied tree.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::conformance::{assert_matches_model, show, Make, Model, Sizes};
use crate::index::Index;

/// Key `i` of the order checks: ordered as `i`, 5 to 13 bytes long (crossing the 8-byte slice).
pub fn order_key(i: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(13);
    key.push(b'o');
    key.extend((i as u32).to_be_bytes());
    key.extend(std::iter::repeat_n(0xAB, (i % 5) * 2));
    key
}

/// The value of key `i` in round `round`, 0 to 23 bytes.
fn order_value(i: usize, round: u8) -> Vec<u8> {
    let mut value = (i as u32).to_le_bytes().to_vec();
    value.push(round);
    value.extend(std::iter::repeat_n(round ^ 0x3C, i % 19));
    value.truncate(i % 24);
    value
}

/// The order keys are inserted and removed in.
#[derive(Clone, Copy, Debug)]
enum Sequence {
    Ascending,
    Descending,
    Random,
}

fn arrange(count: usize, sequence: Sequence, rng: &mut rand::rngs::StdRng) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..count).collect();
    match sequence {
        Sequence::Ascending => {}
        Sequence::Descending => ids.reverse(),
        Sequence::Random => ids.shuffle(rng),
    }
    ids
}

fn insert_all(
    check: &str,
    index: &dyn Index,
    model: &mut Model,
    ids: &[usize],
    round: u8,
    seed: u64,
) {
    for &i in ids {
        let key = order_key(i);
        let value = order_value(i, round);
        let got = index.insert(&key, &value);
        assert!(
            matches!(got, Ok(true)),
            "[{check}] index {}: insert({}) of an absent key returned {got:?}, expected Ok(true) (round {round}, seed {seed})",
            index.name(),
            show(&key)
        );
        model.insert(key, value);
    }
}

fn remove_all(check: &str, index: &dyn Index, model: &mut Model, ids: &[usize], seed: u64) {
    for &i in ids {
        let key = order_key(i);
        let got = index.remove(&key);
        assert!(
            got,
            "[{check}] index {}: remove({}) of a present key returned false (seed {seed})",
            index.name(),
            show(&key)
        );
        model.remove(&key);
    }
}

fn assert_absent(check: &str, index: &dyn Index, ids: &[usize], context: &str) {
    let mut out = Vec::new();
    for &i in ids {
        let key = order_key(i);
        assert!(
            !index.get(&key, &mut out),
            "[{check}] index {}: {context}: get({}) found {} after the key was removed",
            index.name(),
            show(&key),
            show(&out)
        );
    }
}

fn run(check: &str, make: Make<'_>, sizes: &Sizes, sequence: Sequence) {
    let index = make();
    let index = &*index;
    let count = sizes.order_key_count;
    let seed = crate::conformance::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Model::new();

    let ids = arrange(count, sequence, &mut rng);
    insert_all(check, index, &mut model, &ids, 0, seed);
    assert_matches_model(
        check,
        index,
        &model,
        &format!("after {count} {sequence:?} inserts (seed {seed})"),
    );

    // Keep every tenth key, remove the rest in the check's order.
    let removal = arrange(count, sequence, &mut rng);
    let (doomed, kept): (Vec<usize>, Vec<usize>) = removal.into_iter().partition(|i| i % 10 != 0);
    remove_all(check, index, &mut model, &doomed, seed);
    assert_matches_model(
        check,
        index,
        &model,
        &format!("after removing 90 % in {sequence:?} order (seed {seed})"),
    );
    assert_absent(check, index, &doomed, "after removing 90 %");
    for &i in doomed.iter().take(100) {
        assert!(
            !index.remove(&order_key(i)),
            "[{check}] index {}: a second remove({}) returned true",
            index.name(),
            show(&order_key(i))
        );
    }

    remove_all(check, index, &mut model, &kept, seed);
    assert_matches_model(
        check,
        index,
        &model,
        &format!("after removing every key (seed {seed})"),
    );
    assert_absent(check, index, &kept, "after removing every key");

    let ids = arrange(count, sequence, &mut rng);
    insert_all(check, index, &mut model, &ids, 1, seed);
    assert_matches_model(
        check,
        index,
        &model,
        &format!("after reinserting {count} keys (seed {seed})"),
    );
}

/// Ascending inserts and removals (see the module doc).
pub fn order_ascending(make: Make<'_>, sizes: &Sizes) {
    run("order_ascending", make, sizes, Sequence::Ascending);
}

/// Descending inserts and removals (see the module doc).
pub fn order_descending(make: Make<'_>, sizes: &Sizes) {
    run("order_descending", make, sizes, Sequence::Descending);
}

/// Random inserts and removals (see the module doc).
pub fn order_random(make: Make<'_>, sizes: &Sizes) {
    run("order_random", make, sizes, Sequence::Random);
}
