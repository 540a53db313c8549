//! WATCH's registry: which clients watch which keys, and the one hook every write calls,
//! [`Watches::touched`] (Redis's `touchWatchedKey`, src/multi.c: a per-database map from a
//! key to the clients watching it; a write marks each of them dirty, and a dirty client's
//! EXEC answers a null reply).
//!
//! Who calls the hook: every write through `cmd::Ctx` (`upsert`, `insert`, `update`,
//! `remove`, `read_modify_write`, `write`, and a unit's decided writes), with the store key
//! written; a collection's reserved keys map back to the collection's name
//! ([`user_key_of`]). A write outside `Ctx` (an expiry deletion) calls
//! [`Watches::touched`] itself with the user key.
//!
//! Invariant: the hook runs once the write is visible to readers, while the writer still
//! holds the key's server stripe lock (`Collections::lock`); WATCH registers a key under
//! that lock, and EXEC checks its dirty flag while holding the stripes of every key it
//! watches. So a write either comes before the registration (and the client's reads after
//! WATCH see it) or marks the client dirty, and is seen by EXEC's check or ordered after
//! the whole EXEC. (Touching before the write is visible lost updates: a WATCH between the
//! touch and the write read the old value and was not marked.) Cost when nobody watches:
//! one atomic load per write.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::collection::{MEMBER_TAG, RESERVED_BYTE, TYPE_TAG};

/// One client's flag: a watched key was written since WATCH (Redis's CLIENT_DIRTY_CAS).
pub type DirtyFlag = Arc<AtomicBool>;

/// The clients watching one key.
type Watchers = Vec<(u64, DirtyFlag)>;

/// One shard of the registry: watched keys and their watchers.
type Shard = Mutex<HashMap<Vec<u8>, Watchers>>;

/// Shards of the registry: writes of unrelated keys rarely share one while clients watch.
const SHARD_COUNT: usize = 64;

/// The keys watched by every client.
#[derive(Debug)]
pub struct Watches {
    /// (key, client) pairs registered: writes skip the map while it is 0.
    count: AtomicUsize,
    shards: Box<[Shard]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for Watches {
    fn default() -> Self {
        Self {
            count: AtomicUsize::new(0),
            shards: (0..SHARD_COUNT).map(|_| Mutex::default()).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl Watches {
    /// Registers `client` as watching `key` (once per key).
    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[(self.hasher.hash_one(key) % SHARD_COUNT as u64) as usize]
    }

    pub fn watch(&self, client: u64, dirty: &DirtyFlag, key: &[u8]) -> bool {
        let mut keys = self.shard(key).lock();
        let list = keys.entry(key.to_vec()).or_default();
        if list.iter().any(|(id, _)| *id == client) {
            return false;
        }
        list.push((client, Arc::clone(dirty)));
        self.count.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Forgets `client`'s watches of `keys`.
    pub fn unwatch(&self, client: u64, keys: &[Vec<u8>]) {
        if keys.is_empty() {
            return;
        }
        for key in keys {
            let mut map = self.shard(key).lock();
            if let Some(list) = map.get_mut(key) {
                let before = list.len();
                list.retain(|(id, _)| *id != client);
                self.count.fetch_sub(before - list.len(), Ordering::SeqCst);
                if list.is_empty() {
                    map.remove(key);
                }
            }
        }
    }

    /// The hook: `key` (a user key) was written, deleted or expired; every client
    /// watching it gets dirty. Call it under the key's stripe lock.
    pub fn touched(&self, key: &[u8]) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(list) = self.shard(key).lock().get(key) {
            for (_, dirty) in list {
                dirty.store(true, Ordering::SeqCst);
            }
        }
    }

    /// [`Self::touched`] for a store key: a collection's reserved keys touch its name.
    pub fn touched_store_key(&self, key: &[u8]) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        match key.first() {
            Some(&RESERVED_BYTE) => {
                if let Some(user) = user_key_of(key) {
                    self.touched(user);
                }
            }
            _ => self.touched(key),
        }
    }

    /// Watched (key, client) pairs.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The key a reserved key belongs to (`collection.rs`'s layout: `FF 't' <user>` or `FF 'm'
/// <u32 BE len> <user> <suffix>`; a string with a deadline: `FF 'x' 00×6 <user>`).
pub fn user_key_of(key: &[u8]) -> Option<&[u8]> {
    if let Some(user) = crate::expiry::split_string_key(key) {
        return Some(user);
    }
    match key {
        [RESERVED_BYTE, TYPE_TAG, user @ ..] => Some(user),
        [RESERVED_BYTE, MEMBER_TAG, a, b, c, d, rest @ ..] => {
            let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
            rest.get(..len)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collection::{member_key, member_prefix, type_key};

    // Goal: a write of a watched key, or of any entry of a watched collection, marks the
    // watcher dirty; other keys and unwatched clients do not. Method: two clients, touches.
    #[test]
    fn touches_mark_watchers() {
        let watches = Watches::default();
        let (a, b) = (DirtyFlag::default(), DirtyFlag::default());
        assert!(watches.watch(1, &a, b"k"));
        assert!(!watches.watch(1, &a, b"k"));
        assert!(watches.watch(2, &b, b"list"));
        assert_eq!(watches.len(), 2);
        watches.touched_store_key(b"other");
        assert!(!a.load(Ordering::SeqCst) && !b.load(Ordering::SeqCst));
        watches.touched_store_key(b"k");
        assert!(a.load(Ordering::SeqCst) && !b.load(Ordering::SeqCst));
        let member = member_key(&member_prefix(b"list"), &[b"x"]);
        assert_eq!(user_key_of(&member), Some(&b"list"[..]));
        assert_eq!(user_key_of(&type_key(b"list")), Some(&b"list"[..]));
        watches.touched_store_key(&member);
        assert!(b.load(Ordering::SeqCst));
        watches.unwatch(1, &[b"k".to_vec()]);
        watches.unwatch(2, &[b"list".to_vec()]);
        assert!(watches.is_empty());
        assert_eq!(
            user_key_of(&[RESERVED_BYTE, MEMBER_TAG, 0, 0, 0, 9, b'a']),
            None
        );
    }
}
