//! System transactions (TSBw §II-E; issue 17): a unit is one record, written only when the
//! SMO's CAS won; an abort frees what was allocated; the unit decoder never panics.
#![cfg(not(loom))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::Arc;

use forest_file::{Dir, SimDir};
use forest_llama::lss::{Lss, LssAddress, LssConfig, RecordKind};
use forest_llama::sys_txn::{
    decode_unit, encode_unit, read_unit, SysTxn, TxnOp, TxnOutcome, TxnStats, TxnUnit,
};
use forest_llama::MappingTable;
use proptest::prelude::*;

#[allow(dead_code)] // a state type needs 4-byte alignment for the tag bits
struct Nothing(u32);
impl forest_llama::PageState for Nothing {
    unsafe fn reclaim(ptr: *mut Self) {
        // SAFETY: the trait's contract; states are `Owned` allocations reclaimed once.
        drop(unsafe { crossbeam_epoch::Owned::from_raw(ptr) });
    }
}

fn open(sim: &SimDir) -> Lss {
    let config = LssConfig {
        segment_bytes: 64 << 10,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    Lss::open(dir, config, LssAddress::current(0)).unwrap().0
}

fn kinds(lss: &Lss) -> Vec<(LssAddress, RecordKind)> {
    let mut found = Vec::new();
    lss.scan(LssAddress::current(0), |at, header, _| {
        found.push((at, header.kind));
        Ok(())
    })
    .unwrap();
    found
}

// Goal: a committed transaction is one unit record holding its operations in order; a lost
// CAS leaves a filler and frees the allocated PID; an explicit abort writes nothing.
#[test]
fn a_unit_is_one_record_and_a_lost_cas_aborts() {
    let sim = SimDir::new(7);
    let lss = open(&sim);
    let stats = TxnStats::default();
    let table: MappingTable<Nothing> = MappingTable::new();

    let mut t = SysTxn::begin(&lss, &stats);
    let q = t.allocate(&table);
    t.update_d(q, None, 1, b"image of q".to_vec(), 3, 9);
    t.update_d(
        5,
        Some(LssAddress::current(100)),
        2,
        b"split".to_vec(),
        0,
        0,
    );
    assert_eq!(stats.active(), 1);
    let TxnOutcome::Committed(at) = t.commit_if(|| true, |_| panic!("nothing freed")).unwrap()
    else {
        panic!("the CAS won")
    };
    let mut lost = SysTxn::begin(&lss, &stats);
    let r = lost.allocate(&table);
    let mut freed = Vec::new();
    let outcome = lost.commit_if(|| false, |pid| freed.push(pid)).unwrap();
    assert_eq!(outcome, TxnOutcome::Aborted);
    assert_eq!(freed, vec![r]);
    let mut aborted = SysTxn::begin(&lss, &stats);
    let s = aborted.allocate(&table);
    let mut freed = Vec::new();
    aborted.abort(|pid| freed.push(pid));
    assert_eq!(freed, vec![s]);
    assert_eq!(
        (stats.committed(), stats.aborted(), stats.active()),
        (1, 2, 0)
    );

    lss.mk_stable(LssAddress::current(u64::MAX >> 4)).unwrap();
    let records = kinds(&lss);
    assert_eq!(
        records.iter().map(|(_, k)| *k).collect::<Vec<_>>(),
        vec![RecordKind::TxnUnit, RecordKind::FailedFlush],
        "one unit, one filler for the lost CAS, nothing for the abort"
    );
    assert_eq!(records[0].0, at);
    let unit = read_unit(&lss, at).unwrap();
    assert_eq!(
        unit.ops,
        vec![
            TxnOp::Allocate(q),
            TxnOp::UpdateD {
                pid: q,
                prev: None,
                kind: 1,
                bytes: b"image of q".to_vec()
            },
            TxnOp::UpdateD {
                pid: 5,
                prev: Some(LssAddress::current(100)),
                kind: 2,
                bytes: b"split".to_vec()
            },
        ]
    );
    let record = lss.read(at).unwrap();
    assert_eq!((record.header.lsn_low, record.header.lsn_high), (3, 9));
    assert!(
        read_unit(&lss, records[1].0).is_err(),
        "a filler is not a unit"
    );
}

// Goal: whatever is reserved after the CAS (a flush of the SMO's result) lies after the
// unit in the LSS. Method: the CAS closure stands for the SMO; a record posted after
// commit_if returns has a higher address.
#[test]
fn what_uses_the_result_lies_after_the_unit() {
    let sim = SimDir::new(8);
    let lss = open(&sim);
    let stats = TxnStats::default();
    let mut t = SysTxn::begin(&lss, &stats);
    t.free(9);
    let TxnOutcome::Committed(unit) = t.commit_if(|| true, |_| {}).unwrap() else {
        panic!("committed")
    };
    let after = lss
        .post(
            &forest_llama::lss::RecordHeader::new(RecordKind::PageImage, 9),
            b"x",
        )
        .unwrap();
    assert!(after > unit);
}

fn op_strategy() -> impl Strategy<Value = TxnOp> {
    prop_oneof![
        any::<u64>().prop_map(TxnOp::Allocate),
        any::<u64>().prop_map(TxnOp::Free),
        (
            any::<u64>(),
            proptest::option::of(0..(1u64 << 60)),
            any::<u8>(),
            proptest::collection::vec(any::<u8>(), 0..40)
        )
            .prop_map(|(pid, prev, kind, bytes)| TxnOp::UpdateD {
                pid,
                prev: prev.map(LssAddress::current),
                kind,
                bytes
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    // Goal: units round-trip; every strict prefix is refused (a torn unit never decodes).
    #[test]
    fn units_round_trip_and_prefixes_are_refused(
        txn in any::<u64>(),
        ops in proptest::collection::vec(op_strategy(), 0..8),
    ) {
        let bytes = encode_unit(txn, &ops);
        prop_assert_eq!(decode_unit(&bytes).unwrap(), TxnUnit { txn, ops });
        for cut in 0..bytes.len() {
            prop_assert!(decode_unit(&bytes[..cut]).is_err());
        }
    }

    // Goal: arbitrary bytes never panic the decoder; what it accepts re-encodes to them.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(unit) = decode_unit(&bytes) {
            prop_assert_eq!(encode_unit(unit.txn, &unit.ops), bytes);
        }
    }

    // Goal: a flipped byte of a valid unit either is refused or decodes to something that
    // re-encodes to the flipped bytes (never a panic, never a silent misread of the length).
    #[test]
    fn flipped_bytes_never_panic(
        txn in any::<u64>(),
        ops in proptest::collection::vec(op_strategy(), 1..6),
        at in any::<prop::sample::Index>(),
        bit in 0..8u8,
    ) {
        let mut bytes = encode_unit(txn, &ops);
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        if let Ok(unit) = decode_unit(&bytes) {
            prop_assert_eq!(encode_unit(unit.txn, &unit.ops), bytes);
        }
    }
}
