//! Review of two changes (h-range: replies encoded as each command ends, FOREST.RANGE and
//! ZRANGEBYLEX written straight into the output; h-sx2: the deadline map as a hash table with
//! a lazily pruned heap, a new key's SET EX putting its deadline in the map first): tests that
//! probe a failed durability wait among replies of many lengths, stale entries of the time
//! order against active expiry, and readers racing a new key's SET EX.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};

use forest_core::Order;
use forest_store::file::{FaultPlan, SimDir};
use forest_store::{Durability, Store, StoreOptions};

use crate::cmd::expire::expire_cycle;
use crate::cmd::testing::{bulk, run_on, Harness};
use crate::connection::{Conn, Step};
use crate::expiry::{split_string_key, string_bounds};
use crate::frame::Frame;
use crate::server::Shared;

fn run(shared: &Shared, client: &mut crate::cmd::Client, argv: &[&str]) -> Frame {
    let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
    run_on(shared, client, &argv)
}

fn feed(conn: &mut Conn, shared: &Shared, bytes: &[u8]) -> (Step, Vec<u8>) {
    conn.input.extend_from_slice(bytes);
    let step = conn.process(shared);
    let out = conn.output.clone();
    conn.sent();
    (step, out)
}

/// A server over a simulated disk with `sync` durability (each batch's wait runs the flush,
/// so a sync fault fails that batch's wait). Also connection.rs's failed-wait test.
pub(crate) fn sim_shared() -> (SimDir, Shared) {
    let dir = SimDir::new(11);
    let store = Store::open(
        dir.clone(),
        StoreOptions {
            engine: Some("lockbtree".into()),
            durability: Durability::Sync,
            shards: 1,
            switch_engine: false,
            memory_budget_bytes: None,
            map_checkpoint_wal_bytes: None,
        },
    )
    .expect("open store");
    let shared = Shared::new(
        store,
        crate::server::Config {
            durability: Durability::Sync,
            ..crate::server::Config::default()
        },
    );
    (dir, shared)
}

/// `out` with each `write not acknowledged` error line replaced by `<NACK>`.
fn mark_nacks(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(out).into_owned();
    let mut marked = String::new();
    for line in text.split_inclusive("\r\n") {
        if line.starts_with("-ERR write not acknowledged: ") {
            marked.push_str("<NACK>");
        } else {
            marked.push_str(line);
        }
    }
    marked
}

// Goal: when a batch's durability wait fails, exactly the write replies become errors, each
// in its place, while the read replies around them stand byte for byte: replies of many
// lengths between the writes, FOREST.RANGE's header both wider and narrower than its
// placeholder (the splice moves the bytes after the header start), ZRANGEBYLEX with LIMIT,
// MULTI/EXEC (EXEC a write, MULTI and QUEUED not), RESP3, and a blocking command at the end
// whose truncated reply must not shift the recorded spans.
// Method: data written by a good batch; HELLO 3; the next fsync fails; one pipeline.
#[test]
fn failed_wait_rewrites_only_write_replies_among_spliced_reads() {
    let (dir, shared) = sim_shared();
    let client = shared.new_client("a".into(), "b".into(), None);
    let mut conn = Conn::new(client);
    let mut setup = String::new();
    for i in 0..12 {
        setup.push_str(&format!("SET k{i:02} v{i}\r\n"));
    }
    setup.push_str("ZADD z 0 a 0 b 0 c\r\nHELLO 3\r\n");
    let (step, _) = feed(&mut conn, &shared, setup.as_bytes());
    assert_eq!(step, Step::Continue);
    dir.set_faults(FaultPlan::sync(1));
    let (step, out) = feed(
        &mut conn,
        &shared,
        b"SET a 1\r\nFOREST.RANGE [k00 [k99\r\nINCR n\r\nZRANGEBYLEX z - + LIMIT 0 2\r\n\
          HSET h f v\r\nFOREST.RANGE [k00 [k99 LIMIT 1 KEYSONLY\r\nMULTI\r\nSET m 1\r\nEXEC\r\n\
          GET k00\r\nDEL k01\r\nBLPOP q 0\r\n",
    );
    assert_eq!(step, Step::Continue);
    assert!(conn.is_blocked(), "BLPOP waits");
    let mut range = String::from("*24\r\n");
    for i in 0..12 {
        let value = format!("v{i}");
        range.push_str(&format!("$3\r\nk{i:02}\r\n${}\r\n{value}\r\n", value.len()));
    }
    let want = format!(
        "<NACK>{range}<NACK>*2\r\n$1\r\na\r\n$1\r\nb\r\n<NACK>*1\r\n$3\r\nk00\r\n\
         +OK\r\n+QUEUED\r\n<NACK>$2\r\nv0\r\n<NACK>"
    );
    assert_eq!(mark_nacks(&out), want);
}

/// The user keys stored at `FF 'x'` (strings with a deadline).
fn timed_keys(shared: &Shared) -> Vec<Vec<u8>> {
    let (lower, upper) = string_bounds();
    let mut keys = Vec::new();
    shared.store.scan(
        Bound::Included(&lower[..]),
        Bound::Excluded(&upper[..]),
        Order::Ascending,
        &mut |key, _| {
            keys.push(split_string_key(key).expect("timed key").to_vec());
            ControlFlow::Continue(())
        },
    );
    keys
}

/// Runs the active task until it finds nothing more due.
fn expire_all_due(shared: &Shared) {
    while expire_cycle(shared, 20) == 20 {}
}

// Goal: the time order's stale entries (a deadline raised, lowered, removed, set again, the
// key deleted and set again without one) neither make the active task delete a key early
// nor hide a key that is due; DBSIZE (its due count) agrees at each step.
// Method: six keys through those changes, all before any of them is due; the clock moved
// past the old deadlines, then past the new ones; the active task run each time, and what
// the store holds checked directly (no read that would expire a key lazily).
#[test]
fn stale_time_order_entries_never_expire_a_key_early_or_late() {
    let h = Harness::new();
    let shared = &h.shared;
    let mut c = shared.new_client("a".into(), "b".into(), None);
    for argv in [
        &["SET", "raised", "v", "EX", "10"][..],
        &["EXPIRE", "raised", "1000"],
        &["SET", "persisted", "v", "EX", "10"],
        &["PERSIST", "persisted"],
        &["SET", "again", "v", "EX", "10"],
        &["PERSIST", "again"],
        &["EXPIRE", "again", "10"],
        &["SET", "lowered", "v", "EX", "1000"],
        &["EXPIRE", "lowered", "10"],
        &["SET", "reborn", "v", "EX", "10"],
        &["DEL", "reborn"],
        &["SET", "reborn", "w"],
        &["SET", "plain", "v", "EX", "500"],
        &["SET", "plain", "v2", "EX", "600"],
    ] {
        run(shared, &mut c, argv);
    }
    assert_eq!(run(shared, &mut c, &["DBSIZE"]), Frame::Integer(6));
    shared.expires.advance_clock_ms(20_000);
    assert_eq!(
        shared.expires.due_count(),
        2,
        "again and lowered are due, no stale entry counts"
    );
    assert_eq!(run(shared, &mut c, &["DBSIZE"]), Frame::Integer(4));
    expire_all_due(shared);
    assert_eq!(
        timed_keys(shared),
        vec![b"plain".to_vec(), b"raised".to_vec()]
    );
    assert_eq!(shared.expires.count(), 2);
    assert_eq!(run(shared, &mut c, &["DBSIZE"]), Frame::Integer(4));
    assert_eq!(run(shared, &mut c, &["GET", "persisted"]), bulk("v"));
    assert_eq!(run(shared, &mut c, &["GET", "reborn"]), bulk("w"));
    assert_eq!(
        run(shared, &mut c, &["TTL", "persisted"]),
        Frame::Integer(-1)
    );
    shared.expires.advance_clock_ms(600_000);
    expire_all_due(shared);
    assert_eq!(timed_keys(shared), vec![b"raised".to_vec()]);
    shared.expires.advance_clock_ms(500_000);
    expire_all_due(shared);
    assert!(timed_keys(shared).is_empty());
    assert_eq!(shared.expires.count(), 0);
    assert_eq!(run(shared, &mut c, &["DBSIZE"]), Frame::Integer(2));
}

// Goal: a new key's SET EX that fails to write leaves no deadline behind (the map learned it
// before the write): TTL, EXISTS, DBSIZE and the map agree that the key does not exist.
// Method: a failed fsync fails the store; then SET EX of a fresh key (its write refused).
#[test]
fn failed_set_ex_of_a_new_key_leaves_no_deadline() {
    let (dir, shared) = sim_shared();
    let mut conn = Conn::new(shared.new_client("a".into(), "b".into(), None));
    dir.set_faults(FaultPlan::sync(1));
    let (_, out) = feed(&mut conn, &shared, b"SET a 1\r\n");
    assert!(
        mark_nacks(&out) == "<NACK>",
        "{}",
        String::from_utf8_lossy(&out)
    );
    let (_, out) = feed(&mut conn, &shared, b"SET fresh v EX 100\r\n");
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(
        text.starts_with("-ERR "),
        "a failed store refuses the write: {text}"
    );
    assert_eq!(shared.expires.deadline(b"fresh"), None);
    assert_eq!(shared.expires.count(), 0);
    // Reads answer on a failed store (only the durability check of a read fails); DBSIZE
    // counts `a` alone (applied, its acknowledgement failed), not `fresh`.
    let (_, out) = feed(
        &mut conn,
        &shared,
        b"TTL fresh\r\nEXISTS fresh\r\nDBSIZE\r\n",
    );
    assert_eq!(out, b":-2\r\n:0\r\n:1\r\n");
}

// Goal: readers racing new keys' SET EX (the deadline in the map before the entry) never see
// a key without its deadline or a deadline without its key: EXISTS then TTL never gives -1
// (present, no deadline) or -2 after EXISTS said 1; a key FOREST.RANGE lists is
// readable by GET; DBSIZE never goes down (nothing is deleted).
// Method: one writer SETs fresh keys with EX; two readers probe the latest keys meanwhile.
#[test]
fn readers_racing_new_set_ex_see_key_and_deadline_together() {
    const KEYS: usize = 3_000;
    let h = Harness::new();
    let shared = &h.shared;
    let done = AtomicBool::new(false);
    let written = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = shared.new_client("w".into(), "w".into(), None);
            for i in 0..KEYS {
                let key = format!("k{i:05}");
                assert_eq!(
                    run(shared, &mut c, &["SET", &key, "v", "EX", "1000"]),
                    Frame::ok()
                );
                written.store(i + 1, Ordering::SeqCst);
            }
            done.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            let mut c = shared.new_client("r".into(), "r".into(), None);
            while !done.load(Ordering::SeqCst) {
                let next = written.load(Ordering::SeqCst);
                for i in next.saturating_sub(1)..(next + 2).min(KEYS) {
                    let key = format!("k{i:05}");
                    if run(shared, &mut c, &["EXISTS", &key]) == Frame::Integer(1) {
                        let Frame::Integer(ttl) = run(shared, &mut c, &["TTL", &key]) else {
                            panic!("TTL answers an integer");
                        };
                        assert!(ttl > 0, "{key} exists with TTL {ttl}");
                    }
                }
            }
        });
        s.spawn(|| {
            let mut c = shared.new_client("r2".into(), "r2".into(), None);
            let mut last_size = 0;
            while !done.load(Ordering::SeqCst) {
                let next = written.load(Ordering::SeqCst);
                let from = format!("[k{:05}", next.saturating_sub(2));
                let Frame::Array(items) = run(
                    shared,
                    &mut c,
                    &["FOREST.RANGE", &from, "[k99999", "KEYSONLY"],
                ) else {
                    panic!("FOREST.RANGE answers an array");
                };
                for item in items {
                    let Frame::Bulk(key) = item else {
                        panic!("a key");
                    };
                    let key = String::from_utf8(key.to_vec()).expect("utf8");
                    assert_eq!(run(shared, &mut c, &["GET", &key]), bulk("v"), "{key}");
                }
                let Frame::Integer(size) = run(shared, &mut c, &["DBSIZE"]) else {
                    panic!("DBSIZE answers an integer");
                };
                assert!(size >= last_size, "DBSIZE went from {last_size} to {size}");
                last_size = size;
            }
        });
    });
    assert_eq!(
        run(
            shared,
            &mut shared.new_client("x".into(), "x".into(), None),
            &["DBSIZE"]
        ),
        Frame::Integer(KEYS as i64)
    );
}

// Goal: a subscriber's replies go out through its mailbox (`crate::pubsub`), after the batch's
// wait: a failed wait turns its write reply into the error there too, and a message
// published during the batch follows the batch's replies.
// Method: HELLO 3 and SUBSCRIBE; the next fsync fails; a batch with a write and a PING, a
// message published by another client before the batch ends (held by the mailbox).
#[test]
fn failed_wait_reaches_a_subscriber_through_its_mailbox() {
    let (dir, shared) = sim_shared();
    let mut conn = Conn::new(shared.new_client("a".into(), "b".into(), None));
    let (_, out) = feed(&mut conn, &shared, b"HELLO 3\r\nSUBSCRIBE ch\r\n");
    assert!(out.is_empty(), "a subscriber's replies go to its mailbox");
    let mailbox = conn.client.pubsub.mailbox().cloned().expect("subscribed");
    let first = crate::pubsub::concat(mailbox.take());
    assert!(first.ends_with(b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"));
    dir.set_faults(FaultPlan::sync(1));
    mailbox.begin_batch();
    shared.pubsub.publish(b"ch", b"m");
    let (_, out) = feed(&mut conn, &shared, b"SET a 1\r\nPING\r\n");
    assert!(out.is_empty());
    let sent = crate::pubsub::concat(mailbox.take());
    assert_eq!(
        mark_nacks(&sent),
        "<NACK>+PONG\r\n>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n"
    );
}

// Goal: every engine a store can use holds a stamped entry (`FF 'x'`, a string with its
// deadline) at the value limit plus its 8-byte stamp, and gets it back after a reopen (log
// replay), as it does a value at the plain limit; one byte more is refused.
// Method: per engine, a stamped entry of VALUE_BYTES_MAX + 8 bytes and a plain entry at the
// limit; read, close, reopen, read.
#[test]
fn every_engine_holds_a_stamped_value_at_the_limit() {
    let stamped_key = [&forest_core::STAMPED_KEY_PREFIX[..], b"user"].concat();
    let stamped: Vec<u8> = (0..forest_core::STORED_VALUE_BYTES_MAX)
        .map(|i| (i % 251) as u8)
        .collect();
    let plain = vec![7u8; forest_core::VALUE_BYTES_MAX];
    for engine in forest_store::store::engine_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = || StoreOptions {
            engine: Some(engine.into()),
            durability: Durability::Sync,
            ..StoreOptions::default()
        };
        let store = Store::open_path(dir.path(), options()).expect("open");
        store.upsert(&stamped_key, &stamped).expect(engine);
        store.upsert(b"plain", &plain).expect(engine);
        let too_long = [&stamped[..], b"!"].concat();
        assert!(store.upsert(&stamped_key, &too_long).is_err(), "{engine}");
        let mut out = Vec::new();
        assert!(store.get(&stamped_key, &mut out), "{engine}");
        assert!(out == stamped, "{engine}: stamped value read back");
        store.close().expect("close");
        let store = Store::open_path(dir.path(), options()).expect("reopen");
        assert!(store.get(&stamped_key, &mut out), "{engine} after reopen");
        assert!(out == stamped, "{engine}: stamped value after reopen");
        assert!(store.get(b"plain", &mut out), "{engine} after reopen");
        assert!(out == plain, "{engine}: plain value after reopen");
        store.close().expect("close");
    }
}
