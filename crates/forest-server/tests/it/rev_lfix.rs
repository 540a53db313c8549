//! rev-lfix: `collection::repair` (run by `Server::open`) decides its removals from
//! `Store::scan`, which a page-load error cuts short (a bwtree under a budget): every
//! collection whose members the cut scan did not reach loses its type entry.

use std::ops::{Bound, ControlFlow};
use std::time::{Duration, Instant};

use forest_core::Order;
use forest_server::collection::{self, Kind, Meta};
use forest_store::{Durability, Store, StoreOptions, WriteBatch};

const BUDGET: u64 = 16 << 10;
const HASHES: usize = 40;
const FIELDS: usize = 40;

fn wait_evicted(store: &Store) {
    let began = Instant::now();
    loop {
        let memory = store.stats().memory.expect("a budget");
        if memory.evictions > 0
            && memory.resident_bytes <= memory.budget_bytes + memory.budget_bytes / 4
        {
            return;
        }
        assert!(began.elapsed() < Duration::from_secs(20), "no eviction");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn damage_lss(path: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    use std::os::unix::fs::FileExt;
    let mut saved = Vec::new();
    for entry in std::fs::read_dir(path.join("lss")).expect("lss dir") {
        let file = entry.expect("entry").path();
        let bytes = std::fs::read(&file).expect("read segment");
        let flipped: Vec<u8> = bytes
            .iter()
            .enumerate()
            .map(|(i, b)| if i < 64 { *b } else { b ^ 0x5a })
            .collect();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .expect("open segment")
            .write_all_at(&flipped, 0)
            .expect("damage segment");
        saved.push((file, bytes));
    }
    saved
}

fn restore_lss(saved: &[(std::path::PathBuf, Vec<u8>)]) {
    use std::os::unix::fs::FileExt;
    for (file, bytes) in saved {
        std::fs::OpenOptions::new()
            .write(true)
            .open(file)
            .expect("open segment")
            .write_all_at(bytes, 0)
            .expect("restore segment");
    }
}

fn readable(store: &Store, tag: u8) -> bool {
    let (lower, upper) = ([0xff, tag], [0xff, tag + 1]);
    store
        .try_scan(
            Bound::Included(&lower[..]),
            Bound::Excluded(&upper[..]),
            Order::Ascending,
            &mut |_, _| ControlFlow::Continue(()),
        )
        .is_ok()
}

fn type_entries(store: &Store) -> usize {
    let (lower, upper) = ([0xff, b't'], [0xff, b't' + 1]);
    let mut n = 0;
    store
        .try_scan(
            Bound::Included(&lower[..]),
            Bound::Excluded(&upper[..]),
            Order::Ascending,
            &mut |_, _| {
                n += 1;
                ControlFlow::Continue(())
            },
        )
        .expect("readable once restored");
    n
}

// Goal: the open's collection repair never removes a collection because a page of its
// members could not be read. Method: 40 hashes of 40 fields on a 16 KiB budget, evicted;
// every LSS byte flipped while the type entries are resident and the members are not; run
// `collection::repair`; undo the damage and count the type entries.
#[test]
fn repair_after_a_cut_member_scan_keeps_every_collection() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("store");
    let options = StoreOptions {
        engine: Some("bwtree".into()),
        durability: Durability::Periodic { interval_ms: 20 },
        memory_budget_bytes: Some(BUDGET),
        ..StoreOptions::default()
    };
    let store = Store::open_path(&path, options).expect("open");
    for h in 0..HASHES {
        let user = format!("h{h:03}");
        let prefix = collection::member_prefix(user.as_bytes());
        let mut batch = WriteBatch::new();
        for f in 0..FIELDS {
            let field = format!("f{f:03}");
            batch.put(
                &collection::member_key(&prefix, &[field.as_bytes()]),
                &[b'v'; 100],
            );
        }
        let meta = Meta {
            count: FIELDS as u64,
            ..Meta::new(Kind::Hash)
        };
        batch.put(&collection::type_key(user.as_bytes()), &meta.encode());
        store.write(&batch).expect("write");
    }
    store.sync().expect("sync");
    let mut repaired = None;
    for _ in 0..200 {
        wait_evicted(&store);
        let saved = damage_lss(&path);
        if readable(&store, b't') && !readable(&store, b'm') {
            repaired = Some(collection::repair(&store));
            restore_lss(&saved);
            break;
        }
        restore_lss(&saved);
        // Loads what the type scan reads: its first page may be the last page of members
        // (the scan's bound sorts below the first type key), which point reads never load.
        type_entries(&store);
    }
    let repaired = repaired.expect("never had resident types and evicted members");
    assert!(
        repaired.is_err(),
        "a repair that could not read every member must fail, not answer {repaired:?}"
    );
    let left = type_entries(&store);
    assert_eq!(
        left,
        HASHES,
        "repair answered {repaired:?} and removed {} collections' type entries",
        HASHES - left
    );
}

struct Server {
    addr: std::net::SocketAddr,
    shutdown: std::sync::Arc<forest_server::shutdown::Shutdown>,
    thread: Option<std::thread::JoinHandle<forest_core::Result<()>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shutdown.request(false);
            let _ = thread.join();
        }
    }
}

// Goal: a transaction whose read failed has no effect: EXEC answers the storage error and
// writes nothing (as the change says), and its PUBLISH is not delivered either. Method: a
// hash evicted on a 16 KiB budget, the LSS damaged; MULTI, HGETALL h, PUBLISH, EXEC; a
// subscriber must hear nothing.
#[test]
fn a_refused_exec_publishes_nothing() {
    use crate::common::{assert_silent, Client, R};
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let config = forest_server::Config {
        dir: dir.clone(),
        engine: Some("bwtree".into()),
        memory_budget_bytes: Some(BUDGET),
        port: 0,
        io: forest_server::IoModel::Threads,
        threads: 2,
        durability: Durability::Periodic { interval_ms: 20 },
        ..forest_server::Config::default()
    };
    let server = forest_server::Server::open(config).expect("open");
    let addr = server.local_addr().expect("bound");
    let shutdown = server.shutdown_handle();
    let _server = Server {
        addr,
        shutdown,
        thread: Some(std::thread::spawn(move || server.run())),
    };
    let mut client = Client::connect(_server.addr);
    let value = "x".repeat(80);
    for from in (0..400).step_by(50) {
        let mut argv = vec!["HSET".to_string(), "h".to_string()];
        for i in from..from + 50 {
            argv.push(format!("f{i:05}"));
            argv.push(value.clone());
        }
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        assert!(!matches!(client.cmd(&argv), R::Err(_)));
    }
    for i in 0..1500 {
        let key = format!("k{i:05}");
        assert!(!matches!(client.cmd(&["SET", &key, &value]), R::Err(_)));
    }
    let began = Instant::now();
    loop {
        let info = client.cmd(&["INFO", "memory"]).text();
        let field = |name: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .expect("field")
                .trim()
                .parse()
                .expect("number")
        };
        if field("forest_evictions") > 0 && field("forest_resident_bytes") <= BUDGET + BUDGET / 4 {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(20), "no eviction");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut subscriber = Client::connect(_server.addr);
    subscriber.cmd(&["SUBSCRIBE", "ch"]);
    let saved = damage_lss(&dir);
    assert_eq!(client.cmd(&["MULTI"]), R::Simple("OK".into()));
    assert_eq!(client.cmd(&["HGETALL", "h"]), R::Simple("QUEUED".into()));
    assert_eq!(
        client.cmd(&["PUBLISH", "ch", "m"]),
        R::Simple("QUEUED".into())
    );
    let reply = client.cmd(&["EXEC"]);
    restore_lss(&saved);
    assert!(
        matches!(&reply, R::Err(t) if t.starts_with("ERR storage")),
        "EXEC: {reply:?}"
    );
    assert_silent(&mut subscriber);
}
