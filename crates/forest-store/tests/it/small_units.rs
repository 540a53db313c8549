//! Atomic batches of up to four ops take the small-unit path of `Store::write_unit` (issue 19:
//! no heap allocation; the unit's own earlier effects are found among its records instead of
//! in a map). They must decide exactly as larger batches do: each op against the current
//! values and the batch's earlier ops, one key written several times included, and their
//! records must replay to the same state after a power loss. `BatchOp::RemovePresent` (a
//! removal not read first) joins them, on absent keys too.

use std::collections::BTreeMap;

use forest_store::file::{CrashMode, SimDir};
use forest_store::{BatchOp, Durability, Store, StoreOptions, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn options() -> StoreOptions {
    StoreOptions {
        durability: Durability::Group,
        ..StoreOptions::default()
    }
}

/// A random op over three keys, so that batches write one key several times.
fn random_op(rng: &mut StdRng, round: usize) -> BatchOp {
    let key = vec![b'k', rng.random_range(0..3u8)];
    let value = format!("v{round}-{}", rng.random_range(0..1000)).into_bytes();
    match rng.random_range(0..5) {
        0 => BatchOp::Insert(key, value),
        1 => BatchOp::Upsert(key, value),
        2 => BatchOp::Update(key, value),
        3 => BatchOp::Remove(key),
        // Present or not: an absent key is the caller's mistake, which must stay harmless.
        _ => BatchOp::RemovePresent(key),
    }
}

/// What `op` changes in `model`; applies it.
fn apply(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, op: &BatchOp) -> bool {
    match op {
        BatchOp::Insert(k, v) if !model.contains_key(k) => {
            model.insert(k.clone(), v.clone()).is_none()
        }
        BatchOp::Insert(..) => false,
        BatchOp::Upsert(k, v) => {
            model.insert(k.clone(), v.clone());
            true
        }
        BatchOp::Update(k, v) => match model.get_mut(k) {
            Some(old) => {
                *old = v.clone();
                true
            }
            None => false,
        },
        BatchOp::Remove(k) => model.remove(k).is_some(),
        // Not read: reported as a change even where the key was absent.
        BatchOp::RemovePresent(k) => {
            model.remove(k);
            true
        }
    }
}

// Goal: batches of 1 to 8 ops (both sides of the small-unit bound) report and leave what a
// model of ordered ops does, through `Store::write` and a pipeline's `write_ops`, and a power
// loss after the waits loses none of them. Method: random batches over three keys, compared
// op by op and key by key, then a crash dropping unsynced bytes and a reopen.
#[test]
fn small_units_decide_as_the_model_does() {
    let rounds: usize = std::env::var("FOREST_SMALL_UNIT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let dir = SimDir::new(19);
    let store = Store::open(dir.clone(), options()).expect("open");
    let mut rng = StdRng::seed_from_u64(19);
    let mut model = BTreeMap::new();
    for round in 0..rounds {
        let len = rng.random_range(1..=8);
        let ops: Vec<BatchOp> = (0..len).map(|_| random_op(&mut rng, round)).collect();
        let expected: Vec<bool> = ops.iter().map(|op| apply(&mut model, op)).collect();
        if round % 2 == 0 {
            let mut batch = WriteBatch::new();
            for op in &ops {
                batch.push(op.clone());
            }
            let changed = store.write(&batch).expect("write");
            assert_eq!(changed, expected, "round {round}: {ops:?}");
        } else {
            let mut pipeline = store.batch();
            pipeline.write_ops(&ops).expect("write_ops");
            pipeline.wait().expect("wait");
        }
        let seen: BTreeMap<Vec<u8>, Vec<u8>> = store.to_vec().into_iter().collect();
        assert_eq!(seen, model, "round {round}: {ops:?}");
    }
    dir.crash_with(CrashMode::DropUnsynced);
    drop(store);
    let store = Store::open(dir, options()).expect("reopen");
    let seen: BTreeMap<Vec<u8>, Vec<u8>> = store.to_vec().into_iter().collect();
    assert_eq!(seen, model, "after the power loss");
}
