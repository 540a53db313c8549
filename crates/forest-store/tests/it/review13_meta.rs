//! Review of issue 13 (skeptical reviewer's tests): META format 3, reading stores written by
//! the code before it, damage at every byte, and engine spec resolution (canonical specs,
//! conflicts, `open_with_index`, `verify`). Three failed on e3b3192 and pass since the fixes:
//! `open_with_index_does_not_silently_replace_the_recorded_spec` (F1: open_with_index now
//! checks the recorded spec), `a_newer_meta_is_refused_not_overwritten` (F3: a newer META
//! format is its own error, never rewritten) and `verify_with_another_engine_reports_the_conflict`
//! (F4: `forest check --engine X` reports what an open would refuse).

use forest_core::Index;
use forest_engines::{build, canonical, EngineSpec};
use forest_store::file::{CrashMode, SimDir};
use forest_store::meta::{self, META_BYTES, META_FILE_NAME, META_MAGIC};
use forest_store::{Durability, Store, StoreOptions};

fn opts(engine: Option<&str>) -> StoreOptions {
    StoreOptions {
        engine: engine.map(str::to_string),
        durability: Durability::Sync,
        shards: 1,
        switch_engine: false,
        memory_budget_bytes: None,
        map_checkpoint_wal_bytes: None,
    }
}

fn switch(engine: &str) -> StoreOptions {
    StoreOptions {
        switch_engine: true,
        ..opts(Some(engine))
    }
}

/// A closed store in a simulated directory created with `engine`, holding two keys.
fn store_with(engine: &str, seed: u64) -> SimDir {
    let dir = SimDir::new(seed);
    let store = Store::open(dir.clone(), opts(Some(engine))).expect("create");
    store.upsert(b"a", b"1").expect("upsert");
    store.upsert(b"b", b"2").expect("upsert");
    store.close().expect("close");
    dir
}

fn meta_bytes(dir: &SimDir) -> Vec<u8> {
    dir.durable_bytes(META_FILE_NAME).expect("META exists")
}

fn replace_meta(dir: &SimDir, bytes: &[u8]) {
    assert!(dir.damage(META_FILE_NAME, |b| *b = bytes.to_vec()));
}

/// A version 1 or 2 file as the code before issue 13 wrote it (docs/FORMAT.md).
fn old_meta(version: u32, engine: &str, durable_through: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; 64];
    bytes[..8].copy_from_slice(&META_MAGIC);
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    bytes[12..16].copy_from_slice(&(engine.len() as u32).to_le_bytes());
    bytes[16..16 + engine.len()].copy_from_slice(engine.as_bytes());
    bytes[48..56].copy_from_slice(&durable_through.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

// Goal: a store made with a full spec records it canonically in a 256-byte version 3 file,
// an equivalent spell of it reopens, another is refused. Method: create, inspect META's
// bytes, reopen three ways.
#[test]
fn v3_records_the_canonical_spec_and_refuses_another() {
    let dir = store_with("masstree:fanout=15x32,prefetch=on", 1);
    let bytes = meta_bytes(&dir);
    assert_eq!(bytes.len(), META_BYTES);
    assert_eq!(&bytes[..8], &META_MAGIC);
    // Version 4 since session 12 (version 3's layout plus the retention threshold and the
    // key layout).
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 4);
    let m = meta::decode(std::path::Path::new("/sim/META"), &bytes).expect("decode");
    assert_eq!(m.engine, "masstree:fanout=15x32");
    assert!(
        m.durable_through > 0,
        "a clean close records durable_through"
    );
    let store = Store::open(dir.clone(), opts(Some("masstree:fanout=15x32"))).expect("same");
    assert_eq!(store.stats().engine, "masstree:fanout=15x32");
    store.close().expect("close");
    let err = Store::open(dir.clone(), opts(Some("masstree"))).expect_err("other parameters");
    assert!(err.to_string().contains("masstree:fanout=15x32"), "{err}");
    let store = Store::open(dir.clone(), opts(None)).expect("recorded");
    assert_eq!(store.stats().engine, "masstree:fanout=15x32");
    assert_eq!(store.to_vec().len(), 2);
    store.close().expect("close");
}

// Goal: a store whose META the code before issue 13 wrote (versions 1 and 2, 64 bytes)
// opens with its engine, keeps durable_through, refuses another engine, and is rewritten as
// version 3 at its next clean close. Method: swap a hand-made old META into a closed store.
#[test]
fn old_meta_versions_open_and_upgrade() {
    for version in [1u32, 2] {
        let dir = store_with("bwtree", 2);
        let durable = u64_at(&meta_bytes(&dir), 16);
        let recorded = if version == 1 { 0 } else { durable };
        replace_meta(&dir, &old_meta(version, "bwtree", recorded));
        let err = Store::open(dir.clone(), opts(Some("masstree"))).expect_err("conflict");
        assert!(err.to_string().contains("`bwtree`"), "{err}");
        let store = Store::open(dir.clone(), opts(None)).expect("old META opens");
        assert_eq!(store.stats().engine, "bwtree");
        assert_eq!(store.to_vec().len(), 2);
        // Still the old file while open (nothing to record yet) ...
        assert_eq!(meta_bytes(&dir).len(), 64);
        store.close().expect("close");
        // ... and version 3 after the clean close.
        let bytes = meta_bytes(&dir);
        assert_eq!(bytes.len(), META_BYTES, "version {version}");
        let m = meta::decode(std::path::Path::new("/sim/META"), &bytes).expect("v3");
        assert_eq!(m.engine, "bwtree");
        assert!(m.durable_through >= durable);
    }
}

// Goal: damage at any byte of a version 3 META, and any other length, is refused at an open
// that names no engine, naming META, and reported by verify. Method: flip one bit at each
// offset of a real store's META; then truncate and extend it.
#[test]
fn every_byte_of_meta_is_checked_at_open() {
    let dir = store_with("lockbtree:order=16", 3);
    let good = meta_bytes(&dir);
    for at in 0..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = good.clone();
            bad[at] ^= bit;
            replace_meta(&dir, &bad);
            let err = Store::open(dir.clone(), opts(None)).expect_err("damaged META");
            assert!(err.to_string().contains("META"), "byte {at}: {err}");
            let report = Store::verify(dir.clone(), None).expect("verify");
            assert!(report.meta_error.is_some(), "byte {at}");
        }
    }
    for len in [0, 1, 63, 64, 65, 128, 255, 257, 512] {
        let mut bad = good.clone();
        bad.resize(len, 0);
        replace_meta(&dir, &bad);
        assert!(
            Store::open(dir.clone(), opts(None)).is_err(),
            "length {len}"
        );
    }
    replace_meta(&dir, &good);
    let store = Store::open(dir.clone(), opts(None)).expect("restored");
    assert_eq!(store.stats().engine, "lockbtree:order=16");
    store.close().expect("close");
}

// Goal: a switch interrupted by a power loss leaves the old or the new engine recorded,
// never a mix, and the data. Method: switch, crash without a close (random prefix of the
// unsynced name changes), reopen naming none; many seeds.
#[test]
fn a_crash_around_a_switch_keeps_one_spec() {
    for seed in 0..40 {
        let dir = store_with("masstree:fanout=10x8", 100 + seed);
        let store = Store::open(dir.clone(), switch("bwtree:page=64")).expect("switch");
        store.upsert(b"c", b"3").expect("upsert");
        drop(store);
        dir.crash_with(if seed % 2 == 0 {
            CrashMode::Random
        } else {
            CrashMode::Scatter
        });
        let store = Store::open(dir.clone(), opts(None)).expect("reopen");
        let engine = store.stats().engine;
        assert!(
            engine == "masstree:fanout=10x8" || engine == "bwtree:page=64",
            "seed {seed}: {engine}"
        );
        assert!(store.to_vec().len() >= 2, "seed {seed}");
        store.close().expect("close");
    }
}

// Goal (issue 13: "reopening with a conflicting spec is a clear error"): `open_with_index`
// must not replace the recorded spec without `switch_engine` either. Method: create with
// `masstree:fanout=15x32`, then open_with_index naming `lockbtree`, then open naming none.
#[test]
fn open_with_index_does_not_silently_replace_the_recorded_spec() {
    let dir = store_with("masstree:fanout=15x32", 4);
    let make = || -> Box<dyn Index> { build(&EngineSpec::bare("lockbtree")).expect("build") };
    let opened = Store::open_with_index(dir.clone(), opts(Some("lockbtree")), &make);
    if let Ok(store) = opened {
        store.close().expect("close");
        let store = Store::open(dir.clone(), opts(None)).expect("reopen");
        let engine = store.stats().engine;
        store.close().expect("close");
        panic!(
            "open_with_index(\"lockbtree\") on a `masstree:fanout=15x32` store was accepted \
             without switch_engine; the next plain open uses `{engine}`"
        );
    }
}

// Goal: a META written by a newer build (a version this build does not know, another size)
// is refused as such, and is not overwritten when an engine is named: the mirror of what the
// code before issue 13 does to a version 3 file (it reads "meta file is 256 bytes, 64
// expected" as damage, and an open naming an engine rewrites it as version 2, dropping the
// spec's parameters and durable_through). Method: a well-formed 512-byte version 5 file
// (version 4 is this build's since the retention threshold and the key layout).
#[test]
fn a_newer_meta_is_refused_not_overwritten() {
    let dir = store_with("masstree:fanout=15x32", 5);
    let mut newer = vec![0u8; 512];
    newer[..8].copy_from_slice(&META_MAGIC);
    newer[8..12].copy_from_slice(&5u32.to_le_bytes());
    let crc = crc32c::crc32c(&newer[..508]);
    newer[508..].copy_from_slice(&crc.to_le_bytes());
    replace_meta(&dir, &newer);
    let err = Store::open(dir.clone(), opts(None)).expect_err("newer META");
    let named = Store::open(dir.clone(), opts(Some("masstree")));
    let overwritten = meta_bytes(&dir) != newer;
    if let Ok(store) = named {
        store.close().expect("close");
    }
    assert!(
        err.to_string().contains("version 5") && !overwritten,
        "the error should say the file is a newer version: {err}; an open naming an \
         engine overwrote it: {overwritten}"
    );
}

// Goal: `forest check --engine X` and an open with X agree: verify of a store recorded with
// another spec reports the conflict an open would refuse (else check says "recovers" for a
// spec no open without --switch-engine accepts). Method: verify a bwtree store naming
// masstree.
#[test]
fn verify_with_another_engine_reports_the_conflict() {
    let dir = store_with("bwtree", 6);
    assert!(Store::open(dir.clone(), opts(Some("masstree"))).is_err());
    let report = Store::verify(dir.clone(), Some("masstree")).expect("verify");
    assert!(
        !report.problems().is_empty() || report.recovery.is_err(),
        "verify naming masstree on a bwtree store reports nothing: engine {} recorded {:?}",
        report.engine,
        report.engine_recorded
    );
}

// Goal: for every engine, canonical() accepts exactly what build() accepts, is idempotent,
// round-trips through its label, and two specs get one canonical form exactly when they
// resolve to the same parameters. Method: every masstree combination (with aliases) and a
// grid of numeric values for bwtree and lockbtree.
#[test]
fn canonical_and_build_agree() {
    let mut specs: Vec<String> = Vec::new();
    for prefetch in ["", "prefetch=on", "prefetch=off"] {
        for search in ["", "search=linear", "search=binary"] {
            for permuter in ["", "permuter=on", "permuter=off"] {
                for suffix in ["", "suffix=block", "suffix=separate", "suffix=layers"] {
                    for fanout in [
                        "",
                        "fanout=15",
                        "fanout=15x16",
                        "fanout=10x8",
                        "fanout=15x32",
                    ] {
                        let params: Vec<&str> = [prefetch, search, permuter, suffix, fanout]
                            .into_iter()
                            .filter(|p| !p.is_empty())
                            .collect();
                        specs.push(format!("masstree:{}", params.join(",")));
                    }
                }
            }
        }
    }
    let numbers = [
        "0",
        "1",
        "2",
        "3",
        "4",
        "7",
        "8",
        "16",
        "+16",
        "016",
        "-1",
        "32",
        "64",
        "128",
        "255",
        "256",
        "1000",
        "1024",
        "4096",
        "65536",
        "99999999999999999999",
        "x",
    ];
    for n in numbers {
        specs.push(format!("lockbtree:order={n}"));
        specs.push(format!("lockbtree:order={n},search=linear"));
        for key in ["page", "consolidate", "read_consolidate", "merge"] {
            specs.push(format!("bwtree:{key}={n}"));
            specs.push(format!("bwtree:page=4096,{key}={n}"));
        }
    }
    specs.extend(
        [
            "masstree:fanout=15x32,fanout=15",
            "masstree:",
            "masstree:,",
            "lockbtree:order=16,order=128",
            "bwtree:page=64,merge=0",
            "bwtree:page= 64",
            "masstree:Fanout=15x32",
            "masstree:fanout=15X32",
        ]
        .map(str::to_string),
    );
    let mut by_label: std::collections::HashMap<String, String> = Default::default();
    for text in &specs {
        let spec = EngineSpec::parse(text).expect("grammar");
        let c = canonical(&spec);
        let b = build(&spec);
        assert_eq!(c.is_ok(), b.is_ok(), "{text}: canonical {c:?} vs build");
        let Ok(c) = c else { continue };
        let label = c.label();
        let again = canonical(&EngineSpec::parse(&label).expect("label parses")).expect("ok");
        assert_eq!(
            again, c,
            "{text}: canonical is idempotent through its label"
        );
        build(&c).expect("the canonical spec builds");
        assert!(label.len() <= meta::ENGINE_SPEC_BYTES_MAX, "{label}");
        // Same canonical label <=> same fully resolved parameters.
        let entry = forest_engines::find(&spec.name).expect("known");
        let resolved = format!("{:?}", (entry.resolve)(&spec).expect("resolves"));
        if let Some(prev) = by_label.insert(label.clone(), resolved.clone()) {
            assert_eq!(prev, resolved, "{label} names two configurations");
        }
    }
}
