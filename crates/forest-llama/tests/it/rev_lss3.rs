//! Review rev-lss3 (session 19) of branch h-lss3: `inspect` on crafted segment headers.
//! Each test is ignored (the branch stays green); run one with
//! `cargo test -p forest-llama --test it -- rev_lss3:: --ignored`.
#![cfg(not(loom))]
#![allow(clippy::unwrap_used)]

use forest_file::{Dir, SimDir};
use forest_llama::lss::segment::{encode_header, segment_file_name};

fn put_segment(dir: &SimDir, sequence: u64, segment_bytes: u64) {
    let mut f = dir.create(&segment_file_name(sequence)).unwrap();
    f.append(&encode_header(sequence, segment_bytes)).unwrap();
    f.sync().unwrap();
    dir.sync_dir().unwrap();
}

// Goal (rev-lss3 F1): a segment header whose crc holds but whose segment size is 0 is damage
// that inspect (and so `forest check`) reports; it must not panic. main's check_segment
// guarded this (`segment_bytes.max(1)`); inspect divides by it.
#[test]
fn rev_f1_inspect_survives_a_zero_segment_size_header() {
    let dir = SimDir::new(1);
    put_segment(&dir, 0, 0);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        forest_llama::inspect::inspect(&dir)
    }));
    assert!(
        got.is_ok(),
        "inspect panicked on a segment header of size 0"
    );
    let problems = got.unwrap().unwrap().problems();
    assert!(
        problems.iter().any(|p| p.contains("segment size 0")),
        "{problems:?}"
    );
}

// Goal (rev-lss3 F1): a crc-valid header naming a huge sequence (a stray or crafted file)
// is reported, not a panic. main's check_segment used `saturating_mul`; inspect's
// `read_segment` multiplies `sequence * segment_bytes`.
#[test]
fn rev_f1_inspect_survives_a_huge_segment_sequence() {
    let dir = SimDir::new(2);
    put_segment(&dir, 0, 1 << 14);
    put_segment(&dir, u64::MAX / 4, 1 << 14);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        forest_llama::inspect::inspect(&dir)
    }));
    assert!(got.is_ok(), "inspect panicked on a huge segment sequence");
    let problems = got.unwrap().unwrap().problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("past the LSS's largest address")),
        "{problems:?}"
    );
}
