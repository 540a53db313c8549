//! Model-based checks: random operation sequences (proptest) run against the index and a
//! `BTreeMap` side by side; every return value and every scan must agree, and at the end
//! (quiescent) `stats().key_count` and full scans must too (STYLE.md §5, "Model test").
//!
//! Two key spaces: a tiny one (0..=3 bytes over {00, 01, 'a', 'b', FF}) where hits, misses,
//! prefixes and equal keys are frequent, and a pool of 512 keys with long shared prefixes
//! around the 8- and 16-byte slice boundaries, with bulk fill and drain ops so that engines with
//! small nodes split and merge. Failures shrink to a short op list, shown with byte strings.

use std::cell::Cell;
use std::fmt;
use std::ops::Bound;

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use crate::conformance::{
    collect, compare_with_model, diff_records, expected, show, Make, Model, Sizes,
};
use crate::index::{Index, Order};

/// Longest op sequence of the small-key model.
const SMALL_OP_COUNT_MAX: usize = 64;
/// Longest op sequence of the many-key model (fills make each op up to hundreds of calls).
const MANY_OP_COUNT_MAX: usize = 48;
/// Keys of the many-key pool: enough for several levels of small nodes.
pub const POOL_KEY_COUNT: u16 = 512;
/// Longest fill or drain.
const BULK_COUNT_MAX: u16 = 300;
/// The tiny alphabet of the small-key model: both extremes and a few in between.
const SMALL_ALPHABET: [u8; 5] = [0x00, 0x01, b'a', b'b', 0xFF];
/// Longest key of the small-key model.
const SMALL_KEY_BYTES_MAX: usize = 3;

/// A key, shown as a byte string.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(pub Vec<u8>);

// Debug output is Rust source (`key(b"a\x00")`), so a shrunk sequence pastes into a named
// regression test (see [`replay`]).
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key(b\"{}\")", self.0.escape_ascii())
    }
}

/// A [`Key`] from bytes (the form failure listings print).
pub fn key(bytes: &[u8]) -> Key {
    Key(bytes.to_vec())
}

/// A value given by a tag and a length (shown `val(tag, len)`), so shrunk op lists stay short.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Value {
    /// First byte; later bytes count up from it.
    pub tag: u8,
    /// Length in bytes.
    pub len: u8,
}

impl Value {
    /// The value's bytes.
    pub fn bytes(self) -> Vec<u8> {
        (0..self.len).map(|i| self.tag.wrapping_add(i)).collect()
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "val({}, {})", self.tag, self.len)
    }
}

/// A [`Value`] from its tag and length (the form failure listings print).
pub fn val(tag: u8, len: u8) -> Value {
    Value { tag, len }
}

/// One step of a model sequence.
#[derive(Clone, Debug)]
pub enum Op {
    /// `get`, compared with the model.
    Get(Key),
    /// `insert` (only if absent).
    Insert(Key, Value),
    /// `upsert`.
    Upsert(Key, Value),
    /// `update` (only if present).
    Update(Key, Value),
    /// `remove`.
    Remove(Key),
    /// `scan`; with `limit`, the visitor breaks after that many records.
    Scan {
        /// Lower bound.
        lower: Bound<Key>,
        /// Upper bound.
        upper: Bound<Key>,
        /// Direction.
        order: Order,
        /// Records kept before `Break`.
        limit: Option<u8>,
    },
    /// Inserts pool keys `start..start + count` one by one (in reverse when `descending`).
    Fill {
        /// First pool key.
        start: u16,
        /// Pool keys to insert.
        count: u16,
        /// Insert from the top down.
        descending: bool,
        /// The value inserted.
        value: Value,
    },
    /// Removes pool keys `start..start + count` one by one (in reverse when `descending`).
    Drain {
        /// First pool key.
        start: u16,
        /// Pool keys to remove.
        count: u16,
        /// Remove from the top down.
        descending: bool,
    },
}

/// Key `n` of the many-key pool: 8 groups of 64 keys, each group behind a prefix chosen to
/// straddle 8- and 16-byte slice boundaries (Masstree layers), with suffixes of 1 to 9 bytes.
pub fn pool_key(n: u16) -> Vec<u8> {
    let group = n / 64;
    let within = (n % 64) as u8;
    let mut key = match group {
        0 => Vec::new(),
        1 => b"m".to_vec(),
        2 => vec![b'm'; 7],
        3 => vec![b'm'; 8],
        4 => vec![b'm'; 9],
        5 => vec![b'm'; 16],
        6 => b"mmmmmmmm\0".to_vec(),
        _ => b"n\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
    };
    let first = within * 4;
    match within % 4 {
        0 => key.push(first),
        1 => key.extend([first, 0]),
        2 => key.extend([first, 0xFF, 0xFF]),
        _ => key.extend([first; 9]),
    }
    key
}

fn value_strategy() -> impl Strategy<Value = Value> {
    (any::<u8>(), 0u8..=40).prop_map(|(tag, len)| Value { tag, len })
}

fn small_value_strategy() -> impl Strategy<Value = Value> {
    (any::<u8>(), 0u8..=6).prop_map(|(tag, len)| Value { tag, len })
}

fn small_key_strategy() -> BoxedStrategy<Key> {
    proptest::collection::vec(select(SMALL_ALPHABET.to_vec()), 0..=SMALL_KEY_BYTES_MAX)
        .prop_map(Key)
        .boxed()
}

fn pool_key_strategy() -> BoxedStrategy<Key> {
    (0..POOL_KEY_COUNT).prop_map(|n| Key(pool_key(n))).boxed()
}

fn bound_strategy(key: BoxedStrategy<Key>) -> impl Strategy<Value = Bound<Key>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key.clone().prop_map(Bound::Included),
        2 => key.prop_map(Bound::Excluded),
    ]
}

fn order_strategy() -> impl Strategy<Value = Order> {
    prop_oneof![Just(Order::Ascending), Just(Order::Descending)]
}

fn scan_strategy(key: BoxedStrategy<Key>) -> impl Strategy<Value = Op> {
    (
        bound_strategy(key.clone()),
        bound_strategy(key),
        order_strategy(),
        proptest::option::of(0u8..6),
    )
        .prop_map(|(lower, upper, order, limit)| Op::Scan {
            lower,
            upper,
            order,
            limit,
        })
}

fn single_op_strategy(
    key: BoxedStrategy<Key>,
    value: BoxedStrategy<Value>,
) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => key.clone().prop_map(Op::Get),
        3 => (key.clone(), value.clone()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (key.clone(), value.clone()).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => (key.clone(), value).prop_map(|(k, v)| Op::Update(k, v)),
        2 => key.clone().prop_map(Op::Remove),
        2 => scan_strategy(key),
    ]
}

fn small_ops_strategy() -> impl Strategy<Value = Vec<Op>> {
    let op = single_op_strategy(small_key_strategy(), small_value_strategy().boxed());
    proptest::collection::vec(op, 1..=SMALL_OP_COUNT_MAX)
}

fn many_ops_strategy() -> impl Strategy<Value = Vec<Op>> {
    let fill = (
        0..POOL_KEY_COUNT,
        1..=BULK_COUNT_MAX,
        any::<bool>(),
        value_strategy(),
    )
        .prop_map(|(start, count, descending, value)| Op::Fill {
            start,
            count,
            descending,
            value,
        });
    let drain = (0..POOL_KEY_COUNT, 1..=BULK_COUNT_MAX, any::<bool>()).prop_map(
        |(start, count, descending)| Op::Drain {
            start,
            count,
            descending,
        },
    );
    let op = prop_oneof![
        6 => single_op_strategy(pool_key_strategy(), value_strategy().boxed()),
        2 => fill,
        1 => drain,
    ];
    proptest::collection::vec(op, 1..=MANY_OP_COUNT_MAX)
}

fn bound_bytes(bound: &Bound<Key>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(k) => Bound::Included(&k.0),
        Bound::Excluded(k) => Bound::Excluded(&k.0),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn bulk_keys(start: u16, count: u16, descending: bool) -> Vec<Vec<u8>> {
    let end = start.saturating_add(count).min(POOL_KEY_COUNT);
    let mut keys: Vec<Vec<u8>> = (start..end).map(pool_key).collect();
    if descending {
        keys.reverse();
    }
    keys
}

fn apply_insert(
    index: &dyn Index,
    model: &mut Model,
    key: &[u8],
    value: Vec<u8>,
) -> Result<(), String> {
    let want = !model.contains_key(key);
    match index.insert(key, &value) {
        Ok(got) if got == want => {
            if want {
                model.insert(key.to_vec(), value);
            }
            Ok(())
        }
        Ok(got) => Err(format!(
            "insert({}) returned Ok({got}), expected Ok({want})",
            show(key)
        )),
        Err(e) => Err(format!("insert({}) failed: {e}", show(key))),
    }
}

fn apply_remove(index: &dyn Index, model: &mut Model, key: &[u8]) -> Result<(), String> {
    let want = model.remove(key).is_some();
    let got = index.remove(key);
    if got != want {
        return Err(format!(
            "remove({}) returned {got}, expected {want}",
            show(key)
        ));
    }
    Ok(())
}

/// Applies one op to both, returning the first disagreement.
fn apply(index: &dyn Index, model: &mut Model, op: &Op) -> Result<(), String> {
    match op {
        Op::Get(Key(key)) => {
            let mut out = b"stale bytes from an earlier get".to_vec();
            let got = index.get(key, &mut out);
            match model.get(key) {
                Some(value) if !got => Err(format!(
                    "get({}) found nothing, expected {}",
                    show(key),
                    show(value)
                )),
                Some(value) if out != *value => Err(format!(
                    "get({}) gave {}, expected {}",
                    show(key),
                    show(&out),
                    show(value)
                )),
                None if got => Err(format!(
                    "get({}) found {}, expected nothing",
                    show(key),
                    show(&out)
                )),
                _ => Ok(()),
            }
        }
        Op::Insert(Key(key), value) => apply_insert(index, model, key, value.bytes()),
        Op::Upsert(Key(key), value) => match index.upsert(key, &value.bytes()) {
            Ok(()) => {
                model.insert(key.clone(), value.bytes());
                Ok(())
            }
            Err(e) => Err(format!("upsert({}) failed: {e}", show(key))),
        },
        Op::Update(Key(key), value) => {
            let want = model.contains_key(key);
            match index.update(key, &value.bytes()) {
                Ok(got) if got == want => {
                    if want {
                        model.insert(key.clone(), value.bytes());
                    }
                    Ok(())
                }
                Ok(got) => Err(format!(
                    "update({}) returned Ok({got}), expected Ok({want})",
                    show(key)
                )),
                Err(e) => Err(format!("update({}) failed: {e}", show(key))),
            }
        }
        Op::Remove(Key(key)) => apply_remove(index, model, key),
        Op::Scan {
            lower,
            upper,
            order,
            limit,
        } => {
            let (lower, upper) = (bound_bytes(lower), bound_bytes(upper));
            let limit = limit.map(usize::from);
            let scan = collect(index, lower, upper, *order, limit);
            if scan.calls_after_break > 0 {
                return Err(format!(
                    "scan called visit {} times after it returned Break",
                    scan.calls_after_break
                ));
            }
            let want = expected(model, lower, upper, *order, limit);
            match diff_records(&scan.records, &want) {
                Some(diff) => Err(format!("scan: {diff}")),
                None => Ok(()),
            }
        }
        Op::Fill {
            start,
            count,
            descending,
            value,
        } => {
            for (step, key) in bulk_keys(*start, *count, *descending).iter().enumerate() {
                apply_insert(index, model, key, value.bytes())
                    .map_err(|e| format!("fill step {step}: {e}"))?;
            }
            Ok(())
        }
        Op::Drain {
            start,
            count,
            descending,
        } => {
            for (step, key) in bulk_keys(*start, *count, *descending).iter().enumerate() {
                apply_remove(index, model, key).map_err(|e| format!("drain step {step}: {e}"))?;
            }
            Ok(())
        }
    }
}

/// Replays a sequence, as a failure listing prints it, on an index (which should be fresh),
/// and panics at the first disagreement with the model. This turns a proptest find into a
/// named regression test:
/// ```
/// use std::ops::Bound::*;
/// use forest_core::conformance::model::{key, replay, val, Op::*};
/// use forest_core::conformance::reference::ReferenceIndex;
/// use forest_core::Order::*;
/// replay(&ReferenceIndex::new(), &[
///     Insert(key(b"a\x00"), val(7, 2)),
///     Scan { lower: Excluded(key(b"a")), upper: Unbounded, order: Descending, limit: Some(1) },
///     Remove(key(b"a\x00")),
/// ]);
/// ```
pub fn replay(index: &dyn Index, ops: &[Op]) {
    if let Err(e) = run_sequence(index, ops) {
        panic!("[model replay] index {}: {e}", index.name());
    }
}

/// Runs one sequence on a fresh index; the error names the op and the disagreement.
fn run_sequence(index: &dyn Index, ops: &[Op]) -> Result<(), String> {
    let mut model = Model::new();
    for (position, op) in ops.iter().enumerate() {
        apply(index, &mut model, op).map_err(|e| format!("op #{position} {op:?}: {e}"))?;
    }
    compare_with_model(index, &model).map_err(|e| format!("after the last op (quiescent): {e}"))
}

fn run_model<S>(check: &str, make: Make<'_>, case_count: u32, strategy: &S)
where
    S: Strategy<Value = Vec<Op>>,
{
    let config = Config {
        cases: case_count,
        failure_persistence: None,
        ..Config::default()
    };
    let seed = crate::conformance::seed();
    let seed_bytes: Vec<u8> = std::iter::repeat_n(seed.to_le_bytes(), 4)
        .flatten()
        .collect();
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let name = Cell::new("?");
    let result = runner.run(strategy, |ops| {
        let index = make();
        name.set(index.name());
        run_sequence(&*index, &ops).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => {
            let listing: String = ops
                .iter()
                .enumerate()
                .map(|(position, op)| format!("    {op:?}, // #{position}\n"))
                .collect();
            panic!(
                "[{check}] index {}: model check failed: {reason} (seed {seed})\nminimal failing sequence ({} ops; model::replay runs it):\n[\n{listing}]",
                name.get(),
                ops.len()
            )
        }
        Err(TestError::Abort(reason)) => {
            panic!("[{check}] index {}: proptest aborted: {reason}", name.get())
        }
    }
}

/// Random sequences over the tiny key space against a `BTreeMap` (see the module doc).
pub fn model_small_keys(make: Make<'_>, sizes: &Sizes) {
    run_model(
        "model_small_keys",
        make,
        sizes.model_small_case_count,
        &small_ops_strategy(),
    );
}

/// Random sequences over the 512-key pool, with bulk fills and drains (see the module doc).
pub fn model_many_keys(make: Make<'_>, sizes: &Sizes) {
    run_model(
        "model_many_keys",
        make,
        sizes.model_many_case_count,
        &many_ops_strategy(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_keys_are_distinct() {
        // Goal: the pool really has POOL_KEY_COUNT keys. Method: collect into a set.
        let keys: std::collections::BTreeSet<Vec<u8>> = (0..POOL_KEY_COUNT).map(pool_key).collect();
        assert_eq!(keys.len(), usize::from(POOL_KEY_COUNT));
    }
}
