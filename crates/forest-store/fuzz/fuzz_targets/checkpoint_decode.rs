//! Arbitrary bytes as a checkpoint: the whole-file decoder and the streaming loader never
//! panic, and they agree on every input (the same entries and trailer, or corruption at the
//! same offset). Each input is tried raw, and as a valid checkpoint written from the input's
//! bytes (keys made ascending) damaged by its last bytes, so the fuzzer reaches the entry and
//! trailer checks without forging checksums.
#![no_main]

use std::path::Path;

use forest_core::Error;
use forest_core::Index;
use forest_store::checkpoint::{decode, write, CheckpointInfo, CheckpointStream};
use forest_store::file::{Dir, MemFile, SimDir};
use libfuzzer_sys::fuzz_target;

type Outcome = Result<(CheckpointInfo, Vec<(Vec<u8>, Vec<u8>)>), u64>;

fn offset(e: Error) -> u64 {
    match e {
        Error::Corrupt { offset, .. } => offset,
        // A format version newer than the build reads is refused, not damage: the version.
        Error::Config(text) if text.contains("newer than this build reads") => 8,
        other => panic!("a decoder of bytes in memory fails only with Corrupt: {other}"),
    }
}

fn whole(data: &[u8]) -> Outcome {
    let (info, entries) = decode(Path::new("/fuzz/cp"), data).map_err(offset)?;
    let entries = entries
        .into_iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    Ok((info, entries))
}

fn streamed(data: &[u8]) -> Outcome {
    let file = Box::new(MemFile::new("/fuzz/cp", data.to_vec()));
    let mut stream = CheckpointStream::from_file(file).map_err(offset)?;
    let mut entries = Vec::new();
    while let Some((k, v)) = stream.next_entry().map_err(offset)? {
        entries.push((k.to_vec(), v.to_vec()));
    }
    Ok((stream.info().expect("complete"), entries))
}

/// A checkpoint of entries cut from `data`, cut short and a bit flipped as the last four
/// bytes of `data` say.
fn damaged_checkpoint(data: &[u8]) -> Vec<u8> {
    let (recipe, damage) = data.split_at(data.len().saturating_sub(4));
    let index = forest_lockbtree::LockBTree::new();
    for chunk in recipe.chunks(16) {
        let split = chunk.len() / 2;
        index
            .upsert(&chunk[..split], &chunk[split..])
            .expect("small entries fit the limits");
    }
    let dir = SimDir::new(0);
    write(&dir, &index, 1, || 0).expect("a simulated disk without faults");
    let mut bytes = Vec::new();
    dir.open(&forest_store::checkpoint::checkpoint_tmp_name(1))
        .and_then(|f| f.read_all(&mut bytes))
        .expect("the file just written");
    if let [cut, flip_at, flip_hi, bit] = *damage {
        let len = bytes.len();
        if cut & 1 == 1 {
            bytes.truncate(len - usize::from(cut) % len.min(64));
        }
        let at = (usize::from(flip_hi) << 8 | usize::from(flip_at)) % bytes.len().max(1);
        if bit & 0x80 != 0 {
            if let Some(byte) = bytes.get_mut(at) {
                *byte ^= 1 << (bit & 7);
            }
        }
    }
    bytes
}

fn check(data: &[u8]) {
    let outcome = whole(data);
    if let Ok((info, entries)) = &outcome {
        assert_eq!(info.entry_count, entries.len() as u64);
        assert!(entries.windows(2).all(|w| w[0].0 < w[1].0), "keys ascend");
    }
    assert_eq!(streamed(data), outcome);
}

fuzz_target!(|data: &[u8]| {
    check(data);
    check(&damaged_checkpoint(data));
});
