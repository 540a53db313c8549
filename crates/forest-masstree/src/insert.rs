//! Puts (§4.6.1–4.6.3): updates swap the value pointer in place (readers see the old or the
//! new block), inserts publish a new key with one permutation store (or, without the
//! permuter, shift the node's slots with it marked inserting), and a long key whose slice
//! collides with another long key moves both into a new layer. Without suffix storage
//! ([`crate::config::SuffixStorage::Layers`]) every key longer than its slice goes into a
//! layer at once.

use std::borrow::Cow;

use forest_core::sync::atomic::Ordering;
use forest_core::Result;

use crate::block::{SuffixStorage, Value, ValueKind};
use crate::border::{Found, NewSlot};
use crate::key::{class_of, slice_of, KEYLEN_SUFFIX, SLICE_BYTES};
use crate::nodeversion::DELETED;
use crate::Masstree;

/// What a put does when the key is present or absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutMode {
    /// Only if absent.
    Insert,
    /// Always.
    Upsert,
    /// Only if present.
    Update,
}

/// Stores `value` under `key` as `mode` says. Returns whether it wrote.
pub fn put<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    key: &[u8],
    value: &[u8],
    mode: PutMode,
) -> bool {
    put_with(tree, key, mode, ValueKind::Plain, |_| {
        Ok(Cow::Borrowed(value))
    })
    .unwrap_or(false)
}

/// Stores under `key`, as `mode` says, a value of `kind` whose bytes `make` builds from the
/// current value (`None` when absent), called once with the key's border node locked, so the
/// new value replaces exactly the old one it was built from (§4.7's copy-on-write rows). An
/// error from `make` changes nothing. Returns whether it wrote.
pub fn put_with<'v, const W: usize, const F: usize, M>(
    tree: &Masstree<W, F>,
    key: &[u8],
    mode: PutMode,
    kind: ValueKind,
    mut make: M,
) -> Result<bool>
where
    M: FnMut(Option<Value<'_>>) -> Result<Cow<'v, [u8]>>,
{
    let guard = tree.pin();
    let mut root = tree.root(&guard);
    let mut rest = key;
    loop {
        let slice = slice_of(rest);
        let class = class_of(rest);
        let (mut n, mut v) = crate::layer::find_border(tree, root, slice, &guard);
        if class == KEYLEN_SUFFIX {
            // A key longer than its slice may live in a layer below. Its link is followed as a
            // get follows it (Fig. 7: read, then validate the version), without the lock: only
            // the node that holds the key's own slot is locked, so updates of keys in layers
            // leave the upper layers' border nodes clean in every cache (masstree-beta and
            // masstree-rs descend the same way). A layer removed meanwhile is met below as a
            // deleted node, and the put starts over, as after an unlocked layer step.
            let link = loop {
                if v & DELETED != 0 {
                    break None;
                }
                let link = n.layer_for(slice, tree.config.search, &guard);
                if n.base.version.has_changed(v) {
                    tree.counters.retries.incr();
                    (n, v) = crate::layer::walk_right(n, slice, &guard);
                    continue;
                }
                break link.flatten();
            };
            if let Some(link) = link {
                forest_core::pause::pause_point("put:layer-link-read");
                root = link.node();
                rest = &rest[SLICE_BYTES..];
                continue;
            }
        }
        let Some(n) = crate::layer::lock_border(tree, n, v, slice, &guard) else {
            // A removed node or layer (§4.6.5): nothing was written yet; start over.
            root = tree.root(&guard);
            rest = key;
            continue;
        };
        match n.find_locked(slice, class, rest, tree.config.search, &guard) {
            Found::Exact(_, s) => {
                if mode == PutMode::Insert {
                    n.base.version.unlock();
                    return Ok(false);
                }
                let cur = n.value[s].load(Ordering::Relaxed, &guard);
                let value = match make(cur.map(crate::block::value)) {
                    Ok(v) => v,
                    Err(e) => {
                        n.base.version.unlock();
                        return Err(e);
                    }
                };
                let block = crate::block::new_value(
                    crate::border::suffix_of(rest),
                    Value {
                        kind,
                        bytes: &value,
                    },
                    tree.config.suffix,
                );
                // Readers see the old block or the new one; the old one is retired.
                n.value[s].replace(Some(block), Ordering::Release, &guard);
                n.base.version.unlock();
                return Ok(true);
            }
            Found::Layer(s) => {
                let link = n.layer[s].load(Ordering::Acquire, &guard);
                n.base.version.unlock();
                root = link.expect("a locked layer slot has its link").node();
                rest = &rest[SLICE_BYTES..];
            }
            Found::Conflict(s) => {
                if mode == PutMode::Update {
                    n.base.version.unlock();
                    return Ok(false);
                }
                root = crate::layer::make_new_layer(tree, n, s, &guard);
                n.base.version.unlock();
                rest = &rest[SLICE_BYTES..];
            }
            Found::Absent(pos) => {
                if mode == PutMode::Update {
                    n.base.version.unlock();
                    return Ok(false);
                }
                let value = match make(None) {
                    Ok(v) => v,
                    Err(e) => {
                        n.base.version.unlock();
                        return Err(e);
                    }
                };
                let value = Value {
                    kind,
                    bytes: &value,
                };
                let new = if tree.config.suffix == SuffixStorage::Layers && rest.len() > SLICE_BYTES
                {
                    // No suffix storage: the key's bytes past this slice go into a new layer
                    // (a chain of one-key layers), linked from here in one step.
                    NewSlot::Layer {
                        slice,
                        link: crate::layer::new_layer_chain(
                            tree,
                            &rest[SLICE_BYTES..],
                            value,
                            &guard,
                        ),
                    }
                } else {
                    NewSlot::Key { rest, value }
                };
                if n.permutation().size() < W {
                    n.insert_at(pos, new, &tree.config, &guard);
                    n.base.version.unlock();
                } else {
                    crate::split::split_insert(tree, n, pos, new, &guard);
                }
                return Ok(true);
            }
        }
    }
}
