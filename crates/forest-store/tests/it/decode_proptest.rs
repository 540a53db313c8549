//! The decoders on damaged input (issue 5 "Torn and corrupted files": truncate logs and
//! checkpoints at random offsets and flip random bytes; recovery must either recover a
//! correct prefix or report the corruption — never panic, never return wrong data). The
//! fuzz targets in `fuzz/` do the same without bounds; this runs in the normal test suite.

use std::path::Path;

use forest_core::{Error, Index};
use forest_store::checkpoint::{self, CheckpointStream};
use forest_store::file::{Dir, MemFile, SimDir};
use forest_store::wal::{
    decode_log, encode_header, encode_record, LogHeader, LogStream, Op, Record,
};
use proptest::prelude::*;

/// An owned log record.
type Owned = (u64, Op, Vec<u8>, Vec<u8>);

/// A checkpoint's entries, owned.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn arb_records() -> impl Strategy<Value = Vec<Owned>> {
    prop::collection::vec(
        (
            1u64..4,
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 0..24),
            prop::collection::vec(any::<u8>(), 0..300),
        ),
        0..25,
    )
    .prop_map(|items| {
        let mut lsn = 0;
        items
            .into_iter()
            .map(|(step, put, key, value)| {
                lsn += step;
                if put {
                    (lsn, Op::Put, key, value)
                } else {
                    (lsn, Op::Remove, key, Vec::new())
                }
            })
            .collect()
    })
}

/// The encoded log and the end offset of each record.
fn encode_log(records: &[Owned]) -> (Vec<u8>, Vec<usize>) {
    let mut buf = Vec::new();
    let header = LogHeader::new(0, 1, 1);
    encode_header(&header, &mut buf);
    let mut ends = Vec::new();
    for (lsn, op, key, value) in records {
        let record = Record {
            lsn: *lsn,
            op: *op,
            batch_more: false,
            key,
            value,
            ts: (lsn % 3 == 0).then_some(lsn * 1_000),
        };
        encode_record(&record, header.nonce, &mut buf).expect("within limits");
        ends.push(buf.len());
    }
    (buf, ends)
}

/// Decodes `data` both ways, checks they agree, and returns the records or the error's
/// offset.
fn decode_both(data: &[u8]) -> Result<Vec<Owned>, u64> {
    let whole = decode_log(Path::new("/p/log"), data).map(|d| {
        d.records
            .iter()
            .map(|r| (r.lsn, r.op, r.key.to_vec(), r.value.to_vec()))
            .collect::<Vec<_>>()
    });
    let streamed = (|| {
        let mut s = LogStream::from_file(Box::new(MemFile::new("/p/log", data.to_vec())))?;
        let mut out = Vec::new();
        while s.advance()? {
            let r = s.record().expect("current");
            out.push((r.lsn, r.op, r.key.to_vec(), r.value.to_vec()));
        }
        Ok::<_, Error>(out)
    })();
    let offset = |r: Result<Vec<Owned>, Error>| {
        r.map_err(|e| match e {
            Error::Corrupt { path, offset, .. } => {
                assert_eq!(path, Path::new("/p/log"), "the error names the file");
                offset
            }
            other => panic!("only corruption expected: {other}"),
        })
    };
    let (whole, streamed) = (offset(whole), offset(streamed));
    assert_eq!(whole, streamed, "the two readers agree");
    whole
}

/// A checkpoint of `entries` (keys made unique by the index), its bytes and its entries.
fn encode_checkpoint(entries: &[(Vec<u8>, Vec<u8>)]) -> (Vec<u8>, Entries) {
    let index = forest_lockbtree::LockBTree::new();
    for (k, v) in entries {
        index.upsert(k, v).expect("within limits");
    }
    let dir = SimDir::new(0);
    checkpoint::write(&dir, &index, 5, || 9).expect("write");
    let mut bytes = Vec::new();
    dir.open(&checkpoint::checkpoint_tmp_name(5))
        .and_then(|f| f.read_all(&mut bytes))
        .expect("read");
    // The index keeps each key's last value, in key order.
    let expected: std::collections::BTreeMap<_, _> = entries.iter().cloned().collect();
    (bytes, expected.into_iter().collect())
}

/// Loads a checkpoint both ways, checks they agree; the entries or the error's offset.
fn load_both(data: &[u8]) -> Result<Entries, u64> {
    let offset = |e: Error| match e {
        Error::Corrupt { offset, .. } => offset,
        other => panic!("only corruption expected: {other}"),
    };
    let whole = checkpoint::decode(Path::new("/p/cp"), data).map(|(_, entries)| {
        entries
            .into_iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect::<Vec<_>>()
    });
    let streamed = (|| {
        let mut s = CheckpointStream::from_file(Box::new(MemFile::new("/p/cp", data.to_vec())))?;
        let mut out = Vec::new();
        while let Some((k, v)) = s.next_entry()? {
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok::<_, Error>(out)
    })();
    let (whole, streamed) = (whole.map_err(offset), streamed.map_err(offset));
    assert_eq!(whole, streamed, "the two loaders agree");
    whole
}

fn arb_entries() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
    prop::collection::vec(
        (
            prop::collection::vec(any::<u8>(), 0..16),
            prop::collection::vec(any::<u8>(), 0..200),
        ),
        0..20,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 256 } else { 2048 }))]

    // Goal: a log cut anywhere decodes to exactly the records wholly before the cut. Method:
    // random records, a random cut.
    #[test]
    fn truncated_log_is_a_prefix(records in arb_records(), cut in any::<prop::sample::Index>()) {
        let (data, ends) = encode_log(&records);
        let len = cut.index(data.len() + 1);
        let decoded = decode_both(&data[..len]).expect("a cut is a torn tail, not corruption");
        let whole = ends.iter().take_while(|&&end| end <= len).count();
        prop_assert_eq!(decoded, records[..whole].to_vec());
    }

    // Goal: one flipped bit gives a prefix of the records (damage in the last record: a torn
    // tail) or corruption at the damaged record's offset, never other data. Method: random
    // records, one random bit flipped.
    #[test]
    fn flipped_log_is_a_prefix_or_named(records in arb_records(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (mut data, ends) = encode_log(&records);
        let at = at.index(data.len());
        data[at] ^= 1 << bit;
        match decode_both(&data) {
            Ok(decoded) => {
                prop_assert!(decoded.len() <= records.len());
                prop_assert_eq!(&decoded[..], &records[..decoded.len()]);
                // Only the damaged record and what follows may be lost.
                let damaged = ends.iter().take_while(|&&end| end <= at).count();
                prop_assert!(decoded.len() >= damaged.min(records.len()));
            }
            Err(offset) => {
                prop_assert!(offset <= at as u64, "the offset {} is at or before the damage {}", offset, at);
            }
        }
    }

    // Goal: random bytes never panic a reader, and what decodes is well-formed. Method:
    // random bytes, raw and behind a valid header.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        for data in [bytes.clone(), [encode_log(&[]).0, bytes.clone()].concat()] {
            if let Ok(records) = decode_both(&data) {
                prop_assert!(records.windows(2).all(|w| w[0].0 < w[1].0));
            }
            let _ = load_both(&data);
        }
    }

    // Goal: a checkpoint cut short or with one flipped bit is refused with an offset inside
    // the file, never loaded as other data; whole, it loads exactly. Method: random entries,
    // a random cut or flip.
    #[test]
    fn damaged_checkpoint_is_refused(entries in arb_entries(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (data, expected) = encode_checkpoint(&entries);
        prop_assert_eq!(load_both(&data), Ok(expected));
        let cut = at.index(data.len());
        let offset = load_both(&data[..cut]).expect_err("a cut checkpoint is refused");
        prop_assert!(offset <= cut as u64);
        let mut flipped = data.clone();
        flipped[cut] ^= 1 << bit;
        let offset = load_both(&flipped).expect_err("a flipped checkpoint is refused");
        prop_assert!(offset < data.len() as u64);
    }
}
