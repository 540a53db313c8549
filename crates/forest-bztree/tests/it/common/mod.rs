//! The deterministic write workload the crash tests (`kill.rs`, `power_loss.rs`) replay and
//! check against a model: mostly upserts (every ninth value behind a record pointer), a
//! quarter removes, over `keys` keys, so leaves split and merge.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug)]
pub enum Op {
    Upsert(u64, u64),
    Remove(u64),
}

/// Operation `i` of sequence `seed` over `keys` keys.
pub fn op(seed: u64, i: u64, keys: u64) -> Op {
    let mut h = (i ^ seed << 40).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 32;
    let key = h % keys;
    if (h >> 40).is_multiple_of(4) {
        Op::Remove(key)
    } else {
        Op::Upsert(key, i)
    }
}

pub fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

/// The value of version `version`: 8–23 bytes inline, or 80 (a record pointer) every ninth.
pub fn value(version: u64) -> Vec<u8> {
    let len = if version.is_multiple_of(9) {
        80
    } else {
        8 + (version % 16) as usize
    };
    (0..len)
        .map(|j| (version as u8).wrapping_add(j as u8))
        .collect()
}

pub fn apply(model: &mut BTreeMap<u64, u64>, op: Op) {
    match op {
        Op::Upsert(k, v) => {
            model.insert(k, v);
        }
        Op::Remove(k) => {
            model.remove(&k);
        }
    }
}
