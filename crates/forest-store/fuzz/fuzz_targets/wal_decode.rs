//! Arbitrary bytes as a log file: the whole-file decoder and the streaming reader never
//! panic, and they agree on every input (the same records, valid length and torn tail, or
//! corruption at the same offset). Each input is tried raw, and as the recipe of a valid log
//! (records cut from the input) damaged by its last bytes (a cut and a bit flip), so the
//! fuzzer reaches the record checks without having to forge checksums.
#![no_main]

use std::path::Path;

use forest_core::Error;
use forest_store::file::MemFile;
use forest_store::wal::{decode_log, encode_header, encode_record, LogHeader, LogStream, Op, Record};
use libfuzzer_sys::fuzz_target;

type Outcome = Result<(Vec<(u64, Vec<u8>, Vec<u8>)>, u64, Option<(u64, u64)>), u64>;

fn offset(e: Error) -> u64 {
    match e {
        Error::Corrupt { offset, .. } => offset,
        other => panic!("a decoder of bytes in memory fails only with Corrupt: {other}"),
    }
}

fn whole(data: &[u8]) -> Outcome {
    let d = decode_log(Path::new("/fuzz/log"), data).map_err(offset)?;
    let records = d
        .records
        .iter()
        .map(|r| (r.lsn, r.key.to_vec(), r.value.to_vec()))
        .collect();
    Ok((records, d.valid_len, d.torn.map(|t| (t.offset, t.bytes))))
}

fn streamed(data: &[u8]) -> Outcome {
    let file = Box::new(MemFile::new("/fuzz/log", data.to_vec()));
    let mut stream = LogStream::from_file(file).map_err(offset)?;
    let mut records = Vec::new();
    while stream.advance().map_err(offset)? {
        let r = stream.record().expect("advance returned true");
        records.push((r.lsn, r.key.to_vec(), r.value.to_vec()));
    }
    let valid_len = stream.valid_len().expect("the stream ended");
    Ok((records, valid_len, stream.torn().map(|t| (t.offset, t.bytes))))
}

/// A valid log whose records are cut from `data`, then cut short and a bit flipped as the
/// last four bytes of `data` say.
fn damaged_log(data: &[u8]) -> Vec<u8> {
    let (recipe, damage) = data.split_at(data.len().saturating_sub(4));
    let mut log = Vec::new();
    let header = LogHeader {
        nonce: 7,
        ..LogHeader::new(0, 1, 1)
    };
    encode_header(&header, &mut log);
    let mut lsn = 0u64;
    for chunk in recipe.chunks(24) {
        let (head, rest) = chunk.split_at(1.min(chunk.len()));
        lsn += 1 + u64::from(head.first().copied().unwrap_or(0) & 1);
        let split = rest.len() / 3;
        let remove = head.first().is_some_and(|b| b & 2 != 0);
        let record = Record {
            lsn,
            op: if remove { Op::Remove } else { Op::Put },
            batch_more: false,
            key: &rest[..split],
            value: if remove { &[] } else { &rest[split..] },
            ts: head.first().is_some_and(|b| b & 4 != 0).then_some(lsn),
        };
        encode_record(&record, header.nonce, &mut log).expect("small records fit the limits");
    }
    if let [cut, flip_at, flip_hi, bit] = *damage {
        let len = log.len();
        if cut & 1 == 1 {
            log.truncate(len - usize::from(cut) % len.min(64));
        }
        let at = (usize::from(flip_hi) << 8 | usize::from(flip_at)) % log.len().max(1);
        if bit & 0x80 != 0 {
            if let Some(byte) = log.get_mut(at) {
                *byte ^= 1 << (bit & 7);
            }
        }
    }
    log
}

fn check(data: &[u8]) {
    let outcome = whole(data);
    if let Ok((records, valid_len, torn)) = &outcome {
        assert!(*valid_len <= data.len() as u64);
        assert_eq!(torn.map_or(data.len() as u64, |(at, _)| at), *valid_len);
        assert!(records.windows(2).all(|w| w[0].0 < w[1].0), "LSNs ascend");
    }
    assert_eq!(streamed(data), outcome);
}

fuzz_target!(|data: &[u8]| {
    check(data);
    check(&damaged_log(data));
});
