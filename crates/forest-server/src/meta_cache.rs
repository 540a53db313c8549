//! The type entries of recently written collections, kept in memory per stripe lock
//! (issue 19), so that a collection command (LPUSH, SADD, HSET...) does not read its type
//! entry back from the store each time.
//!
//! Invariant: an entry's metadata is, at every instant, exactly what the store holds at that
//! collection's type key; an entry that might not be is marked unknown. It holds because
//! - an entry is filled only by [`crate::cmd::coll`]'s `finish`, after its unit's batch was
//!   written and is visible, while the key's stripe lock is still held;
//! - every write of a type key goes through `Ctx` and calls `Ctx::touched_type_entry` (the
//!   blocking commands' hook) when it is decided or applied, under the key's stripe lock,
//!   which forgets the entry; a unit decided but never written (a failed store, EXEC's
//!   unit that ends in an error) thus leaves it unknown, never stale;
//! - the store is written directly only at start (`collection::repair`,
//!   `expiry::repair`), before the cache has any entry; a restart starts it empty.
//!
//! A reader uses an entry only when its own unit decided nothing for that type key (else
//! the overlay wins). The deadline is not cached: expiry is checked as before.
//!
//! Bounded: [`SLOT_ENTRIES_MAX`] keys per stripe, keys up to [`CACHED_KEY_BYTES_MAX`].

use parking_lot::Mutex;

use crate::collection::Meta;

/// Collections remembered per stripe: the few hot keys a stripe's writers take turns on.
pub const SLOT_ENTRIES_MAX: usize = 4;
/// Longer keys are not cached, so the cache stays under
/// stripes x [`SLOT_ENTRIES_MAX`] x this many bytes of keys (4 MiB at 1,024 stripes).
pub const CACHED_KEY_BYTES_MAX: usize = 1024;

/// One stripe's entries: the key and its metadata, None while unknown. Oldest first.
type Slot = Vec<(Box<[u8]>, Option<Meta>)>;

/// The cache: one slot per stripe lock ([`crate::collection::Collections::lock`]).
#[derive(Debug)]
pub struct MetaCache {
    slots: Box<[Mutex<Slot>]>,
}

impl MetaCache {
    pub fn new(stripes: usize) -> Self {
        Self {
            slots: (0..stripes).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// `user`'s metadata as the store holds it, if known.
    pub fn get(&self, stripe: usize, user: &[u8]) -> Option<Meta> {
        let slot = self.slots[stripe].lock();
        slot.iter().find(|(k, _)| &k[..] == user).and_then(|e| e.1)
    }

    /// Records that the store now holds `meta` at `user`'s type key. Precondition: `user`'s
    /// stripe lock is held and the write that put it there is visible.
    pub fn put(&self, stripe: usize, user: &[u8], meta: Meta) {
        if user.len() > CACHED_KEY_BYTES_MAX {
            return;
        }
        let mut slot = self.slots[stripe].lock();
        if let Some(entry) = slot.iter_mut().find(|(k, _)| &k[..] == user) {
            entry.1 = Some(meta);
            return;
        }
        if slot.len() >= SLOT_ENTRIES_MAX {
            slot.remove(0);
        }
        slot.push((user.into(), Some(meta)));
    }

    /// Forgets `user`'s metadata: its type key is being written. Keeps the key's place so
    /// that the write's own [`Self::put`] allocates nothing.
    pub fn forget(&self, stripe: usize, user: &[u8]) {
        let mut slot = self.slots[stripe].lock();
        if let Some(entry) = slot.iter_mut().find(|(k, _)| &k[..] == user) {
            entry.1 = None;
        }
    }

    /// How many keys the cache holds (known or not), for tests.
    pub fn len(&self) -> usize {
        self.slots.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collection::Kind;

    fn meta(count: u64) -> Meta {
        Meta {
            kind: Kind::List,
            count,
            a: -(count as i64),
            b: 0,
        }
    }

    // Goal: a slot keeps at most SLOT_ENTRIES_MAX keys (the oldest goes), forgets on
    // demand without losing the key's place, and skips keys over the length limit.
    // Method: fill one stripe past its bound, forget one, put it back, a long key.
    #[test]
    fn slot_bounds_and_forgetting() {
        let cache = MetaCache::new(2);
        for i in 0..=SLOT_ENTRIES_MAX {
            cache.put(1, format!("k{i}").as_bytes(), meta(i as u64 + 1));
        }
        assert_eq!(cache.len(), SLOT_ENTRIES_MAX);
        assert_eq!(cache.get(1, b"k0"), None, "the oldest key left");
        assert_eq!(cache.get(1, b"k1"), Some(meta(2)));
        assert_eq!(cache.get(0, b"k1"), None, "slots are per stripe");
        cache.forget(1, b"k1");
        assert_eq!(cache.get(1, b"k1"), None);
        assert_eq!(cache.len(), SLOT_ENTRIES_MAX, "forgetting keeps the place");
        cache.put(1, b"k1", meta(9));
        assert_eq!(cache.get(1, b"k1"), Some(meta(9)));
        let long = vec![b'x'; CACHED_KEY_BYTES_MAX + 1];
        cache.put(0, &long, meta(1));
        assert_eq!(cache.get(0, &long), None);
        assert!(!cache.is_empty());
    }
}

#[cfg(test)]
mod server_tests {
    use crate::cmd::testing::*;
    use crate::collection::{type_key, Meta};
    use crate::frame::Frame;

    fn int(n: i64) -> Frame {
        Frame::Integer(n)
    }

    /// The cache never disagrees with the store: a known entry is the stored type entry.
    fn check_cache(h: &Harness, user: &str) {
        let Some(cached) = h.shared.collections.cached_meta(user.as_bytes()) else {
            return;
        };
        let mut value = Vec::new();
        assert!(
            h.shared.store.get(&type_key(user.as_bytes()), &mut value),
            "{user}: cached {cached:?} but no type entry"
        );
        assert_eq!(Meta::decode(&value), Some(cached), "{user}");
    }

    fn list(h: &mut Harness, user: &str, expected: &[&str]) {
        assert_eq!(
            h.run(&["LRANGE", user, "0", "-1"]),
            bulks(expected),
            "{user}"
        );
        assert_eq!(h.run(&["LLEN", user]), int(expected.len() as i64), "{user}");
        check_cache(h, user);
    }

    // Goal: every writer of a collection's type entry other than the command that cached
    // it (MULTI/EXEC, a WATCH-aborted EXEC, DEL, RENAME, SET over it, FLUSHDB, expiry, a
    // restart, a script) leaves the meta cache right: no push lands on a stale head/tail.
    // Method: a list cached by LPUSH, each writer in turn, then a push and the exact list;
    // after each step the cached entry (if any) is compared with the stored type entry.
    #[test]
    fn every_writer_keeps_the_cache_right() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["LPUSH", "l", "a"]), int(1));
        assert!(
            h.shared.collections.cached_meta(b"l").is_some(),
            "a push caches"
        );
        check_cache(&h, "l");

        assert_eq!(h.run(&["MULTI"]), Frame::ok());
        h.run(&["LPUSH", "l", "b"]);
        assert_eq!(h.run(&["EXEC"]), Frame::Array(vec![int(2)]));
        assert_eq!(h.run(&["LPUSH", "l", "c"]), int(3));
        list(&mut h, "l", &["c", "b", "a"]);

        // A transaction that pops and pushes the same list, then more pushes outside.
        assert_eq!(h.run(&["MULTI"]), Frame::ok());
        h.run(&["RPOP", "l"]);
        h.run(&["RPUSH", "l", "z"]);
        h.run(&["LPOP", "l"]);
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![bulk("a"), int(3), bulk("c")])
        );
        assert_eq!(h.run(&["RPUSH", "l", "y"]), int(3));
        list(&mut h, "l", &["b", "z", "y"]);

        // WATCH-aborted: the queued push is never written.
        let mut other = h.shared.new_client("o".into(), "o".into(), None);
        assert_eq!(h.run(&["WATCH", "l"]), Frame::ok());
        assert_eq!(
            run_on(&h.shared, &mut other, &[b"RPUSH", b"l", b"x"]),
            int(4)
        );
        assert_eq!(h.run(&["MULTI"]), Frame::ok());
        h.run(&["LPUSH", "l", "never"]);
        assert_eq!(h.run(&["EXEC"]), Frame::NullArray);
        assert_eq!(h.run(&["LPUSH", "l", "w"]), int(5));
        list(&mut h, "l", &["w", "b", "z", "y", "x"]);

        assert_eq!(h.run(&["DEL", "l"]), int(1));
        assert_eq!(h.shared.collections.cached_meta(b"l"), None);
        assert_eq!(h.run(&["RPUSH", "l", "e"]), int(1));
        list(&mut h, "l", &["e"]);

        assert_eq!(h.run(&["RENAME", "l", "m"]), Frame::ok());
        assert_eq!(h.run(&["RPUSH", "l", "g"]), int(1));
        assert_eq!(h.run(&["RPUSH", "m", "f"]), int(2));
        list(&mut h, "l", &["g"]);
        list(&mut h, "m", &["e", "f"]);
        // RENAME over a cached list.
        assert_eq!(h.run(&["RENAME", "m", "l"]), Frame::ok());
        assert_eq!(h.run(&["RPUSH", "l", "h"]), int(3));
        list(&mut h, "l", &["e", "f", "h"]);

        // SET replaces the list: a push is then WRONGTYPE, and after DEL a new list.
        assert_eq!(h.run(&["SET", "l", "v"]), Frame::ok());
        assert!(matches!(h.run(&["RPUSH", "l", "i"]), Frame::Error(_)));
        assert_eq!(h.run(&["DEL", "l"]), int(1));
        assert_eq!(h.run(&["RPUSH", "l", "i", "j"]), int(2));

        assert_eq!(h.run(&["FLUSHDB"]), Frame::ok());
        assert_eq!(h.run(&["RPUSH", "l", "k"]), int(1));
        list(&mut h, "l", &["k"]);

        // Expiry: the expired list is gone for readers and writers alike.
        assert_eq!(h.run(&["RPUSH", "l", "k2"]), int(2));
        assert_eq!(h.run(&["PEXPIRE", "l", "1"]), int(1));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(h.run(&["LLEN", "l"]), int(0));
        assert_eq!(h.run(&["RPUSH", "l", "n"]), int(1));
        list(&mut h, "l", &["n"]);

        // A script's writes.
        assert_eq!(
            h.run(&["EVAL", "return redis.call('rpush', KEYS[1], 'p')", "1", "l"]),
            int(2)
        );
        assert_eq!(h.run(&["RPUSH", "l", "q"]), int(3));
        list(&mut h, "l", &["n", "p", "q"]);

        let mut h = h.restart();
        assert_eq!(
            h.shared.collections.meta_cache().len(),
            0,
            "a restart starts empty"
        );
        assert_eq!(h.run(&["RPUSH", "l", "r"]), int(4));
        list(&mut h, "l", &["n", "p", "q", "r"]);
    }

    // Goal: a set, hash or sorted set whose write changes nothing rewrites no type entry,
    // and its counts stay exact with the cache in use (and after a restart).
    // Method: repeated SADD/HSET/ZADD of the same members, then new ones and removals.
    #[test]
    fn unchanged_writes_and_counts() {
        let mut h = Harness::new();
        for _ in 0..3 {
            h.run(&["SADD", "s", "a"]);
            h.run(&["HSET", "h", "f", "v"]);
            h.run(&["ZADD", "z", "1", "m"]);
        }
        assert_eq!(h.run(&["SADD", "s", "a", "b"]), int(1));
        assert_eq!(h.run(&["HSET", "h", "f", "w", "g", "x"]), int(1));
        assert_eq!(h.run(&["ZADD", "z", "2", "m", "1", "n"]), int(1));
        assert_eq!(h.run(&["SREM", "s", "a"]), int(1));
        for (key, kind) in [("s", "SCARD"), ("h", "HLEN"), ("z", "ZCARD")] {
            assert_eq!(h.run(&[kind, key]), int(if key == "s" { 1 } else { 2 }));
            check_cache(&h, key);
        }
        assert_eq!(h.run(&["HGET", "h", "f"]), bulk("w"));
        assert_eq!(h.run(&["ZSCORE", "z", "m"]), Frame::Double(2.0));
        let reserved = h.shared.collections.reserved_count();
        let mut h = h.restart();
        assert_eq!(h.shared.collections.reserved_count(), reserved);
        assert_eq!(h.run(&["SCARD", "s"]), int(1));
        assert_eq!(h.run(&["HLEN", "h"]), int(2));
        assert_eq!(h.run(&["ZCARD", "z"]), int(2));
    }

    // Goal: concurrent pushers and movers on the same lists lose nothing with the cache.
    // Method: 2 threads; one LPUSHes to `a`, one RPOPLPUSHes `a` into `b` and RPUSHes to
    // `b`; then every element is in exactly one list and the counts match a restart's.
    #[test]
    fn concurrent_pushers_and_movers() {
        let h = Harness::new();
        let n = 400;
        std::thread::scope(|scope| {
            let shared = &h.shared;
            scope.spawn(move || {
                let mut client = shared.new_client("p".into(), "p".into(), None);
                for i in 0..n {
                    run_on(
                        shared,
                        &mut client,
                        &[b"LPUSH", b"a", format!("p{i}").as_bytes()],
                    );
                }
            });
            scope.spawn(move || {
                let mut client = shared.new_client("m".into(), "m".into(), None);
                for i in 0..n {
                    run_on(shared, &mut client, &[b"RPOPLPUSH", b"a", b"b"]);
                    run_on(
                        shared,
                        &mut client,
                        &[b"RPUSH", b"b", format!("m{i}").as_bytes()],
                    );
                }
            });
        });
        let mut h = h;
        let count = |h: &mut Harness, key: &str| match h.run(&["LLEN", key]) {
            Frame::Integer(n) => n,
            other => panic!("{other:?}"),
        };
        let (a, b) = (count(&mut h, "a"), count(&mut h, "b"));
        assert_eq!(a + b, 2 * n);
        let mut all = Vec::new();
        for key in ["a", "b"] {
            let Frame::Array(items) = h.run(&["LRANGE", key, "0", "-1"]) else {
                panic!("array expected");
            };
            all.extend(items);
            check_cache(&h, key);
        }
        let before = all.len();
        all.sort_by_key(|f| format!("{f:?}"));
        all.dedup();
        assert_eq!(all.len(), before, "an element in two places");
        assert_eq!(before as i64, 2 * n);
        let mut h = h.restart();
        assert_eq!((count(&mut h, "a"), count(&mut h, "b")), (a, b));
    }

    // rev-coll: more writers against the cache (LMOVE onto itself, RENAME/FLUSHDB/SET inside
    // EXEC, COPY, SMOVE, LMPOP, a script's DEL, active expiry, LSET's unchanged entry, a
    // stream emptied), checking the cache against the store and the counts against a restart.
    #[test]
    fn rev_more_writers_keep_the_cache_right() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["RPUSH", "l", "a", "b", "c"]), int(3));
        assert_eq!(h.run(&["LMOVE", "l", "l", "RIGHT", "LEFT"]), bulk("c"));
        assert_eq!(h.run(&["RPUSH", "l", "d"]), int(4));
        list(&mut h, "l", &["c", "a", "b", "d"]);
        assert_eq!(h.run(&["LSET", "l", "0", "C"]), Frame::ok());
        check_cache(&h, "l");
        assert_eq!(h.run(&["LPUSH", "l", "z"]), int(5));
        list(&mut h, "l", &["z", "C", "a", "b", "d"]);

        assert_eq!(h.run(&["MULTI"]), Frame::ok());
        h.run(&["RENAME", "l", "m"]);
        h.run(&["RPUSH", "m", "e"]);
        assert_eq!(h.run(&["EXEC"]), Frame::Array(vec![Frame::ok(), int(6)]));
        check_cache(&h, "l");
        check_cache(&h, "m");
        assert_eq!(h.run(&["RPUSH", "m", "f"]), int(7));
        assert_eq!(h.run(&["LPUSH", "l", "x"]), int(1));
        list(&mut h, "m", &["z", "C", "a", "b", "d", "e", "f"]);
        list(&mut h, "l", &["x"]);

        assert_eq!(h.run(&["MULTI"]), Frame::ok());
        h.run(&["RPUSH", "m", "g"]);
        h.run(&["FLUSHDB"]);
        h.run(&["RPUSH", "m", "h"]);
        h.run(&["EXEC"]);
        assert_eq!(h.run(&["RPUSH", "m", "i"]), int(2));
        list(&mut h, "m", &["h", "i"]);
        list(&mut h, "l", &[]);

        assert_eq!(h.run(&["MULTI"]), Frame::ok());
        h.run(&["RPUSH", "m", "j"]);
        h.run(&["SET", "m", "str"]);
        h.run(&["EXEC"]);
        assert!(matches!(h.run(&["RPUSH", "m", "k"]), Frame::Error(_)));
        assert_eq!(h.run(&["DEL", "m"]), int(1));
        assert_eq!(h.run(&["RPUSH", "m", "k"]), int(1));
        assert_eq!(h.run(&["COPY", "m", "n"]), int(1));
        assert_eq!(h.run(&["RPUSH", "n", "l"]), int(2));
        assert_eq!(h.run(&["RPUSH", "m", "z"]), int(2));
        list(&mut h, "m", &["k", "z"]);
        list(&mut h, "n", &["k", "l"]);
        assert_eq!(h.run(&["COPY", "n", "m", "REPLACE"]), int(1));
        assert_eq!(h.run(&["RPUSH", "m", "y"]), int(3));
        list(&mut h, "m", &["k", "l", "y"]);

        assert_eq!(
            h.run(&["LMPOP", "1", "m", "LEFT", "COUNT", "5"]),
            Frame::Array(vec![bulk("m"), bulks(&["k", "l", "y"])])
        );
        assert_eq!(h.run(&["RPUSH", "m", "q"]), int(1));
        list(&mut h, "m", &["q"]);
        assert_eq!(h.run(&["RPOPLPUSH", "m", "m"]), bulk("q"));
        assert_eq!(h.run(&["RPUSH", "m", "r"]), int(2));
        list(&mut h, "m", &["q", "r"]);

        assert_eq!(h.run(&["SADD", "s", "a", "b"]), int(2));
        assert_eq!(h.run(&["SMOVE", "s", "t", "a"]), int(1));
        assert_eq!(h.run(&["SADD", "s", "c"]), int(1));
        assert_eq!(h.run(&["SADD", "t", "c"]), int(1));
        assert_eq!(h.run(&["SCARD", "s"]), int(2));
        assert_eq!(h.run(&["SCARD", "t"]), int(2));
        check_cache(&h, "s");
        check_cache(&h, "t");
        assert!(matches!(h.run(&["SPOP", "t", "5"]), Frame::Array(v) if v.len() == 2));
        assert_eq!(h.run(&["SADD", "t", "z"]), int(1));
        assert_eq!(h.run(&["SCARD", "t"]), int(1));
        check_cache(&h, "t");

        assert_eq!(
            h.run(&[
                "EVAL",
                "redis.call('del', KEYS[1]); return redis.call('rpush', KEYS[1], 'p')",
                "1",
                "m"
            ]),
            int(1)
        );
        assert_eq!(h.run(&["RPUSH", "m", "s"]), int(2));
        list(&mut h, "m", &["p", "s"]);

        // Active expiry (not a reader's lazy one).
        assert_eq!(h.run(&["RPUSH", "e", "1", "2"]), int(2));
        assert_eq!(h.run(&["PEXPIRE", "e", "1"]), int(1));
        std::thread::sleep(std::time::Duration::from_millis(20));
        crate::cmd::expire_cycle(&h.shared, 100);
        assert_eq!(h.shared.collections.cached_meta(b"e"), None);
        assert_eq!(h.run(&["RPUSH", "e", "3"]), int(1));
        list(&mut h, "e", &["3"]);

        assert!(matches!(
            h.run(&["XADD", "x", "1-1", "f", "v"]),
            Frame::Bulk(_)
        ));
        assert_eq!(h.run(&["XDEL", "x", "1-1"]), int(1));
        assert_eq!(h.run(&["XLEN", "x"]), int(0));
        check_cache(&h, "x");
        assert!(matches!(
            h.run(&["XADD", "x", "2-1", "f", "v"]),
            Frame::Bulk(_)
        ));
        assert_eq!(h.run(&["XLEN", "x"]), int(1));
        check_cache(&h, "x");

        let reserved = h.shared.collections.reserved_count();
        let live = h.shared.collections.live_count();
        let mut h = h.restart();
        assert_eq!(
            h.shared.collections.reserved_count(),
            reserved,
            "reserved drifted"
        );
        assert_eq!(h.shared.collections.live_count(), live, "live drifted");
        list(&mut h, "m", &["p", "s"]);
    }
}
