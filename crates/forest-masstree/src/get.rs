//! The optimistic get of Fig. 7 (§4.6.4): no locks, no writes to shared memory; and a batch of
//! gets whose descents go in lock-step with prefetches (issue 15).
//!
//! The value is copied out between the version snapshot and its validation; when the border
//! node changed, the reader re-reads it, first walking right along `next` past splits
//! (`k ≥ lowkey(next)`), since splits move keys only to the right.
//!
//! A batch ([`get_many`]) hides the dependent cache misses of a descent behind the other keys'
//! (§4.2 prefetches a node before searching it; §6.2 measures it): it advances every key's
//! descent one node per round, prefetching the node each key goes to next, so the loads of a
//! level are in flight together. That first pass only finds, for each key, a border node of
//! the key's last layer that was responsible for its slice (lowkey ≤ slice, not deleted) at
//! some instant under the batch's pin; it answers nothing. A second pass then reads the keys
//! in order, each exactly as a single get reads once it holds a border node (walk right,
//! snapshot, look up, validate), so each answer is a single get's and key `i`'s read comes
//! after key `i - 1`'s. The hint is sound because lowkeys never change, splits move keys only
//! to the right and a removed node is marked deleted (then the get starts from the root).
//! Anything unusual in the first pass (a changed interior node, a torn child, a deleted node)
//! leaves the key without a hint: its get descends from the root.

use crate::block::Value;
use crate::border::{Lookup, Probe};
use crate::key::{class_of, slice_of, SLICE_BYTES};
use crate::node::{BorderRef, InteriorRef, Kind, NodeRef, TreeGuard};
use crate::nodeversion::DELETED;
use crate::Masstree;
use forest_core::sync::atomic::Ordering;

/// Keys whose descents one round of a batch advances together: more than a pipelined
/// client's usual batch (redis-benchmark's `-P 16`), and their prefetched nodes (5 lines
/// each) fit in L1 many times over. A longer batch goes in groups of this many.
const LOCKSTEP_KEYS_MAX: usize = 16;

/// Looks `key` up; on a hit, `out` holds the value.
pub fn get<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    key: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    get_with(tree, key, |v| {
        out.clear();
        out.extend_from_slice(v.bytes);
    })
}

/// Looks `key` up and calls `read` on the value block found; returns whether it was found.
/// `read` may run more than once (a validation failed after it), the last call being the
/// answer; a value block never changes once published, so each call sees one whole value.
pub fn get_with<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    key: &[u8],
    read: impl FnMut(Value<'_>),
) -> bool {
    let guard = tree.pin();
    get_pinned(tree, key, None, &guard, read)
}

/// [`get_with`] under the caller's pin, starting, when `hint` is given, at border node `b` of
/// the layer holding `key[offset..]` instead of at the root: `b` was found by a descent under
/// `guard` for that slice (see the module doc).
fn get_pinned<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    key: &[u8],
    hint: Option<(BorderRef<'g, W, F>, usize)>,
    guard: &'g TreeGuard<'_>,
    mut read: impl FnMut(Value<'g>),
) -> bool {
    let mut hint = hint;
    'top: loop {
        let mut root = tree.root(guard);
        let mut rest = key;
        'layer: loop {
            let (mut n, mut v) = match hint.take() {
                Some((b, offset)) => {
                    rest = &key[offset..];
                    crate::layer::walk_right(b, slice_of(rest), guard)
                }
                None => crate::layer::find_border(tree, root, slice_of(rest), guard),
            };
            let slice = slice_of(rest);
            let class = class_of(rest);
            loop {
                if v & DELETED != 0 {
                    // Removed node or removed layer (§4.6.5): the key's place is found anew
                    // from the top, since the layer itself may be gone.
                    tree.counters.restarts.incr();
                    continue 'top;
                }
                let found = n.lookup(slice, class, rest, tree.config.search, guard);
                let mut hit = false;
                if let Lookup::Value(Some(b)) = found {
                    read(crate::block::value(b));
                    hit = true;
                }
                if n.base.version.has_changed(v) {
                    // What we read may be torn or stale: re-read, after walking right past
                    // splits.
                    tree.counters.retries.incr();
                    (n, v) = crate::layer::walk_right(n, slice, guard);
                    continue;
                }
                match found {
                    Lookup::NotFound | Lookup::Value(_) => return hit,
                    Lookup::Layer(Some(p)) => {
                        root = p.node();
                        rest = &rest[SLICE_BYTES..];
                        continue 'layer;
                    }
                    // A validated layer slot has its link; wait as for an unstable one.
                    Lookup::Layer(None) | Lookup::Unstable => {
                        // A layer is being installed; the writer holds the node briefly.
                        tree.counters.retries.incr();
                        forest_core::sync::spin_loop();
                    }
                }
            }
        }
    }
}

/// Where one key of a batch's first pass stands.
#[derive(Clone, Copy)]
enum Step<'g, const W: usize, const F: usize> {
    /// At the (possibly stale) root of the layer holding `key[offset..]`.
    Layer(NodeRef<'g, W, F>),
    /// In interior node `inner` (snapshot `v`), going to `child`, which was prefetched.
    Child {
        inner: InteriorRef<'g, W, F>,
        v: u64,
        child: NodeRef<'g, W, F>,
    },
    /// Done: the border node of the key's last layer responsible for its slice at version
    /// `v`, and what a validated search of it found there.
    Probed {
        n: BorderRef<'g, W, F>,
        v: u64,
        probe: Probe<'g, W, F>,
    },
    /// Done: a border node of the key's last layer, responsible for its slice when seen.
    Found(BorderRef<'g, W, F>),
    /// Done without a hint: the get starts at the root.
    Root,
}

impl<const W: usize, const F: usize> Step<'_, W, F> {
    fn walking(&self) -> bool {
        matches!(self, Step::Layer(_) | Step::Child { .. })
    }
}

/// Looks every key of `keys` up (forest-core's `Index::get_many`): `visit` gets each key's
/// position and value in place (under the pin), in order. See the module doc.
pub fn get_many<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    keys: &[&[u8]],
    visit: &mut dyn FnMut(usize, Option<&[u8]>),
) {
    let guard = tree.pin();
    for (group, chunk) in keys.chunks(LOCKSTEP_KEYS_MAX).enumerate() {
        let base = group * LOCKSTEP_KEYS_MAX;
        let mut steps = [Step::Root; LOCKSTEP_KEYS_MAX];
        let mut offsets = [0usize; LOCKSTEP_KEYS_MAX];
        let mut walking = 0;
        for (step, key) in steps.iter_mut().zip(chunk) {
            if key.len() <= forest_core::KEY_BYTES_MAX {
                *step = Step::Layer(tree.root(&guard));
                walking += 1;
            }
        }
        while walking > 0 {
            walking = 0;
            for ((step, offset), key) in steps.iter_mut().zip(offsets.iter_mut()).zip(chunk) {
                if step.walking() {
                    *step = advance(tree, *step, key, offset, &guard);
                    walking += usize::from(step.walking());
                }
            }
        }
        for (i, key) in chunk.iter().enumerate() {
            if key.len() > forest_core::KEY_BYTES_MAX {
                visit(base + i, None);
                continue;
            }
            let rest = &key[offsets[i]..];
            let hint = match steps[i] {
                Step::Probed { n, v, probe } => match reuse(n, v, probe, rest, &guard) {
                    Some(found) => {
                        visit(base + i, found);
                        continue;
                    }
                    None => Some((n, offsets[i])),
                },
                Step::Found(n) => Some((n, offsets[i])),
                _ => None,
            };
            let mut value: &[u8] = &[];
            let hit = get_pinned(tree, key, hint, &guard, |v| value = v.bytes);
            visit(base + i, hit.then_some(value));
        }
    }
}

/// The second pass's answer from the first pass's search of `n` at version `v`, if the key's
/// state in `n` has not changed since (`Border::probe`'s doc): re-read now, in key order, so
/// the answer is the key's state at this read. None: it changed, the key is read as a get.
#[inline]
fn reuse<'g, const W: usize, const F: usize>(
    n: BorderRef<'g, W, F>,
    v: u64,
    probe: Probe<'g, W, F>,
    rest: &[u8],
    guard: &'g TreeGuard<'_>,
) -> Option<Option<&'g [u8]>> {
    let same = |perm: u64| n.permutation.load(Ordering::Acquire) == perm;
    match probe {
        Probe::Absent { perm } => (same(perm) && !n.base.version.has_changed(v)).then_some(None),
        Probe::Value {
            perm,
            slot,
            block,
            suffix,
        } => {
            let unchanged = same(perm)
                && n.value[slot]
                    .load_ref(Ordering::Acquire, guard)
                    .is_some_and(|now| now.same(block))
                && !n.base.version.has_changed(v);
            if !unchanged {
                return None;
            }
            let (key_suffix, value) = crate::block::entry(block.get());
            if suffix && key_suffix != crate::border::suffix_of(rest) {
                // Another key with this slice: the key is absent.
                return Some(None);
            }
            Some(Some(value.bytes))
        }
        Probe::Layer(_) | Probe::Other => None,
    }
}

/// One node of a key's first-pass descent (`find_border`'s step, without its retries): the
/// node `step` goes to next, prefetched, or where the key's pass ends.
#[inline]
fn advance<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    step: Step<'g, W, F>,
    key: &[u8],
    offset: &mut usize,
    guard: &'g TreeGuard<'_>,
) -> Step<'g, W, F> {
    let (n, v) = match step {
        Step::Layer(root) => crate::layer::climb(root, guard),
        Step::Child { inner, v, child } => {
            let cv = child.version.stable();
            if inner.base.version.has_changed(v) {
                // Hand-over-hand validation failed: the single get's retries decide.
                return Step::Root;
            }
            (child, cv)
        }
        done => return done,
    };
    if v & DELETED != 0 {
        return Step::Root;
    }
    let rest = &key[*offset..];
    let slice = slice_of(rest);
    match n.kind() {
        Kind::Interior(inner) => match inner.child_for(slice, tree.config.search, guard) {
            Some(child) => {
                if tree.config.prefetch {
                    crate::prefetch::node(child.as_ptr(), Masstree::<W, F>::PREFETCH_LINES);
                }
                Step::Child { inner, v, child }
            }
            None => Step::Root,
        },
        Kind::Border(b) => {
            if slice < b.lowkey {
                return Step::Root;
            }
            let probe = b.probe(slice, class_of(rest), tree.config.search, guard);
            if b.base.version.has_changed(v) {
                // The second pass reads it, walking right as a get does.
                return Step::Found(b);
            }
            match probe {
                Probe::Layer(link) => {
                    if tree.config.prefetch {
                        crate::prefetch::node(link.as_ptr(), Masstree::<W, F>::PREFETCH_LINES);
                    }
                    *offset += SLICE_BYTES;
                    Step::Layer(link.node())
                }
                Probe::Value { block, .. } => {
                    if tree.config.prefetch {
                        block.prefetch(1);
                    }
                    Step::Probed { n: b, v, probe }
                }
                Probe::Absent { .. } => Step::Probed { n: b, v, probe },
                Probe::Other => Step::Found(b),
            }
        }
    }
}
