//! Redis's collection types (lists, sets, hashes, sorted sets, streams) laid out in the
//! store's one ordered keyspace (issue 6; docs/PROTOCOL.md "Collections"). Masstree serves
//! one flat ordered map (masstree.md §3); a collection is a contiguous key range of it, so
//! its members are read with one range scan and removed with one range removal.
//!
//! Layout (every reserved key begins with byte 0xFF, which user keys may not):
//! - string keys are raw store keys, so `forest get/scan DIR` and the server agree;
//! - type entry: `FF 't' <userkey>` -> [`Meta`]: kind byte, element count, two numbers
//!   (a list's head and tail sequence, a stream's last id);
//! - members: `FF 'm' <u32 BE len(userkey)> <userkey> <suffix>`; the length makes one
//!   collection's members a range that no other key's members enter. Suffixes: a list's
//!   signed sequence number ([`seq_bytes`]), a set's member, a hash's field, a sorted set's
//!   `'o' <score, order-preserving> <member>` (empty value) and `'n' <member>` (value: the
//!   score), a stream's `<ms BE> <seq BE>` id (and after every id, behind 16 bytes 0xFF, its
//!   state and consumer groups: `cmd::stream`'s module doc; a stream's count is its
//!   entries + 1, so an emptied stream keeps its state entry and stays, as Redis's does).
//!
//! Invariants:
//! - a user key is a string or a collection, never both: a collection is created only
//!   while its key holds no string, under its stripe lock ([`Collections::lock`]);
//! - a collection's type entry exists exactly while it has at least one member (the last
//!   removal removes the type entry, as Redis deletes empty collections);
//! - a list's members are the sequence numbers `head..tail`, with no gaps (only the ends
//!   change: LPUSH/LPOP at the head, RPUSH/RPOP at the tail);
//! - `live` counts type entries and `reserved` every store entry under 0xFF but the strings
//!   with a deadline (`FF 'x'`, [`crate::expiry`]); both change
//!   only by what a write reports it changed, under the key's stripe lock.
//!
//! Choices: every read-modify-write of one collection holds a stripe lock (a striped mutex
//! array keyed by a hash of the user key), so two LPUSHes to one list never lose an element;
//! the store makes each entry atomic and durable, the lock makes the command atomic against
//! other commands on the same key (a reader of single entries takes no lock).
//!
//! Every string write (SET, MSET, SETNX, GETSET, INCR, APPEND, MSETNX) also holds its key's
//! stripe lock, so a string write and the creation of a collection under the same name are
//! ordered, and MSETNX, which holds the stripes of all its keys, is all or nothing. String
//! commands read the type entry only while `live` > 0 (GET only on a miss), so strings cost
//! one uncontended lock and nothing else until the first collection exists.
//!
//! Crashes: a command's entries are one atomic batch in the store (`cmd::coll`'s units), so
//! recovery keeps a command whole or not at all; [`repair`] still mends stores written
//! before commands were atomic, before the server listens.

use std::hash::{BuildHasher, Hasher};
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicI64, Ordering};

use forest_core::hash::{fold_words, GOLDEN};
use forest_core::Order;
use forest_store::Store;
use parking_lot::{ReentrantMutex, ReentrantMutexGuard};

/// A held stripe lock ([`Collections::lock`]).
pub type StripeGuard<'a> = ReentrantMutexGuard<'a, ()>;

/// The first byte of every reserved key.
pub const RESERVED_BYTE: u8 = 0xff;
/// Tag of the type entries, after [`RESERVED_BYTE`].
pub const TYPE_TAG: u8 = b't';
/// Tag of the member entries, after [`RESERVED_BYTE`].
pub const MEMBER_TAG: u8 = b'm';
/// Stripe locks: enough that unrelated keys rarely share one among thousands of clients,
/// few enough to cost 8 KiB.
const LOCK_STRIPE_COUNT: usize = 1024;
/// kind (1) + count (8) + a (8) + b (8).
const META_BYTES: usize = 25;

/// A collection's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    List,
    Set,
    Hash,
    ZSet,
    Stream,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::List => b'l',
            Kind::Set => b's',
            Kind::Hash => b'h',
            Kind::ZSet => b'z',
            Kind::Stream => b'x',
        }
    }

    fn from_byte(byte: u8) -> Option<Kind> {
        Some(match byte {
            b'l' => Kind::List,
            b's' => Kind::Set,
            b'h' => Kind::Hash,
            b'z' => Kind::ZSet,
            b'x' => Kind::Stream,
            _ => return None,
        })
    }

    /// TYPE's answer.
    pub fn name(self) -> &'static str {
        match self {
            Kind::List => "list",
            Kind::Set => "set",
            Kind::Hash => "hash",
            Kind::ZSet => "zset",
            Kind::Stream => "stream",
        }
    }
}

/// A type entry's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    /// Members (a sorted set's: member count, not entry count; a stream's: entries + 1,
    /// its state entry).
    pub count: u64,
    /// A list's head (first sequence number); a stream's last id's ms.
    pub a: i64,
    /// A list's tail (one past the last sequence number); a stream's last id's seq.
    pub b: i64,
}

impl Meta {
    pub fn new(kind: Kind) -> Self {
        Self {
            kind,
            count: 0,
            a: 0,
            b: 0,
        }
    }

    pub fn encode(&self) -> [u8; META_BYTES] {
        let mut out = [0u8; META_BYTES];
        out[0] = self.kind.byte();
        out[1..9].copy_from_slice(&self.count.to_be_bytes());
        out[9..17].copy_from_slice(&self.a.to_be_bytes());
        out[17..25].copy_from_slice(&self.b.to_be_bytes());
        out
    }

    /// None for bytes no forest wrote.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; META_BYTES] = bytes.try_into().ok()?;
        let word = |i: usize| -> Option<[u8; 8]> { bytes[i..i + 8].try_into().ok() };
        Some(Self {
            kind: Kind::from_byte(bytes[0])?,
            count: u64::from_be_bytes(word(1)?),
            a: i64::from_be_bytes(word(9)?),
            b: i64::from_be_bytes(word(17)?),
        })
    }
}

/// `FF 't' <userkey>`.
pub fn type_key(user: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(user.len() + 2);
    key.extend_from_slice(&[RESERVED_BYTE, TYPE_TAG]);
    key.extend_from_slice(user);
    key
}

/// `FF 'm' <u32 BE len> <userkey>`: every member key of `user` begins with this, and no
/// other key does. Keys longer than u32 are refused by the store's key limit before this.
pub fn member_prefix(user: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(user.len() + 6 + 16);
    member_prefix_into(user, &mut key);
    key
}

/// [`member_prefix`] appended to `key` (a pooled buffer).
pub fn member_prefix_into(user: &[u8], key: &mut Vec<u8>) {
    let len = u32::try_from(user.len()).unwrap_or(u32::MAX);
    key.extend_from_slice(&[RESERVED_BYTE, MEMBER_TAG]);
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(user);
}

/// The member key of `user` with `suffix` appended.
pub fn member_key(prefix: &[u8], suffix: &[&[u8]]) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + suffix.iter().map(|s| s.len()).sum::<usize>());
    key.extend_from_slice(prefix);
    for part in suffix {
        key.extend_from_slice(part);
    }
    key
}

/// A signed sequence number, big-endian with the sign bit flipped, so byte order is
/// numeric order.
pub fn seq_bytes(seq: i64) -> [u8; 8] {
    ((seq as u64) ^ (1 << 63)).to_be_bytes()
}

/// A score, order-preserving as 8 bytes: positive numbers get the sign bit set, negative
/// ones are inverted (so larger magnitudes sort lower). -0 is stored as 0.
pub fn score_bytes(score: f64) -> [u8; 8] {
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    ordered.to_be_bytes()
}

/// The inverse of [`score_bytes`].
pub fn score_from(bytes: [u8; 8]) -> f64 {
    let ordered = u64::from_be_bytes(bytes);
    let bits = if ordered >> 63 == 1 {
        ordered & !(1 << 63)
    } else {
        !ordered
    };
    f64::from_bits(bits)
}

/// The stripe hash of `user` under the process's `seed`: a folded 64×64→128 multiply of each
/// 8-byte word (xored with the seed) by the running state, then murmur3's 64-bit finaliser. A
/// collection command hashes its key about five times (lock, meta cache get, forget and put);
/// SipHash there was ~4 % of a list push's instructions (session 14's callgrind). The seed
/// enters every word's multiply, not only the start: with a linear multiply-rotate, chosen keys
/// shared a stripe under every seed (review rev-lists14 F1). A poor spread would cost
/// contention, never correctness.
fn stripe_hash(seed: u64, user: &[u8]) -> u64 {
    let fold = |a: u64, b: u64| {
        let p = u128::from(a) * u128::from(b);
        (p as u64) ^ ((p >> 64) as u64)
    };
    fold_words(seed, user, |h, word| fold(word ^ seed, h ^ GOLDEN))
}

/// The server's collection state: stripe locks and the two counts.
#[derive(Debug)]
pub struct Collections {
    /// Re-entrant: EXEC holds the stripes of all its commands' keys while each command
    /// takes its own stripe again on the same thread (`cmd::multi`).
    locks: Box<[ReentrantMutex<()>]>,
    /// The stripe hash's per-process key ([`stripe_hash`]).
    seed: u64,
    /// Type entries, plus collections being created right now (so a SET racing with a
    /// creation takes the checked path).
    live: AtomicI64,
    /// Store entries under [`RESERVED_BYTE`], less the server's own
    /// ([`Self::server_entries`]).
    reserved: AtomicI64,
    /// The server's own entries under [`RESERVED_BYTE`] (`expiry::layout`'s: the key
    /// layout), counted at start; no command writes or removes them.
    server: i64,
    /// Type entries of recently written collections, by stripe (`crate::meta_cache`).
    metas: crate::meta_cache::MetaCache,
}

impl Collections {
    /// Counts what the store holds under the reserved byte (one scan of that range at
    /// start: proportional to the collections' entries, not to the string keys).
    pub fn recount(store: &Store) -> Self {
        let (mut live, mut reserved, mut server) = (0i64, 0i64, 0i64);
        store.scan(
            Bound::Included(&[RESERVED_BYTE][..]),
            Bound::Unbounded,
            Order::Ascending,
            &mut |key, _| {
                // Strings with a deadline (`FF 'x'`) are keys, not reserved entries.
                if crate::expiry::layout::is_server_entry(key) {
                    server += 1;
                } else if key.get(1) != Some(&crate::expiry::STRING_TAG) {
                    reserved += 1;
                }
                if key.get(1) == Some(&TYPE_TAG) {
                    live += 1;
                }
                ControlFlow::Continue(())
            },
        );
        Self {
            locks: (0..LOCK_STRIPE_COUNT)
                .map(|_| ReentrantMutex::new(()))
                .collect(),
            seed: std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
            live: AtomicI64::new(live),
            reserved: AtomicI64::new(reserved),
            server,
            metas: crate::meta_cache::MetaCache::new(LOCK_STRIPE_COUNT),
        }
    }

    fn stripe(&self, user: &[u8]) -> usize {
        (stripe_hash(self.seed, user) % LOCK_STRIPE_COUNT as u64) as usize
    }

    /// The stripe lock of `user`. A caller holds at most one stripe lock, except through
    /// [`Self::lock_many`] and [`Self::lock_all`] (EXEC), under which a command takes its
    /// own keys' stripes again (re-entrant, same thread).
    pub fn lock(&self, user: &[u8]) -> StripeGuard<'_> {
        self.locks[self.stripe(user)].lock()
    }

    /// The stripe locks of all `users` (MSETNX), each stripe once, in stripe order: two such
    /// callers take common stripes in the same order, and every other caller holds one
    /// stripe and waits for none while holding it, so no cycle of waits can form.
    pub fn lock_many<'k>(&self, users: impl Iterator<Item = &'k [u8]>) -> Vec<StripeGuard<'_>> {
        let mut stripes: Vec<usize> = users.map(|u| self.stripe(u)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes.into_iter().map(|i| self.locks[i].lock()).collect()
    }

    /// Every stripe lock, in stripe order (an EXEC whose commands name no keys up front:
    /// KEYS, SCAN, FLUSHDB, the FOREST ranges): no other write runs while it is held.
    pub fn lock_all(&self) -> Vec<StripeGuard<'_>> {
        self.locks.iter().map(|l| l.lock()).collect()
    }

    /// `user`'s type entry as the store holds it, if the cache knows it
    /// (`crate::meta_cache`).
    pub fn cached_meta(&self, user: &[u8]) -> Option<Meta> {
        self.metas.get(self.stripe(user), user)
    }

    /// Notes that the store now holds `meta` at `user`'s type key. Precondition: `user`'s
    /// stripe lock is held and the write is visible.
    pub(crate) fn cache_meta(&self, user: &[u8], meta: Meta) {
        self.metas.put(self.stripe(user), user, meta);
    }

    /// Forgets `user`'s cached type entry: a write of it was decided or applied.
    pub(crate) fn forget_meta(&self, user: &[u8]) {
        self.metas.forget(self.stripe(user), user);
    }

    /// The meta cache, for tests.
    pub fn meta_cache(&self) -> &crate::meta_cache::MetaCache {
        &self.metas
    }

    /// Whether any collection may exist: string commands check types only then.
    pub fn any(&self) -> bool {
        self.live.load(Ordering::SeqCst) > 0
    }

    /// Collection keys.
    pub fn live_count(&self) -> i64 {
        self.live.load(Ordering::SeqCst).max(0)
    }

    /// Store entries under the reserved byte.
    pub fn reserved_count(&self) -> i64 {
        self.reserved.load(Ordering::SeqCst).max(0)
    }

    /// The server's own store entries under the reserved byte (not keys, not collections').
    pub fn server_entries(&self) -> i64 {
        self.server
    }

    pub(crate) fn add_live(&self, delta: i64) {
        self.live.fetch_add(delta, Ordering::SeqCst);
    }

    pub(crate) fn add_reserved(&self, delta: i64) {
        self.reserved.fetch_add(delta, Ordering::SeqCst);
    }

    /// A random number (SPOP's choice), from the process's random hash keys.
    pub fn random(&self) -> u64 {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    }
}

/// What [`repair`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Type entries rewritten with the counted element count, or removed (no members).
    pub metas_fixed: u64,
    /// Member entries of a collection removed: outside a list's `head..tail`, a sorted
    /// set's by-score entry that its by-member entry does not confirm, or malformed.
    pub members_removed: u64,
    /// Sorted-set by-score entries added for by-member entries that lacked one.
    pub members_added: u64,
}

/// One collection's members seen so far in [`repair`]'s scan.
struct Seen {
    user: Vec<u8>,
    meta: Option<Meta>,
    count: u64,
    /// The metadata changed (a stream's last id below a member's id).
    dirty: bool,
    /// A stream's state entry was seen (streams written before consumer groups had none).
    stream_state: bool,
    /// A sorted set's by-member entries not yet matched by a by-score entry ('n' sorts
    /// before 'o', so all of them come first).
    scores: std::collections::HashMap<Vec<u8>, [u8; 8]>,
}

/// Makes the collections consistent after a crash, before the server serves (run by
/// [`crate::Server::open`]). Since issue 12 a collection command's entries are one atomic
/// batch; in a store written before that they were separate log records, so recovery (a
/// prefix of the history) may hold part of one command. The commands wrote in
/// an order whose every prefix is harmless for reads (a list's new member before its
/// metadata, a popped member after it), and this pass restores the rest: element counts,
/// a list's unreachable members, a stream's last id, and a sorted set's two entries per
/// member. It changes only collections whose type entry it can read; member entries
/// without one are left (a collection created under that name clears them). One scan of
/// the reserved range; memory: the type entries plus the largest sorted set's members.
pub fn repair(store: &Store) -> forest_core::Result<RepairReport> {
    let mut metas: std::collections::HashMap<Vec<u8>, Meta> = std::collections::HashMap::new();
    let types_start = [RESERVED_BYTE, TYPE_TAG];
    let types_end = [RESERVED_BYTE, TYPE_TAG + 1];
    // Fallible: a scan cut by a page that cannot be read would make every collection not
    // reached look memberless, and this pass would delete it (review rev-lfix F1).
    store.try_scan(
        Bound::Included(&types_start[..]),
        Bound::Excluded(&types_end[..]),
        Order::Ascending,
        &mut |key, value| {
            // A type entry forest did not write is left alone (commands report it).
            if let Some(meta) = Meta::decode(value) {
                metas.insert(key[2..].to_vec(), meta);
            }
            ControlFlow::Continue(())
        },
    )?;
    let mut removes: Vec<Vec<u8>> = Vec::new();
    let mut puts: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut report = RepairReport::default();
    let mut current: Option<Seen> = None;
    let finish = |seen: Seen,
                  metas: &mut std::collections::HashMap<Vec<u8>, Meta>,
                  puts: &mut Vec<(Vec<u8>, Vec<u8>)>,
                  removes: &mut Vec<Vec<u8>>,
                  report: &mut RepairReport| {
        let Some(mut meta) = seen.meta else {
            return;
        };
        metas.remove(&seen.user);
        let prefix = member_prefix(&seen.user);
        for (member, score) in seen.scores {
            puts.push((member_key(&prefix, &[b"o", &score, &member]), Vec::new()));
            report.members_added += 1;
        }
        let mut count = seen.count;
        if meta.kind == Kind::Stream && !seen.stream_state && count > 0 {
            // A stream from before consumer groups: its state entry (entries-added: as
            // many as it holds; no deletion known) makes it one of today's.
            let mut state = [0u8; 24];
            state[..8].copy_from_slice(&count.to_be_bytes());
            puts.push((
                member_key(&prefix, &[&stream_state_suffix()]),
                state.to_vec(),
            ));
            report.members_added += 1;
            count += 1;
        }
        if meta.count != count || seen.dirty {
            report.metas_fixed += 1;
            if count == 0 {
                removes.push(type_key(&seen.user));
            } else {
                meta.count = count;
                puts.push((type_key(&seen.user), meta.encode().to_vec()));
            }
        }
    };
    let members_start = [RESERVED_BYTE, MEMBER_TAG];
    let members_end = [RESERVED_BYTE, MEMBER_TAG + 1];
    // Fallible: a scan cut by a page that cannot be read would make every collection not
    // reached look memberless, and this pass would delete it (review rev-lfix F1).
    store.try_scan(
        Bound::Included(&members_start[..]),
        Bound::Excluded(&members_end[..]),
        Order::Ascending,
        &mut |key, value| {
            let Some((user, suffix)) = split_member(key) else {
                return ControlFlow::Continue(());
            };
            if current.as_ref().is_none_or(|c| c.user != user) {
                if let Some(done) = current.take() {
                    finish(done, &mut metas, &mut puts, &mut removes, &mut report);
                }
                current = Some(Seen {
                    user: user.to_vec(),
                    meta: metas.get(user).copied(),
                    count: 0,
                    dirty: false,
                    stream_state: false,
                    scores: std::collections::HashMap::new(),
                });
            }
            let Some(seen) = current.as_mut() else {
                return ControlFlow::Continue(());
            };
            let keep = match seen.meta {
                // No collection: not ours to judge (a collection created under this name
                // clears its range first, see `cmd::coll::open_write`).
                None => return ControlFlow::Continue(()),
                Some(meta) => match meta.kind {
                    Kind::List => <[u8; 8]>::try_from(suffix).is_ok_and(|seq| {
                        let seq = (u64::from_be_bytes(seq) ^ (1 << 63)) as i64;
                        meta.a <= seq && seq < meta.b
                    }),
                    Kind::ZSet => match suffix.split_first() {
                        Some((b'n', member)) => match <[u8; 8]>::try_from(value) {
                            Ok(score) => {
                                seen.scores.insert(member.to_vec(), score);
                                true
                            }
                            Err(_) => false,
                        },
                        Some((b'o', rest)) if rest.len() >= 8 => {
                            let (score, member) = rest.split_at(8);
                            // A by-score entry counts nothing itself; it is kept only if
                            // its member's by-member entry names this score.
                            let confirmed = seen.scores.get(member).map(|s| &s[..]) == Some(score);
                            if confirmed {
                                seen.scores.remove(member);
                            } else {
                                removes.push(key.to_vec());
                                report.members_removed += 1;
                            }
                            return ControlFlow::Continue(());
                        }
                        _ => false,
                    },
                    Kind::Stream => match suffix.len() {
                        16 => {
                            // Ids only grow: the last id must not be below a stored one.
                            let id = (
                                u64::from_be_bytes(suffix[..8].try_into().unwrap_or_default()),
                                u64::from_be_bytes(suffix[8..].try_into().unwrap_or_default()),
                            );
                            if id > (meta.a as u64, meta.b as u64) {
                                seen.meta = Some(Meta {
                                    a: id.0 as i64,
                                    b: id.1 as i64,
                                    ..meta
                                });
                                seen.dirty = true;
                            }
                            true
                        }
                        // The state entry (`cmd::stream`): counted, as the stream's count
                        // is its entries + 1.
                        _ if suffix == stream_state_suffix() => {
                            seen.stream_state = true;
                            true
                        }
                        // Group records, consumers and PELs: kept, not counted.
                        n if n > 16 && suffix[..16] == [0xff; 16] => {
                            return ControlFlow::Continue(());
                        }
                        _ => false,
                    },
                    Kind::Set | Kind::Hash => true,
                },
            };
            if keep {
                seen.count += 1;
            } else {
                removes.push(key.to_vec());
                report.members_removed += 1;
            }
            ControlFlow::Continue(())
        },
    )?;
    if let Some(done) = current.take() {
        finish(done, &mut metas, &mut puts, &mut removes, &mut report);
    }
    // Type entries whose collection has no member left.
    for user in metas.keys() {
        removes.push(type_key(user));
        report.metas_fixed += 1;
    }
    for key in &removes {
        store.remove(key)?;
    }
    for (key, value) in &puts {
        store.upsert(key, value)?;
    }
    Ok(report)
}

/// The member suffix of a stream's state entry (`cmd::stream`'s layout): 16 bytes 0xFF
/// and `'s'`.
fn stream_state_suffix() -> [u8; 17] {
    let mut suffix = [0xff; 17];
    suffix[16] = b's';
    suffix
}

/// A member key's user key and suffix; None if it is not one.
fn split_member(key: &[u8]) -> Option<(&[u8], &[u8])> {
    let len: [u8; 4] = key.get(2..6)?.try_into().ok()?;
    let len = u32::from_be_bytes(len) as usize;
    let user = key.get(6..6 + len)?;
    Some((user, &key[6 + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the stripe hash spreads keys over the stripes like a random function and depends
    // on the seed and on every byte. Method: 20,480 keys of one shape (`key:N`, the shape of
    // redis-benchmark's) must reach nearly every stripe with no stripe over 3x its share;
    // keys differing in one byte, or of different lengths, differ.
    #[test]
    fn stripe_hash_spreads_keys() {
        let seed = 0x1234_5678_9abc_def0;
        let mut load = vec![0u32; LOCK_STRIPE_COUNT];
        let keys = 20 * LOCK_STRIPE_COUNT;
        for i in 0..keys {
            let key = format!("key:{i:012}");
            load[(stripe_hash(seed, key.as_bytes()) % LOCK_STRIPE_COUNT as u64) as usize] += 1;
        }
        let used = load.iter().filter(|&&n| n > 0).count();
        assert!(used >= LOCK_STRIPE_COUNT - 2, "{used} stripes used");
        let max = load.iter().copied().max().unwrap_or(0);
        assert!(max <= 60, "busiest stripe {max}, share 20");
        assert_ne!(
            stripe_hash(seed, b"mylist"),
            stripe_hash(seed + 1, b"mylist")
        );
        assert_ne!(stripe_hash(seed, b"mylist"), stripe_hash(seed, b"mylisu"));
        assert_ne!(stripe_hash(seed, b"a"), stripe_hash(seed, b"a\0"));
        assert_ne!(stripe_hash(seed, b""), stripe_hash(seed, b"\0"));
    }

    // Review rev-lists14 F1. Goal: keys cannot be chosen to share a stripe without the seed
    // (`stripe_hash`'s doc). Method: two 16-byte keys, the second the first with bit 63 of its
    // first word and bit 28 of its second flipped: `(x ^ 2^63) * K = x * K + 2^63` for any odd
    // K, so after the rotate by 29 the states differ in bit 28 alone, which the second word
    // cancels, whatever the seed. Chained, 2^(n-1) keys of n words share one 64-bit hash.
    #[test]
    fn stripe_hash_collisions_need_the_seed() {
        let victim = *b"session:12345678";
        let mut attacker = victim;
        attacker[7] ^= 0x80; // bit 63 of word 0 (little-endian)
        attacker[8 + 3] ^= 0x10; // bit 28 of word 1
        assert_ne!(victim, attacker);
        let mut collided = 0;
        for i in 0..64u64 {
            let seed = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
                ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            if stripe_hash(seed, &victim) == stripe_hash(seed, &attacker) {
                collided += 1;
            }
        }
        // A keyed hash would collide on ~64/1024 stripes by chance, never on the full 64 bits.
        assert_eq!(
            collided, 0,
            "{collided} of 64 random seeds: full 64-bit collision"
        );
    }

    // Goal: the repair at start mends what a crash between one command's entries leaves.
    // Method: write such states straight to the store (a member without a type entry,
    // which must stay out of a later collection of that name, a list member past the tail, a set count too low, a sorted set's missing and stale
    // by-score entries, a stream's last id below a member), restart, read every type.
    #[test]
    fn repair_mends_cut_commands() {
        use crate::cmd::testing::*;
        use crate::frame::Frame;
        let mut h = Harness::new();
        h.run(&["RPUSH", "l", "a", "b"]);
        h.run(&["SADD", "s", "x"]);
        h.run(&["ZADD", "z", "1", "one"]);
        h.run(&["XADD", "x", "5-0", "f", "v"]);
        let store = &h.shared.store;
        let put = |key: Vec<u8>, value: &[u8]| store.upsert(&key, value).expect("upsert");
        put(member_key(&member_prefix(b"gone"), &[b"m"]), b"");
        put(
            member_key(&member_prefix(b"l"), &[&seq_bytes(2)]),
            b"past tail",
        );
        put(member_key(&member_prefix(b"s"), &[b"y"]), b"");
        put(
            member_key(&member_prefix(b"z"), &[b"n", b"two"]),
            &score_bytes(2.0),
        );
        put(
            member_key(&member_prefix(b"z"), &[b"o", &score_bytes(7.0), b"one"]),
            b"",
        );
        put(
            member_key(
                &member_prefix(b"x"),
                &[&9u64.to_be_bytes(), &0u64.to_be_bytes()],
            ),
            b"",
        );
        put(type_key(b"empty"), &Meta::new(Kind::Hash).encode());
        let mut h = h.restart();
        assert_eq!(h.run(&["LRANGE", "l", "0", "-1"]), bulks(&["a", "b"]));
        assert_eq!(h.run(&["RPUSH", "l", "c"]), Frame::Integer(3));
        assert_eq!(h.run(&["LRANGE", "l", "0", "-1"]), bulks(&["a", "b", "c"]));
        assert_eq!(h.run(&["SCARD", "s"]), Frame::Integer(2));
        assert_eq!(
            h.run(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]),
            Frame::Array(vec![
                bulk("one"),
                Frame::Double(1.0),
                bulk("two"),
                Frame::Double(2.0)
            ])
        );
        assert_eq!(h.run(&["ZCARD", "z"]), Frame::Integer(2));
        assert_eq!(h.run(&["XADD", "x", "9-*", "f", "v"]), bulk("9-1"));
        assert_eq!(h.run(&["KEYS", "*"]), bulks(&["l", "s", "x", "z"]));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(4));
        // The member without a collection stays out of a new collection of that name.
        assert_eq!(h.run(&["SADD", "gone", "z"]), Frame::Integer(1));
        assert_eq!(h.run(&["SMEMBERS", "gone"]), bulks(&["z"]));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(5));
        assert_eq!(
            repair(&h.shared.store).expect("repair"),
            RepairReport::default()
        );
    }

    // Goal: sequence numbers and scores sort bytewise as numbers do, and scores round-trip.
    // Method: sorted sample values compared by their encodings.
    #[test]
    fn encodings_keep_order() {
        let seqs = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for pair in seqs.windows(2) {
            assert!(seq_bytes(pair[0]) < seq_bytes(pair[1]), "{pair:?}");
        }
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -1e-300,
            0.0,
            1e-300,
            1.0,
            3.5,
            f64::INFINITY,
        ];
        for pair in scores.windows(2) {
            assert!(score_bytes(pair[0]) < score_bytes(pair[1]), "{pair:?}");
        }
        for s in scores {
            assert_eq!(score_from(score_bytes(s)), s);
        }
        assert_eq!(score_bytes(-0.0), score_bytes(0.0));
        let meta = Meta {
            kind: Kind::Stream,
            count: 3,
            a: -4,
            b: i64::MAX,
        };
        assert_eq!(Meta::decode(&meta.encode()), Some(meta));
        assert_eq!(Meta::decode(b"short"), None);
    }
}
