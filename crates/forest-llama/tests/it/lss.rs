//! The log-structured store over the simulated disk (issue 17, first increment): many
//! posters, power loss at random points, bit flips and I/O errors.
#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::sync::Arc;

use forest_file::{CrashMode, Dir, FaultKind, FaultPlan, OsDir, SimDir};
use forest_llama::lss::segment::{segment_file_name, SEGMENT_HEADER_BYTES};
use forest_llama::lss::{
    Lss, LssAddress, LssConfig, Record, RecordHeader, RecordKind, RECORD_HEADER_BYTES,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn dir_of(sim: &SimDir) -> Arc<dyn Dir> {
    Arc::new(sim.clone())
}

fn small_config(writer_thread_count: usize) -> LssConfig {
    LssConfig {
        segment_bytes: 32 << 10,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count,
    }
}

fn open(sim: &SimDir, config: &LssConfig, stable_at_least: u64) -> Lss {
    let (lss, _report) = Lss::open(
        dir_of(sim),
        config.clone(),
        LssAddress::current(stable_at_least),
    )
    .expect("open");
    lss
}

/// A record whose bytes follow from `pid` and `len`, so a read can be checked alone.
fn make_record(pid: u64, len: usize, prev: Option<LssAddress>) -> Record {
    let payload = (0..len)
        .map(|i| (pid.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect();
    Record {
        header: RecordHeader {
            kind: if prev.is_some() {
                RecordKind::DeltaRun
            } else {
                RecordKind::PageImage
            },
            pid,
            lsn_low: pid,
            lsn_high: pid + len as u64,
            prev,
        },
        payload,
    }
}

fn post(lss: &Lss, record: &Record) -> LssAddress {
    lss.post(&record.header, &record.payload).expect("post")
}

fn scan_all(lss: &Lss) -> forest_core::Result<BTreeMap<u64, Record>> {
    let mut found = BTreeMap::new();
    lss.scan(LssAddress::current(0), |address, header, payload| {
        found.insert(
            address.offset(),
            Record {
                header: *header,
                payload: payload.to_vec(),
            },
        );
        Ok(())
    })?;
    Ok(found)
}

// Goal: concurrent posters get disjoint, per-thread monotonic addresses and every record
// reads back exactly once it is stable. Method: 8 threads post records of random size (some
// larger than a buffer) through two small ping-pong buffers and two writer threads (writes
// complete out of order), calling Mk-Stable now and then; afterwards read and scan all.
#[test]
fn reservation_stress_eight_threads() {
    let sim = SimDir::new(1);
    let config = LssConfig {
        segment_bytes: 256 << 10,
        buffer_bytes: 16 << 10,
        buffer_count: 2,
        writer_thread_count: 2,
    };
    let lss = open(&sim, &config, 0);
    let per_thread = 1500u64;
    let posted: Vec<Vec<(LssAddress, Record)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8u64)
            .map(|t| {
                let lss = &lss;
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    let mut mine: Vec<(LssAddress, Record)> = Vec::new();
                    for i in 0..per_thread {
                        let len = if rng.random_ratio(1, 100) {
                            20_000
                        } else {
                            rng.random_range(0..2000)
                        };
                        let prev = mine.last().map(|(address, _)| *address);
                        let record = make_record(t * 1_000_000 + i, len, prev);
                        let address = post(lss, &record);
                        if let Some(prev) = prev {
                            assert!(address > prev, "thread {t}: {address} after {prev}");
                        }
                        if i % 300 == 299 {
                            let hi = lss.mk_stable(address).expect("mk_stable");
                            assert!(hi > address);
                            assert_eq!(lss.read(address).expect("read"), record);
                        }
                        mine.push((address, record));
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: BTreeMap<u64, Record> = posted
        .into_iter()
        .flatten()
        .map(|(address, record)| (address.offset(), record))
        .collect();
    assert_eq!(all.len() as u64, 8 * per_thread, "addresses are distinct");
    let last = *all.keys().next_back().unwrap();
    assert!(lss.mk_stable(LssAddress::current(last)).unwrap().offset() > last);
    let mut end_prev = 0;
    for (&address, record) in &all {
        let len = (RECORD_HEADER_BYTES + record.payload.len()) as u64;
        assert!(
            address >= end_prev,
            "record at {address} overlaps the one before"
        );
        assert_eq!(
            address / config.segment_bytes,
            (address + len - 1) / config.segment_bytes,
            "record at {address} crosses a segment boundary"
        );
        assert!(address % config.segment_bytes >= SEGMENT_HEADER_BYTES);
        end_prev = address + len;
        assert_eq!(&lss.read(LssAddress::current(address)).unwrap(), record);
    }
    assert_eq!(
        scan_all(&lss).unwrap(),
        all,
        "the scan finds exactly what was posted"
    );
    let stats = lss.stats();
    assert!(stats.oversize_count > 0, "{stats:?}");
    assert!(stats.buffers_written > 0, "{stats:?}");
    assert_eq!(stats.filler_count, 0);
    lss.close().unwrap();
}

// Goal: a power loss at any point keeps every record below Hi-Stable, cuts the tail cleanly
// (no record is half-read as valid, nothing stale follows new records) and the LSS goes on.
// Method: per seed, post random records with occasional Mk-Stable, crash in a random mode
// while the writers run, reopen with the old Hi-Stable as a known-stable bound, read and scan;
// then post more, make them stable, crash strictly and check them again.
#[test]
fn power_loss_keeps_everything_below_hi_stable() {
    let modes = [
        CrashMode::Random,
        CrashMode::Scatter,
        CrashMode::DropUnsynced,
    ];
    let (mut cut_count, mut lost_count) = (0, 0);
    for seed in 0..48u64 {
        let sim = SimDir::new(seed);
        let config = small_config(1 + (seed % 2) as usize);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut posted: BTreeMap<u64, Record> = BTreeMap::new();
        let lss = open(&sim, &config, 0);
        // Writes are fsynced at once, so a crash seldom finds written, unsynced bytes; every
        // fourth seed fails an fsync first, which leaves a random part of that buffer
        // durable (Linux's failed-fsync semantics), and then crashes.
        let sync_fault = seed % 4 == 3;
        if sync_fault {
            sim.set_faults(FaultPlan::sync(rng.random_range(3..12)));
        }
        for i in 0..rng.random_range(20..300u64) {
            let len = if rng.random_ratio(1, 30) {
                6000
            } else {
                rng.random_range(0..1500)
            };
            let record = make_record(seed * 10_000 + i, len, None);
            let Ok(address) = lss.post(&record.header, &record.payload) else {
                assert!(sync_fault, "seed {seed}: post failed");
                break;
            };
            posted.insert(address.offset(), record);
            if rng.random_ratio(1, 15) && lss.mk_stable(address).is_err() {
                assert!(sync_fault, "seed {seed}: mk_stable failed");
                break;
            }
        }
        let hi = lss.hi_stable().offset();
        sim.crash_with(modes[(seed % 3) as usize]);
        drop(lss);
        sim.set_faults(FaultPlan::default());
        let (lss, report) = Lss::open(dir_of(&sim), config.clone(), LssAddress::current(hi))
            .unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
        assert!(
            report.end.offset() + SEGMENT_HEADER_BYTES >= hi,
            "seed {seed}: end {} below hi {hi}",
            report.end
        );
        for (&address, record) in posted.range(..hi) {
            let got = lss.read(LssAddress::current(address));
            assert_eq!(got.as_ref().ok(), Some(record), "seed {seed}: {address}");
        }
        let found = scan_all(&lss).unwrap_or_else(|e| panic!("seed {seed}: scan: {e}"));
        for (address, record) in &found {
            assert_eq!(posted.get(address), Some(record), "seed {seed}: {address}");
        }
        assert!(found.len() >= posted.range(..hi).count(), "seed {seed}");
        cut_count += usize::from(report.cut.is_some());
        lost_count += usize::from(found.len() < posted.len());
        // The LSS goes on from the cut: new records are stable and survive a strict crash.
        let mut again = BTreeMap::new();
        for i in 0..30u64 {
            let record = make_record(seed * 10_000 + 5_000 + i, rng.random_range(0..900), None);
            again.insert(post(&lss, &record).offset(), record);
        }
        let last = *again.keys().next_back().unwrap();
        lss.mk_stable(LssAddress::current(last)).unwrap();
        let hi_again = lss.hi_stable().offset();
        sim.crash_with(CrashMode::DropUnsynced);
        drop(lss);
        let lss = open(&sim, &config, hi_again);
        let found = scan_all(&lss).unwrap();
        for (address, record) in again.iter().chain(posted.range(..hi)) {
            assert_eq!(found.get(address), Some(record), "seed {seed}: {address}");
        }
        for (address, record) in &found {
            // A new record may sit where a cut one was: the new one is expected there.
            let expected = again.get(address).or_else(|| posted.get(address));
            assert_eq!(
                expected,
                Some(record),
                "seed {seed}: stale record at {address}"
            );
        }
    }
    // The crashes did bite: some cut a torn tail, some lost records that were not stable.
    assert!(
        cut_count > 0 && lost_count > 0,
        "cuts {cut_count}, losses {lost_count}"
    );
}

/// Posts records until the LSS holds `segments` segments, the last with a few records;
/// returns them by address.
fn fill_segments(lss: &Lss, config: &LssConfig, segments: u64) -> BTreeMap<u64, Record> {
    let mut posted = BTreeMap::new();
    let mut pid = 1u64;
    let mut in_last = 0;
    while in_last < 5 {
        let record = make_record(pid, 700 + (pid as usize * 37) % 900, None);
        let address = post(lss, &record).offset();
        posted.insert(address, record);
        pid += 1;
        if address / config.segment_bytes == segments - 1 {
            in_last += 1;
        }
    }
    let last = *posted.keys().next_back().expect("records were posted");
    lss.mk_stable(LssAddress::current(last)).expect("mk_stable");
    posted
}

// Goal: a flipped bit is an error naming the segment file, the offset in it and the PID, on a
// read, on a scan, and at open when the damage lies below a known-stable address; without
// such a bound, damage in the last segment is a torn tail and is cut. Method: fill three
// segments, damage records with SimDir::damage, read, scan and reopen.
#[test]
fn bit_flips_are_reported_with_file_offset_and_pid() {
    let sim = SimDir::new(9);
    let config = small_config(1);
    let lss = open(&sim, &config, 0);
    let posted = fill_segments(&lss, &config, 3);
    let hi = lss.hi_stable().offset();
    lss.close().unwrap();

    // A payload byte of a record in segment 0.
    let (&address, record) = posted.iter().nth(5).unwrap();
    let at = address % config.segment_bytes;
    let name = segment_file_name(0);
    assert!(sim.damage(&name, |bytes| bytes
        [at as usize + RECORD_HEADER_BYTES + 1] ^=
        0x40));
    let lss = open(&sim, &config, hi);
    let text = lss
        .read(LssAddress::current(address))
        .unwrap_err()
        .to_string();
    for part in [
        name.clone(),
        format!("offset {at}"),
        format!("PID {}", record.header.pid),
        "bad checksum".to_string(),
    ] {
        assert!(text.contains(&part), "{part:?} missing: {text}");
    }
    let text = scan_all(&lss).unwrap_err().to_string();
    assert!(
        text.contains(&name) && text.contains(&format!("offset {at}")),
        "{text}"
    );
    // Its neighbours still read.
    let (&next, next_record) = posted.range(address + 1..).next().unwrap();
    assert_eq!(&lss.read(LssAddress::current(next)).unwrap(), next_record);
    drop(lss);

    // A length field of a record in the last segment: an error below a stable bound...
    let last_segment = (hi - 1) / config.segment_bytes;
    let (&address, record) = posted
        .range(last_segment * config.segment_bytes..)
        .nth(1)
        .unwrap();
    let at = address % config.segment_bytes;
    let name = segment_file_name(last_segment);
    assert!(sim.damage(&name, |bytes| bytes[at as usize + 9] ^= 0x08));
    let text = Lss::open(dir_of(&sim), config.clone(), LssAddress::current(hi))
        .unwrap_err()
        .to_string();
    for part in [
        name.clone(),
        format!("offset {at}"),
        format!("PID {}", record.header.pid),
    ] {
        assert!(text.contains(&part), "{part:?} missing: {text}");
    }
    // ...and a torn tail, cut there, without one.
    let (lss, report) = Lss::open(dir_of(&sim), config.clone(), LssAddress::current(0)).unwrap();
    let cut = report.cut.expect("the damaged tail is cut");
    assert_eq!(cut.offset, at);
    assert_eq!(report.end.offset(), address);
    assert!(
        cut.why.contains(&format!("PID {}", record.header.pid)),
        "{}",
        cut.why
    );
    // The scan of the last segment (segment 0 is still damaged) ends before the cut.
    let mut last_found = None;
    lss.scan(
        LssAddress::current(last_segment * config.segment_bytes),
        |found, _, _| {
            last_found = Some(found.offset());
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(
        last_found,
        posted.range(..address).next_back().map(|(a, _)| *a)
    );
}

// Goal: after ENOSPC or EIO on a segment write, or EIO on an fsync, nothing past the failed
// buffer counts as stable, posts and Mk-Stable fail naming the file, what was stable before
// reads back, and a reopened LSS works. Method: inject each fault with FaultPlan, post until
// the LSS refuses, check, clear the faults, reopen.
#[test]
fn write_and_sync_failures_stop_the_lss() {
    let plans = [
        FaultPlan::write(4, FaultKind::NoSpace),
        FaultPlan::write(3, FaultKind::Eio),
        FaultPlan::sync(5),
    ];
    for (case, plan) in plans.into_iter().enumerate() {
        let sim = SimDir::new(case as u64);
        let config = small_config(1);
        let lss = open(&sim, &config, 0);
        sim.set_faults(plan.clone());
        let mut posted = BTreeMap::new();
        let mut error = None;
        for pid in 0..10_000u64 {
            let record = make_record(pid, 500, None);
            let address = match lss.post(&record.header, &record.payload) {
                Ok(address) => address,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            };
            posted.insert(address.offset(), record);
            if pid % 7 == 6 {
                if let Err(e) = lss.mk_stable(address) {
                    error = Some(e);
                    break;
                }
            }
        }
        let text = error.expect("the fault stops the LSS").to_string();
        assert!(text.contains("/sim/lss-"), "case {case}: {text}");
        assert!(text.contains("refuses work"), "case {case}: {text}");
        let hi = lss.hi_stable().offset();
        let record = make_record(1, 10, None);
        let text = lss
            .post(&record.header, &record.payload)
            .unwrap_err()
            .to_string();
        assert!(text.contains("refuses work"), "case {case}: {text}");
        assert!(lss.mk_stable(LssAddress::current(hi)).is_err());
        assert_eq!(
            lss.hi_stable().offset(),
            hi,
            "case {case}: nothing more is stable"
        );
        for (&address, record) in posted.range(..hi) {
            assert_eq!(&lss.read(LssAddress::current(address)).unwrap(), record);
        }
        assert!(
            lss.close().is_err(),
            "case {case}: close reports the failure"
        );
        sim.set_faults(FaultPlan::default());
        sim.crash_with(CrashMode::DropUnsynced);
        let lss = open(&sim, &config, hi);
        for (&address, record) in posted.range(..hi) {
            assert_eq!(&lss.read(LssAddress::current(address)).unwrap(), record);
        }
        let address = post(&lss, &record);
        lss.mk_stable(address).unwrap();
        assert_eq!(lss.read(address).unwrap(), record);
    }
}

// Goal: the reservation API's edges: a record larger than a buffer, a reservation dropped
// unfilled (a failed-flush filler), an explicit failed flush naming its PID, a record larger
// than a segment (an error), Mk-Stable of a partly filled buffer, reads above Hi-Stable and of
// LSS-H addresses (errors). Method: one LSS, each case in turn.
#[test]
fn reservation_edges() {
    let sim = SimDir::new(3);
    let config = small_config(1);
    let lss = open(&sim, &config, 0);
    let small = make_record(1, 10, None);
    let first = post(&lss, &small);
    assert!(lss
        .read(first)
        .unwrap_err()
        .to_string()
        .contains("not stable yet"));
    let hi = lss.mk_stable(first).unwrap();
    assert!(hi > first, "Mk-Stable seals the partly filled buffer");
    assert_eq!(lss.read(first).unwrap(), small);

    let big = make_record(2, 3 * config.buffer_bytes as usize, Some(first));
    let big_at = post(&lss, &big);
    let dropped_at = lss.reserve(100).unwrap().address();
    let failed_at = {
        let reservation = lss.reserve(40).unwrap();
        let address = reservation.address();
        reservation.fail(77);
        address
    };
    lss.mk_stable(failed_at).unwrap();
    assert_eq!(lss.read(big_at).unwrap(), big);
    let filler = lss.read(dropped_at).unwrap();
    assert_eq!(filler.header.kind, RecordKind::FailedFlush);
    assert_eq!(filler.payload.len(), 100);
    let filler = lss.read(failed_at).unwrap();
    assert_eq!(filler.header.kind, RecordKind::FailedFlush);
    assert_eq!(filler.header.pid, 77);
    let stats = lss.stats();
    assert_eq!(
        (stats.oversize_count, stats.filler_count),
        (1, 1),
        "{stats:?}"
    );

    let text = lss
        .reserve(config.segment_bytes as usize)
        .err()
        .unwrap()
        .to_string();
    assert!(text.contains("larger than a segment"), "{text}");
    let text = lss.read(LssAddress::archive(100)).unwrap_err().to_string();
    assert!(text.contains("LSS-H"), "{text}");
    lss.close().unwrap();
}

// Goal: the LSS works on the real file system with the default sizes: records post, become
// stable, survive a close and reopen, and the reopened LSS appends after them. Method: a
// temporary directory, OsDir, 1 MiB buffers and 64 MiB segments.
#[test]
fn os_dir_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: Arc<dyn Dir> = Arc::new(OsDir::open(tmp.path().join("lss")).unwrap());
    let config = LssConfig::default();
    let (lss, report) =
        Lss::open(Arc::clone(&dir), config.clone(), LssAddress::current(0)).unwrap();
    assert_eq!(report.segment_count, 0);
    let mut posted = BTreeMap::new();
    for pid in 0..2000u64 {
        let record = make_record(pid, (pid as usize * 131) % 4000, None);
        posted.insert(post(&lss, &record).offset(), record);
    }
    lss.close().unwrap();
    let (lss, report) = Lss::open(Arc::clone(&dir), config, LssAddress::current(0)).unwrap();
    assert_eq!(report.cut, None);
    assert_eq!(report.scanned_record_count, posted.len() as u64);
    assert_eq!(scan_all(&lss).unwrap(), posted);
    let record = make_record(9999, 100, None);
    let address = post(&lss, &record);
    assert_eq!(address.offset(), report.end.offset());
    lss.mk_stable(address).unwrap();
    assert_eq!(lss.read(address).unwrap(), record);
}

// Goal: a last segment whose creation the crash cut short (a header or less) is removed at
// open, the log ends in the segment before, and that segment, wholly durable before the next
// one was created, must be valid to its end: damage there is an error, not a cut. Method:
// fill two segments, cut the second to 30 bytes, reopen; then also flip a byte in the first.
#[test]
fn a_cut_short_segment_creation_is_removed() {
    let sim = SimDir::new(21);
    let config = small_config(1);
    let lss = open(&sim, &config, 0);
    let posted = fill_segments(&lss, &config, 2);
    lss.close().unwrap();
    let second = segment_file_name(1);
    assert!(sim.damage(&second, |bytes| bytes.truncate(30)));
    let (lss, report) = Lss::open(dir_of(&sim), config.clone(), LssAddress::current(0)).unwrap();
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert!(report.removed[0].starts_with(&second), "{report:?}");
    assert!(!sim.list().unwrap().contains(&second));
    let in_first: BTreeMap<u64, Record> = posted
        .range(..config.segment_bytes)
        .map(|(a, r)| (*a, r.clone()))
        .collect();
    assert_eq!(scan_all(&lss).unwrap(), in_first);
    let record = make_record(4242, 3000, None);
    let address = post(&lss, &record);
    lss.mk_stable(address).unwrap();
    assert_eq!(lss.read(address).unwrap(), record);
    lss.close().unwrap();

    // The same cut-short second segment over damage inside the first: an error naming the
    // first segment's file, offset and PID, not a cut.
    let sim = SimDir::new(22);
    let lss = open(&sim, &config, 0);
    let posted = fill_segments(&lss, &config, 2);
    lss.close().unwrap();
    assert!(sim.damage(&second, |bytes| bytes.truncate(30)));
    let (&victim, record) = posted.iter().nth(3).unwrap();
    let at = victim % config.segment_bytes;
    let first = segment_file_name(0);
    assert!(
        sim.damage(&first, |bytes| bytes[at as usize + RECORD_HEADER_BYTES] ^=
            1)
    );
    let text = Lss::open(dir_of(&sim), config.clone(), LssAddress::current(0))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    for part in [
        first,
        format!("offset {at}"),
        format!("PID {}", record.header.pid),
    ] {
        assert!(text.contains(&part), "{part:?} missing: {text}");
    }
}
