//! The server's key layout in the store ([`KEY_LAYOUT`]), recorded in the store entry
//! [`LAYOUT_KEY`] and in its `META`, and the move at open of a layout-1 store's strings
//! with a deadline from `FF 'x' <user>` to `FF 'x' 00×6 <user>` ([`STRING_PREFIX`]: the
//! user key on masstree's 8-byte slices).
//!
//! The entry decides ([`known_layout`]): `META` can be rewritten without its layout (a
//! damaged or missing one at an open naming the engine, `forest check --repair`, an older
//! build's version-3 file), and a layout-2 store taken for layout 1 would be moved again,
//! its strings renamed (review rev-sx4 F1). Without the entry `META` decides, unless the
//! store rewrote it at an open that found keys (`LAYOUT_UNKNOWN`): the open is refused.
//!
//! Layout 1's range holds every key of layout 2's (`FF 'x' 00×6 u` is layout 1's place of
//! the user key `00×6 u`), so what an interrupted move left cannot be told apart by the keys
//! alone. The move therefore goes in user-key order and keeps its progress in a store entry,
//! [`PROGRESS_KEY`] -> the last layout-1 user key moved, written in each move's atomic batch:
//! - a user key `u` with a byte other than zero moves to `00×6 u`, which sorts before `u`;
//!   so every entry past the progress key is still layout 1's, and a target never lands on
//!   a layout-1 entry not yet read (one that sorts before `u` was read already: it is
//!   removed in its own batch or earlier in this one, and the batch removes before it puts);
//! - the keys of zero bytes only (the empty key, `00`, `00 00`, ...) sort before every other
//!   key and move to longer runs of zeros, past themselves: they move first, all in one
//!   batch, whose progress key is the longest run written.
//!
//! Once every entry is moved (durable: the store is synced), one atomic batch writes
//! [`LAYOUT_KEY`] -> 2 and removes the progress entry, then `META` records layout 2. A new
//! store gets both at its first open, a layout-2 store without the entry (session 12's) at
//! its next. An open that finds a layout newer than [`KEY_LAYOUT`] is refused.
//! Runs at start before anything else reads the store (`Server::open`, `expiry::repair`).

use std::ops::{Bound, ControlFlow};

use forest_core::{Error, Order, Result};
use forest_store::meta::LAYOUT_UNKNOWN;
use forest_store::{Store, WriteBatch};

use super::{decode_string, string_key, unix_ms, KEY_LAYOUT, STRING_PREFIX, STRING_TAG};
use crate::collection::RESERVED_BYTE;

/// Layout 1's place of a string with a deadline: `FF 'x' <user>`; and the end of its range.
const OLD_PREFIX: [u8; 2] = [RESERVED_BYTE, STRING_TAG];
const OLD_END: [u8; 2] = [RESERVED_BYTE, STRING_TAG + 1];
/// The move's progress while it runs: `FF 'L'` -> the last layout-1 user key moved.
pub const PROGRESS_KEY: [u8; 2] = [RESERVED_BYTE, b'L'];
/// The store's key layout, kept in its data as well as in `META` (review rev-sx4 F1):
/// `FF 'K'` -> the layout (u32 BE). Written by the open that creates the store or moves it
/// to [`KEY_LAYOUT`], and by the first open of a layout-2 store without it; never removed
/// (FLUSHALL keeps it). Hidden from users like [`PROGRESS_KEY`] ([`is_server_entry`]).
pub const LAYOUT_KEY: [u8; 2] = [RESERVED_BYTE, b'K'];
/// Strings moved per atomic batch.
const BATCH_KEYS: usize = 256;

// Layout 2's places are in layout 1's range: forest-core's stamped keys (`FF 'x'`) both.
const _: () = assert!(STRING_PREFIX[0] == OLD_PREFIX[0] && STRING_PREFIX[1] == OLD_PREFIX[1]);

/// Brings the store to [`KEY_LAYOUT`]: moves a layout-1 store's strings with a deadline,
/// records the layout in [`LAYOUT_KEY`] and `META`. Errors: a layout newer than this
/// build's, or unknown ([`known_layout`]); a page-load error on a read; a failed write.
/// Returns how many strings it moved.
pub fn relayout(store: &Store) -> Result<u64> {
    relayout_batches(store, usize::MAX)
}

/// [`relayout`], stopping after `max_batches` batches of moves (tests: a crash mid-way).
fn relayout_batches(store: &Store, max_batches: usize) -> Result<u64> {
    let recorded = known_layout(store)?;
    if recorded > KEY_LAYOUT {
        return Err(Error::Config(format!(
            "the store's key layout is version {recorded}, newer than this build's \
             ({KEY_LAYOUT}): open it with a newer forest"
        )));
    }
    let mut scratch = Vec::new();
    if recorded == KEY_LAYOUT {
        // A store of this layout from before the entry (session 12), or a crash between
        // recording the layout and removing the progress entry.
        let mut batch = WriteBatch::new();
        if !loaded(store, store.get(&LAYOUT_KEY, &mut scratch))? {
            batch.put(&LAYOUT_KEY, &KEY_LAYOUT.to_be_bytes());
        }
        if loaded(store, store.get(&PROGRESS_KEY, &mut scratch))? {
            batch.remove(&PROGRESS_KEY);
        }
        if !batch.is_empty() {
            store.write(&batch)?;
        }
        return Ok(0);
    }
    let now = unix_ms();
    let mut moved = 0u64;
    let mut batches = 0usize;
    let mut progress = if loaded(store, store.get(&PROGRESS_KEY, &mut scratch))? {
        scratch.clone()
    } else {
        batches += 1;
        if batches > max_batches {
            return Ok(moved);
        }
        let (count, progress) = move_zero_keys(store, now)?;
        moved += count;
        progress
    };
    loop {
        let from = [&OLD_PREFIX[..], &progress].concat();
        let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        store.scan_up_to(
            Bound::Excluded(&from[..]),
            Bound::Excluded(&OLD_END[..]),
            Order::Ascending,
            BATCH_KEYS,
            &mut |key, value| {
                rows.push((key.to_vec(), value.to_vec()));
                ControlFlow::Continue(())
            },
        );
        loaded(store, ())?;
        let Some((last, _)) = rows.last() else {
            break;
        };
        batches += 1;
        if batches > max_batches {
            return Ok(moved);
        }
        progress = last[OLD_PREFIX.len()..].to_vec();
        let mut batch = WriteBatch::new();
        for (key, _) in &rows {
            batch.remove(key);
        }
        for (key, value) in &rows {
            place(store, &mut batch, &key[OLD_PREFIX.len()..], value, now)?;
        }
        batch.put(&PROGRESS_KEY, &progress);
        store.write(&batch)?;
        moved += rows.len() as u64;
        if rows.len() < BATCH_KEYS {
            break;
        }
    }
    // A temporal store keeps when the move began, for as-of reads of layout 1's place
    // ([`moved_window`]): the progress entry's first version, written even if nothing moved.
    if store.now().is_ok() && !loaded(store, store.get(&PROGRESS_KEY, &mut scratch))? {
        let mut batch = WriteBatch::new();
        batch.put(&PROGRESS_KEY, &progress);
        store.write(&batch)?;
    }
    // Every move durable before the store says there is nothing left to move; the entry
    // and the progress entry's removal in one atomic batch, durable before `META` follows.
    store.sync()?;
    let mut batch = WriteBatch::new();
    batch.put(&LAYOUT_KEY, &KEY_LAYOUT.to_be_bytes());
    if loaded(store, store.get(&PROGRESS_KEY, &mut scratch))? {
        batch.remove(&PROGRESS_KEY);
    }
    store.write(&batch)?;
    store.sync()?;
    store.set_layout(KEY_LAYOUT)?;
    Ok(moved)
}

/// The store's key layout: its [`LAYOUT_KEY`] entry if it has one (`META` is rewritten to
/// agree), else what `META` records. `META` alone is not trusted with a store's keys: a
/// missing or damaged one is rewritten at open (the store's repair; also `forest check
/// --repair`, an older build's version-3 `META`), and taking layout 2's keys for layout
/// 1's would move them again (review rev-sx4 F1). Errors: the entry is malformed; the store
/// has keys, no entry, and a `META` rewritten that way ([`LAYOUT_UNKNOWN`]).
fn known_layout(store: &Store) -> Result<u32> {
    let mut value = Vec::new();
    if loaded(store, store.get(&LAYOUT_KEY, &mut value))? {
        let Ok(bytes) = <[u8; 4]>::try_from(value.as_slice()) else {
            return Err(Error::Config(format!(
                "the store's key layout entry (FF 'K') holds {} bytes, 4 expected: the store \
                 is damaged",
                value.len()
            )));
        };
        let layout = u32::from_be_bytes(bytes);
        if layout <= KEY_LAYOUT && store.layout() != layout {
            store.set_layout(layout)?;
        }
        return Ok(layout);
    }
    match store.layout() {
        LAYOUT_UNKNOWN => Err(Error::Config(format!(
            "the store's key layout is unknown: its META file was missing or damaged at an \
             open that found keys (and was rewritten), and the store has no layout entry \
             (FF 'K', written since layout entries exist), so whether a string with a \
             deadline is at FF 'x' <key> (layout 1) or FF 'x' 00x6 <key> (layout \
             {KEY_LAYOUT}) cannot be told: restore the store's META from a backup"
        ))),
        recorded => Ok(recorded),
    }
}

/// `read`'s answer, or the page-load error it met: a store on its LSS answers "not found"
/// (or a short scan) on one, and acting on that at open would lose keys (review rev-sx4 F3).
pub(crate) fn loaded<T>(store: &Store, read: T) -> Result<T> {
    match store.take_load_error() {
        Some(e) => Err(e),
        None => Ok(read),
    }
}

/// On a temporal store moved from layout 1 (within its retained history): `(began, done)`,
/// the timestamp of the move's first batch ([`PROGRESS_KEY`]'s first version) and of the
/// batch that recorded layout 2 ([`LAYOUT_KEY`]'s first version after it). A string with a
/// deadline as of `t < done` is read at layout 1's place as of `min(t, began - 1)`: the
/// move changed no value, only places, and mid-move some strings were at each (review
/// rev-sx4 F2). None when no move is in the history, or when the retention threshold falls
/// at or after its start (its history before the threshold is discarded; reads then use
/// layout 2's place, which mid-move holds only the strings moved so far).
pub fn moved_window(store: &Store) -> Result<Option<(u64, u64)>> {
    let threshold = store.retention()?;
    let mut scratch = Vec::new();
    if threshold > 0 && store.get_as_of(&PROGRESS_KEY, threshold, &mut scratch)? {
        return Ok(None);
    }
    let first = |key: &[u8], from: u64| -> Result<Option<u64>> {
        let h = store.history(key, from, u64::MAX, Order::Ascending, 1)?;
        Ok(h.first().map(|&(ts, _)| ts))
    };
    let Some(began) = first(&PROGRESS_KEY, threshold)? else {
        return Ok(None);
    };
    if began <= threshold {
        return Ok(None);
    }
    Ok(first(&LAYOUT_KEY, began)?.map(|done| (began, done)))
}

/// Layout 1's place of the user key `user` ([`moved_window`]).
pub fn old_string_key(user: &[u8]) -> Vec<u8> {
    [&OLD_PREFIX[..], user].concat()
}

/// Layout 1's range of strings with a deadline: (lower, upper exclusive).
pub fn old_string_bounds() -> ([u8; 2], [u8; 2]) {
    (OLD_PREFIX, OLD_END)
}

/// Whether `key` is one of the server's own entries under the reserved byte (neither a
/// key nor a collection's): [`LAYOUT_KEY`], [`PROGRESS_KEY`].
pub fn is_server_entry(key: &[u8]) -> bool {
    key == LAYOUT_KEY || key == PROGRESS_KEY
}

/// Moves the layout-1 strings whose user key is zero bytes only (the first keys of the
/// range), all in one batch with the progress entry; returns how many it moved and the
/// progress key (the longest run of zeros written or read; empty if none).
fn move_zero_keys(store: &Store, now: u64) -> Result<(u64, Vec<u8>)> {
    let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    store.scan(
        Bound::Included(&OLD_PREFIX[..]),
        Bound::Excluded(&OLD_END[..]),
        Order::Ascending,
        &mut |key, value| {
            if key[OLD_PREFIX.len()..].iter().any(|&b| b != 0) {
                return ControlFlow::Break(());
            }
            rows.push((key.to_vec(), value.to_vec()));
            ControlFlow::Continue(())
        },
    );
    loaded(store, ())?;
    let Some((longest, _)) = rows.last() else {
        return Ok((0, Vec::new()));
    };
    let progress = string_key(&longest[OLD_PREFIX.len()..])[OLD_PREFIX.len()..].to_vec();
    let mut batch = WriteBatch::new();
    for (key, _) in &rows {
        batch.remove(key);
    }
    for (key, value) in &rows {
        place(store, &mut batch, &key[OLD_PREFIX.len()..], value, now)?;
    }
    batch.put(&PROGRESS_KEY, &progress);
    store.write(&batch)?;
    Ok((rows.len() as u64, progress))
}

/// Adds to `batch` the layout-2 place of layout-1's `FF 'x' <user>` -> `stored`. A user key
/// within 8 bytes of the key limit no longer fits there: it is dropped if its deadline has
/// passed, else it goes to its raw key without its deadline (a line on stderr says so),
/// unless a raw key is there already (it wins, as `settle_strings` decides). Errors: a
/// page-load error reading the raw key.
fn place(
    store: &Store,
    batch: &mut WriteBatch,
    user: &[u8],
    stored: &[u8],
    now: u64,
) -> Result<()> {
    let key = string_key(user);
    if forest_core::check_entry(&key, stored).is_ok() {
        batch.put(&key, stored);
        return Ok(());
    }
    let Some((deadline, value)) = decode_string(stored) else {
        return Ok(());
    };
    let mut scratch = Vec::new();
    if deadline <= now || loaded(store, store.get(user, &mut scratch))? {
        return Ok(());
    }
    eprintln!(
        "forest: key {:?} is too long to keep its deadline in this store's layout; it stays \
         without one",
        String::from_utf8_lossy(&user[..user.len().min(64)])
    );
    batch.put(user, value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testing::run_on;
    use crate::expiry::encode_string;
    use crate::frame::Frame;
    use crate::server::{Config, Shared};
    use forest_store::file::{CrashMode, SimDir};
    use forest_store::{Durability, StoreOptions};

    fn open(dir: &SimDir, durability: Durability) -> Store {
        Store::open(
            dir.clone(),
            StoreOptions {
                engine: Some("lockbtree".into()),
                durability,
                shards: 1,
                switch_engine: false,
                memory_budget_bytes: None,
                map_checkpoint_wal_bytes: None,
            },
        )
        .expect("open store")
    }

    /// What the server does at start, then a state to run commands on.
    fn start(store: Store) -> Shared {
        relayout(&store).expect("relayout");
        crate::collection::repair(&store).expect("repair");
        crate::expiry::repair(&store).expect("expiry repair");
        Shared::new(store, Config::default())
    }

    fn run(shared: &Shared, argv: &[&[u8]]) -> Frame {
        let mut client = shared.new_client("127.0.0.1:2".into(), "127.0.0.1:6379".into(), None);
        run_on(shared, &mut client, argv)
    }

    /// User keys of a layout-1 store: the runs of zeros (the empty key too) and keys whose
    /// layout-2 place is another key's layout-1 place (`abc` and `00×6 abc`, ...), ordinary
    /// ones for more than two batches, one past the key limit in layout 2 and one expired.
    fn old_keys() -> Vec<(Vec<u8>, u64)> {
        let far = FAR;
        let mut keys: Vec<(Vec<u8>, u64)> = Vec::new();
        for zeros in [0, 1, 2, 6, 7, 12, 13] {
            keys.push((vec![0; zeros], far + zeros as u64));
        }
        for user in [
            &b"abc"[..],
            b"\0\0\0\0\0\0abc",
            b"\0\0\0\0\0\0\0\0\0\0\0\0abc",
            b"\0a",
        ] {
            keys.push((user.to_vec(), far + user.len() as u64));
        }
        for i in 0..(BATCH_KEYS * 2 + 17) {
            keys.push((format!("key:{i:05}").into_bytes(), far + i as u64));
        }
        keys
    }

    /// A deadline far ahead (2096), the same in every call.
    const FAR: u64 = 4_000_000_000_000;
    const LONG_LEN: usize = forest_core::KEY_BYTES_MAX - 4;

    /// Writes `old_keys` at layout 1's places, as a layout-1 server left them (META with
    /// no layout), plus a key too long for layout 2, an expired one and a plain string.
    fn write_layout_1(store: &Store) {
        let old = |user: &[u8]| [&OLD_PREFIX[..], user].concat();
        for (user, deadline) in old_keys() {
            let value = [b"v:".as_slice(), &user].concat();
            store
                .upsert(&old(&user), &encode_string(deadline, &value))
                .expect("upsert");
        }
        let long = vec![b'l'; LONG_LEN];
        store
            .upsert(&old(&long), &encode_string(FAR, b"long"))
            .expect("upsert");
        store
            .upsert(&old(b"gone"), &encode_string(unix_ms() - 1_000, b"x"))
            .expect("upsert");
        store.upsert(b"plain", b"p").expect("upsert");
    }

    /// Every key of `write_layout_1` readable with its value and deadline through the
    /// server, nothing left at a layout-1 place, layout 2 recorded, no progress entry.
    fn check_layout_2(shared: &Shared) {
        assert_eq!(shared.store.layout(), KEY_LAYOUT);
        for (user, deadline) in old_keys() {
            let value = [b"v:".as_slice(), &user].concat();
            assert_eq!(
                run(shared, &[b"GET", &user]),
                Frame::Bulk(value),
                "{user:?}"
            );
            assert_eq!(
                run(shared, &[b"PEXPIRETIME", &user]),
                Frame::Integer(deadline as i64),
                "{user:?}"
            );
            let mut out = Vec::new();
            assert!(shared.store.get(&string_key(&user), &mut out), "{user:?}");
        }
        let long = vec![b'l'; LONG_LEN];
        assert_eq!(run(shared, &[b"GET", &long]), Frame::bulk(b"long"));
        assert_eq!(run(shared, &[b"TTL", &long]), Frame::Integer(-1));
        assert_eq!(run(shared, &[b"GET", b"gone"]), Frame::Null);
        assert_eq!(run(shared, &[b"GET", b"plain"]), Frame::bulk(b"p"));
        let count = old_keys().len() as i64 + 2;
        assert_eq!(run(shared, &[b"DBSIZE"]), Frame::Integer(count));
        let mut entries = Vec::new();
        shared.store.scan(
            Bound::Included(&OLD_PREFIX[..]),
            Bound::Unbounded,
            Order::Ascending,
            &mut |key, _| {
                entries.push(key.to_vec());
                ControlFlow::Continue(())
            },
        );
        assert!(
            entries.iter().all(|k| k.starts_with(&STRING_PREFIX)),
            "only layout 2's places under FF 'x'"
        );
        // And `gone`, invisible, until the active task deletes it.
        assert_eq!(entries.len(), old_keys().len() + 1);
        let mut out = Vec::new();
        assert!(
            !shared.store.get(&PROGRESS_KEY, &mut out),
            "no progress entry"
        );
        assert_layout_entry(&shared.store);
    }

    /// The store holds [`LAYOUT_KEY`] -> 2 and `META` agrees.
    fn assert_layout_entry(store: &Store) {
        let mut out = Vec::new();
        assert!(store.get(&LAYOUT_KEY, &mut out), "the layout entry");
        assert_eq!(out, KEY_LAYOUT.to_be_bytes());
        assert_eq!(store.layout(), KEY_LAYOUT);
    }

    // Goal: a layout-1 store (strings with a deadline at `FF 'x' <user>`) opens with every
    // key readable with its deadline, including keys whose new place is another key's old
    // one and runs of zeros; a key too long for the new place keeps its value without a
    // deadline, an expired one is gone; nothing is left at an old place; layout 2 is
    // recorded, so a second open moves nothing; and it survives a power loss.
    // Method: write the old layout by hand, open as the server does, check, crash, reopen.
    #[test]
    fn relayout_moves_a_layout_1_store() {
        let dir = SimDir::new(3);
        let store = open(&dir, Durability::Periodic { interval_ms: 1000 });
        write_layout_1(&store);
        store.close().expect("close");
        let store = open(&dir, Durability::Periodic { interval_ms: 1000 });
        assert_eq!(
            store.layout(),
            0,
            "a store from before layouts were recorded"
        );
        let shared = start(store);
        check_layout_2(&shared);
        // The moves and the layout were durable before serving.
        dir.crash_with(CrashMode::DropUnsynced);
        std::mem::forget(shared);
        let store = open(&dir, Durability::Periodic { interval_ms: 1000 });
        assert_eq!(relayout(&store).expect("again"), 0, "nothing left to move");
        let shared = start(store);
        check_layout_2(&shared);
    }

    // Goal: a crash at any point of the move leaves a store that the next open finishes
    // moving, with nothing lost or duplicated. Method: stop the move after 0..=3 of its 4
    // batches (the first moves the runs of zeros), lose what was not synced (periodic
    // durability: some of the batches, or none of them), reopen and check; also a crash
    // between recording the layout and removing the progress entry.
    #[test]
    fn relayout_resumes_after_a_crash() {
        for (stop, durability) in (0..=3).flat_map(|stop| {
            [
                (stop, Durability::Sync),
                (stop, Durability::Periodic { interval_ms: 1000 }),
            ]
        }) {
            let dir = SimDir::new(40 + stop as u64);
            let store = open(&dir, durability);
            write_layout_1(&store);
            store.close().expect("close");
            let store = open(&dir, durability);
            relayout_batches(&store, stop).expect("part of the move");
            assert_eq!(store.layout(), 0, "stopped after {stop}");
            dir.crash_with(CrashMode::DropUnsynced);
            std::mem::forget(store);
            let shared = start(open(&dir, durability));
            check_layout_2(&shared);
        }
        let dir = SimDir::new(50);
        let store = open(&dir, Durability::Sync);
        store.set_layout(KEY_LAYOUT).expect("layout");
        store.upsert(&PROGRESS_KEY, b"key").expect("a leftover");
        drop(store);
        let store = open(&dir, Durability::Sync);
        relayout(&store).expect("relayout");
        let mut out = Vec::new();
        assert!(!store.get(&PROGRESS_KEY, &mut out), "leftover removed");
        assert_layout_entry(&store);
    }

    /// [`open`] with another engine.
    fn open_engine(dir: &SimDir, engine: &str) -> Store {
        Store::open(
            dir.clone(),
            StoreOptions {
                engine: Some(engine.into()),
                durability: Durability::Sync,
                shards: 1,
                switch_engine: false,
                memory_budget_bytes: None,
                map_checkpoint_wal_bytes: None,
            },
        )
        .expect("open store")
    }

    // Review rev-sx4 F1. Goal: a layout-2 store whose META is damaged keeps its strings
    // with a deadline. An open that names the engine rewrites a damaged META (the store's
    // documented repair), with layout 0; relayout then takes the layout-2 entries for
    // layout-1 ones and moves `FF 'x' 00x6 k` to `FF 'x' 00x12 k`: `k` is gone and a key
    // `00x6 k` appears. Method: SET EX on a layout-2 store, damage META's padding, reopen.
    #[test]
    fn rev_damaged_meta_does_not_move_a_layout_2_store_again() {
        let dir = SimDir::new(61);
        let shared = start(open(&dir, Durability::Sync));
        assert_eq!(shared.store.layout(), KEY_LAYOUT);
        let set = run(&shared, &[b"SET", b"k", b"v", b"EX", b"100000"]);
        assert_eq!(set, Frame::ok());
        dir.crash_with(CrashMode::DropUnsynced);
        std::mem::forget(shared);
        assert!(dir.damage(forest_store::meta::META_FILE_NAME, |b| b[100] ^= 1));
        let shared = start(open(&dir, Durability::Sync));
        let keys = run(&shared, &[b"KEYS", b"*"]);
        assert_eq!(
            run(&shared, &[b"GET", b"k"]),
            Frame::bulk(b"v"),
            "KEYS * now: {keys:?}"
        );
        assert_layout_entry(&shared.store);
        // A META that lost its layout intact (an older build's version 3; here layout 0):
        // the entry wins, and META is made to agree.
        shared.store.set_layout(0).expect("layout 0");
        dir.crash_with(CrashMode::DropUnsynced);
        std::mem::forget(shared);
        let shared = start(open(&dir, Durability::Sync));
        assert_eq!(run(&shared, &[b"GET", b"k"]), Frame::bulk(b"v"));
        assert_layout_entry(&shared.store);
    }

    // Goal: a new store records its layout in its data at its first open, and the entry
    // is no key, no collection entry: DBSIZE, KEYS, SCAN, FOREST.RANGE and INFO's count
    // of collection entries do not show it, and FLUSHALL keeps it.
    // Method: start on an empty store, look, write, flush, look again.
    #[test]
    fn a_new_store_has_the_layout_entry_hidden() {
        let dir = SimDir::new(63);
        let shared = start(open(&dir, Durability::Sync));
        assert_layout_entry(&shared.store);
        assert_eq!(shared.collections.reserved_count(), 0);
        assert_eq!(run(&shared, &[b"DBSIZE"]), Frame::Integer(0));
        assert_eq!(run(&shared, &[b"KEYS", b"*"]), Frame::Array(vec![]));
        assert_eq!(
            run(&shared, &[b"SCAN", b"0"]),
            Frame::Array(vec![Frame::bulk(b"0"), Frame::Array(vec![])])
        );
        assert_eq!(
            run(&shared, &[b"FOREST.RANGE", b"-", b"+"]),
            Frame::Array(vec![])
        );
        run(&shared, &[b"SET", b"a", b"1"]);
        run(&shared, &[b"SET", b"b", b"2", b"PX", b"100000"]);
        run(&shared, &[b"RPUSH", b"l", b"x"]);
        assert_eq!(run(&shared, &[b"DBSIZE"]), Frame::Integer(3));
        assert_eq!(run(&shared, &[b"FLUSHALL"]), Frame::ok());
        assert_eq!(run(&shared, &[b"DBSIZE"]), Frame::Integer(0));
        assert_layout_entry(&shared.store);
        // And after a restart (the count is made at start).
        dir.crash_with(CrashMode::DropUnsynced);
        std::mem::forget(shared);
        let shared = start(open(&dir, Durability::Sync));
        assert_eq!(run(&shared, &[b"DBSIZE"]), Frame::Integer(0));
        assert_eq!(shared.collections.reserved_count(), 0);
    }

    // Goal: a store with keys whose layout is in neither its data nor an intact META is
    // refused, naming the problem, and stays refused (the store rewrote META at the first
    // open) with nothing moved. Method: a layout-1 store (no layout entry) whose META is
    // removed; open twice naming the engine.
    #[test]
    fn missing_meta_with_keys_and_no_entry_is_refused() {
        use forest_store::file::Dir;
        let dir = SimDir::new(64);
        let store = open(&dir, Durability::Sync);
        write_layout_1(&store);
        store.close().expect("close");
        dir.remove(forest_store::meta::META_FILE_NAME)
            .expect("remove META");
        for attempt in 0..2 {
            let store = open(&dir, Durability::Sync);
            assert_eq!(store.layout(), LAYOUT_UNKNOWN, "attempt {attempt}");
            let err = relayout(&store).expect_err("unknown layout");
            assert!(
                err.to_string().contains("key layout is unknown"),
                "attempt {attempt}: {err}"
            );
            let mut out = Vec::new();
            assert!(store.get(&[&OLD_PREFIX[..], b"abc"].concat(), &mut out));
            assert!(!store.get(&LAYOUT_KEY, &mut out), "nothing written");
            store.close().expect("close");
        }
        // An empty store without META is a new one.
        let dir = SimDir::new(65);
        drop(open(&dir, Durability::Sync));
        dir.remove(forest_store::meta::META_FILE_NAME)
            .expect("remove META");
        let shared = start(open(&dir, Durability::Sync));
        assert_layout_entry(&shared.store);
    }

    // Goal: a layout-2 store from before the layout entry (session 12: META alone) gains
    // the entry at its next open, its strings with a deadline untouched.
    // Method: write layout 2's place by hand with META saying 2, no entry; start; check.
    #[test]
    fn a_layout_2_store_without_the_entry_gains_it() {
        let dir = SimDir::new(66);
        let store = open(&dir, Durability::Sync);
        store.set_layout(KEY_LAYOUT).expect("layout");
        store
            .upsert(&string_key(b"k"), &encode_string(FAR, b"v"))
            .expect("upsert");
        store.close().expect("close");
        let shared = start(open(&dir, Durability::Sync));
        assert_layout_entry(&shared.store);
        assert_eq!(run(&shared, &[b"GET", b"k"]), Frame::bulk(b"v"));
        assert_eq!(
            run(&shared, &[b"PEXPIRETIME", b"k"]),
            Frame::Integer(FAR as i64)
        );
        assert_eq!(run(&shared, &[b"DBSIZE"]), Frame::Integer(1));
    }

    // Review rev-sx4 F3. Goal: a page that cannot be loaded fails the open's relayout,
    // naming it, and layout 2 is not recorded (a short scan taken as the end would record
    // it over strings never moved). Method: a layout-1 bwtree store on its LSS with a
    // small memory budget, everything evicted, the LSS segments damaged; relayout. (Its
    // batch writes meet the damaged pages too, so this holds without the read checks as
    // well; they cover reads whose pages no write touches.)
    #[test]
    fn relayout_fails_on_a_page_load_error() {
        const N: usize = 2000;
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("store");
        let store = Store::open_path(
            &path,
            StoreOptions {
                engine: Some("bwtree".into()),
                memory_budget_bytes: Some(16 << 10),
                ..StoreOptions::default()
            },
        )
        .expect("open");
        assert_eq!(store.layout(), 0, "a new store");
        let value = vec![b'.'; 160];
        let mut batch = WriteBatch::new();
        for i in 0..N {
            let key = [&OLD_PREFIX[..], format!("key{i:08}").as_bytes()].concat();
            batch.put(&key, &encode_string(FAR, &value));
            if batch.len() == 50 {
                store.write(&batch).expect("write");
                batch = WriteBatch::new();
            }
        }
        store.sync().expect("sync");
        let began = std::time::Instant::now();
        loop {
            let memory = store.stats().memory.expect("a store with a budget");
            if memory.evictions > 0 && memory.resident_bytes <= memory.budget_bytes * 5 / 4 {
                break;
            }
            assert!(began.elapsed().as_secs() < 20, "not evicted: {memory:?}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        for entry in std::fs::read_dir(path.join("lss")).expect("lss dir") {
            let file = entry.expect("entry").path();
            let mut bytes = std::fs::read(&file).expect("read segment");
            for b in bytes.iter_mut().skip(64) {
                *b ^= 0x5a;
            }
            std::fs::write(&file, bytes).expect("damage segment");
        }
        let err = relayout(&store).expect_err("a page-load error");
        assert!(err.to_string().contains("lss-"), "{err}");
        assert_eq!(store.layout(), 0, "layout 2 not recorded");
    }

    // Goal: a malformed layout entry is refused, naming it. Method: write 3 bytes there.
    #[test]
    fn a_malformed_layout_entry_is_refused() {
        let dir = SimDir::new(67);
        let store = open(&dir, Durability::Sync);
        store.upsert(&LAYOUT_KEY, b"\0\0\x02").expect("upsert");
        let err = relayout(&store).expect_err("malformed");
        assert!(err.to_string().contains("holds 3 bytes"), "{err}");
    }

    // Review rev-sx4 F2. Goal: on a temporal store, a string with a deadline written by a
    // layout-1 build still reads as of a time before the relayout. The relayout writes new
    // versions at the new place (at the relayout's time) and ASOF reads only the new place,
    // so the past value is lost to ASOF.GET. Method: a tsbtree store with `FF 'x' k` (as a
    // layout-1 server wrote it), ASOF.NOW then, reopen as the server, ASOF.GET at that time.
    #[test]
    fn rev_asof_reads_a_string_with_a_deadline_from_before_the_relayout() {
        let dir = SimDir::new(62);
        let store = open_engine(&dir, "tsbtree");
        store
            .upsert(&[&OLD_PREFIX[..], b"k"].concat(), &encode_string(FAR, b"v"))
            .expect("upsert");
        let before = store.now().expect("temporal").to_string();
        store.close().expect("close");
        let shared = start(open_engine(&dir, "tsbtree"));
        assert_eq!(run(&shared, &[b"GET", b"k"]), Frame::bulk(b"v"));
        assert_eq!(
            run(&shared, &[b"ASOF.GET", b"k", before.as_bytes()]),
            Frame::bulk(b"v"),
            "history: {:?}",
            run(&shared, &[b"ASOF.HISTORY", b"k"])
        );
        // Ranges, counts and histories too, before and after the move; the move itself is
        // no event.
        let after = run(&shared, &[b"ASOF.NOW"]);
        let Frame::Integer(after) = after else {
            panic!("ASOF.NOW: {after:?}")
        };
        let after = after.to_string();
        for t in [&before, &after] {
            assert_eq!(
                run(&shared, &[b"ASOF.RANGE", b"-", b"+", t.as_bytes()]),
                Frame::Array(vec![Frame::bulk(b"k"), Frame::bulk(b"v")]),
                "ASOF.RANGE at {t}"
            );
            assert_eq!(
                run(&shared, &[b"ASOF.COUNT", b"-", b"+", t.as_bytes()]),
                Frame::Integer(1),
                "ASOF.COUNT at {t}"
            );
        }
        let Frame::Array(history) = run(&shared, &[b"ASOF.HISTORY", b"k"]) else {
            panic!("ASOF.HISTORY")
        };
        assert_eq!(history.len(), 2, "one write, no move event: {history:?}");
        assert_eq!(history[1], Frame::bulk(b"v"));
        // A later write at layout 2's place is listed after it.
        assert_eq!(
            run(&shared, &[b"SET", b"k", b"w", b"EX", b"1000"]),
            Frame::ok()
        );
        let Frame::Array(history) = run(&shared, &[b"ASOF.HISTORY", b"k"]) else {
            panic!("ASOF.HISTORY")
        };
        assert_eq!(history.len(), 4, "{history:?}");
        assert_eq!(history[3], Frame::bulk(b"w"));
        assert_eq!(
            run(&shared, &[b"ASOF.GET", b"k", before.as_bytes()]),
            Frame::bulk(b"v")
        );
    }

    // Goal: a store of a newer layout is refused, naming it, and left as it was.
    #[test]
    fn newer_layout_is_refused() {
        let dir = SimDir::new(5);
        let store = open(&dir, Durability::Sync);
        store.set_layout(KEY_LAYOUT + 1).expect("layout");
        let err = relayout(&store).expect_err("newer");
        assert!(err.to_string().contains("key layout is version 3"), "{err}");
        assert_eq!(store.layout(), KEY_LAYOUT + 1);
    }
}
