//! The registry's tests, as an integration test: in the crate they compiled the whole registry
//! (every engine's generic code) a second time in test mode: 160 of the 5 145 unit-seconds of
//! a `--timings` build of the workspace's tests (session 11, loaded machine).
#![allow(clippy::unwrap_used)]

use forest_engines::*;

fn spec(text: &str) -> EngineSpec {
    EngineSpec::parse(text).expect("valid")
}

// Goal: every engine builds with no parameters and with every parameter at its
// default, and both are the same canonical spec (the bare name).
#[test]
fn defaults_are_canonical_and_build() {
    for entry in ENGINES {
        let bare = spec(entry.name);
        let index = build(&bare).expect(entry.name);
        index.upsert(b"k", b"v").expect("upsert");
        let all: Vec<String> = entry
            .params
            .iter()
            .map(|p| format!("{}={}", p.key, p.default))
            .collect();
        let full = spec(&format!("{}:{}", entry.name, all.join(",")));
        build(&full).expect("every default builds");
        assert_eq!(canonical(&full).expect("ok"), bare, "{}", entry.name);
        assert_eq!(canonical(&bare).expect("ok"), bare);
        let resolved = (entry.resolve)(&bare).expect("ok");
        let keys: Vec<&str> = resolved.iter().map(|(k, _)| *k).collect();
        let listed: Vec<&str> = entry.params.iter().map(|p| p.key).collect();
        assert_eq!(
            keys, listed,
            "{}: resolve lists every parameter",
            entry.name
        );
        for ((_, value), param) in resolved.iter().zip(entry.params) {
            assert_eq!(value, param.default, "{}: {}", entry.name, param.key);
        }
    }
}

// Goal: the canonical form keeps non-defaults only, normalized, in registry order.
#[test]
fn canonical_keeps_what_differs() {
    let c = canonical(&spec("masstree:suffix=separate,fanout=15,prefetch=off")).expect("ok");
    assert_eq!(c.label(), "masstree:prefetch=off,suffix=separate");
    let c = canonical(&spec("masstree:fanout=15x32")).expect("ok");
    assert_eq!(c.label(), "masstree:fanout=15x32");
    let c = canonical(&spec("lockbtree:search=linear,order=016")).expect("ok");
    assert_eq!(c.label(), "lockbtree:order=16,search=linear");
    assert!(canonical(&spec("bwtree:page=x")).is_err());
}

// Goal: a typo gets an error naming every engine.
#[test]
fn unknown_names_list_the_known_ones() {
    let text = build(&spec("bwtre")).err().expect("unknown").to_string();
    for name in engine_names() {
        assert!(text.contains(name), "{text}");
    }
}

// Goal: the §6.2 factor-analysis specs build, and a wrong value or key names what is
// accepted. Method: build each, then check the error texts.
#[test]
fn masstree_knobs_parse_and_bad_values_name_the_accepted_ones() {
    for text in [
        "masstree:prefetch=off",
        "masstree:search=binary",
        "masstree:prefetch=on,search=linear",
        "masstree:permuter=off",
        "masstree:permuter=on,suffix=block",
        "masstree:suffix=separate",
        "masstree:suffix=layers,permuter=off",
        "masstree:fanout=15",
        "masstree:fanout=10x8",
        "masstree:fanout=15x32,suffix=separate",
    ] {
        let index = build(&spec(text)).expect(text);
        index.upsert(b"k", b"v").expect("upsert");
        let mut out = Vec::new();
        assert!(index.get(b"k", &mut out), "{text}");
        // A 20-byte key needs a layer only when suffixes are not stored.
        index.upsert(b"0123456789abcdefghij", b"v").expect("upsert");
        let layers = index.stats().counter("layers").expect("kept");
        assert_eq!(layers > 0, text.contains("suffix=layers"), "{text}");
    }
    let bad = |text: &str| build(&spec(text)).err().expect("refused").to_string();
    assert!(bad("masstree:prefetch=maybe").contains("on, off"));
    assert!(bad("masstree:search=fast").contains("linear, binary"));
    assert!(bad("masstree:permuter=maybe").contains("on, off"));
    assert!(bad("masstree:suffix=inline").contains("block, separate, layers"));
    assert!(bad("masstree:nodes=8").contains("prefetch, search, permuter, suffix, fanout"));
    assert!(bad("masstree:fanout=7").contains("15 (15x16), 10x8, 15x32"));
}

// Goal: the Fig. 5 and read-threshold sweep specs build; a bad value or key is refused
// with the accepted keys.
#[test]
fn bwtree_knobs_parse_and_bad_ones_are_named() {
    for text in [
        "bwtree:consolidate=8",
        "bwtree:read_consolidate=0",
        "bwtree:read_consolidate=4,consolidate=2,page=64,merge=8",
    ] {
        let index = build(&spec(text)).expect(text);
        index.upsert(b"k", b"v").expect("upsert");
    }
    let bad = |text: &str| build(&spec(text)).err().expect("refused").to_string();
    assert!(bad("bwtree:read_consolidate=many").contains("read_consolidate"));
    assert!(bad("bwtree:read_consolidate=2000").contains("read_consolidate_threshold"));
    assert!(bad("bwtree:chain=3").contains("page, consolidate, read_consolidate, merge"));
}

// Goal: tsbtree's parameters build, it says it is temporal, and bad values are named.
#[test]
fn tsbtree_knobs_parse() {
    let entry = find("tsbtree").expect("registered");
    assert!(entry.capabilities.temporal && entry.capabilities.in_memory);
    assert!(!entry.capabilities.durable_through_store);
    build(&spec(
        "tsbtree:page=4,index_page=4,consolidate=2,time_split=50",
    ))
    .expect("valid");
    let bad = |text: &str| build(&spec(text)).err().expect("refused").to_string();
    assert!(bad("tsbtree:page=2").contains("max_records_per_page"));
    assert!(bad("tsbtree:time_split=100").contains("time_split_percent"));
    assert!(bad("tsbtree:merge=3").contains("page, index_page, consolidate, time_split"));
}

// Goal: lockbtree's parameters build and bad ones are named.
#[test]
fn lockbtree_knobs_parse() {
    build(&spec("lockbtree:order=8,search=binary")).expect("valid");
    let bad = |text: &str| build(&spec(text)).err().expect("refused").to_string();
    assert!(bad("lockbtree:order=2").contains("order"));
    assert!(bad("lockbtree:search=fast").contains("linear, binary"));
    assert!(bad("lockbtree:fanout=3").contains("order, search"));
}

// Goal: the spec grammar: names, parameters, and lists where parameters continue.
#[test]
fn specs_parse_with_and_without_parameters() {
    let spec = EngineSpec::parse("lockbtree:order=16,search=linear").expect("valid");
    assert_eq!(spec.name, "lockbtree");
    assert_eq!(spec.params.len(), 2);
    assert_eq!(spec.label(), "lockbtree:order=16,search=linear");
    let list = split_list("lockbtree:order=16,search=linear,skiplist,lockbtree").expect("ok");
    let labels: Vec<_> = list.iter().map(EngineSpec::label).collect();
    assert_eq!(
        labels,
        ["lockbtree:order=16,search=linear", "skiplist", "lockbtree"]
    );
    assert!(EngineSpec::parse("lockbtree:order").is_err());
    assert!(EngineSpec::parse(":order=1").is_err());
}

// Goal: `persist` and `dir` are honoured, bad values are named, and the file is scratch.
// Method: build with msync in a temp dir, write and read, see the file, drop, see none.
#[test]
fn persist_and_dir_parse_and_the_file_is_scratch() {
    let dir = std::env::temp_dir().join(format!("forest-bztree-pm-test-{}", std::process::id()));
    let spec = EngineSpec::parse(&format!(
        "bztree-pm:persist=msync,dir={},node=256,heap_mib=16,descriptors=256",
        dir.display()
    ))
    .expect("valid spec");
    let index = build(&spec).expect("builds");
    index.upsert(b"k", b"v").expect("upsert");
    let mut out = Vec::new();
    assert!(index.get(b"k", &mut out) && out == b"v");
    assert_eq!(index.name(), "bztree-pm");
    let files = || std::fs::read_dir(&dir).expect("dir").count();
    assert_eq!(files(), 1, "one file in {}", dir.display());
    drop(index);
    assert_eq!(files(), 0, "the scratch file is removed");
    std::fs::remove_dir(&dir).expect("empty dir");
    let bad = EngineSpec::parse("bztree-pm:persist=fsync").expect("valid spec");
    let err = build(&bad).err().expect("fsync is not a persist mode");
    assert!(err.to_string().contains("clwb or msync"), "{err}");
}
