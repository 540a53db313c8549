//! Marshalled pages (TSBw-tree §II-D: Flush writes a page's state to the LSS; Bw-tree §V-B
//! "page marshalling"): the bytes of a page piece in LSS-C, byte by byte in docs/FORMAT.md
//! "TSBw-tree page pieces".
//!
//! A piece is one of
//! - a **leaf image**: key range `[low, high)`, time range `[start, end)`, side and history
//!   links, and the versions `(key, ts, value or tombstone)` sorted by (key, ts);
//! - an **index image**: the same header at a level above 0, and the terms `(key, ts, PID)`
//!   sorted by (key, ts);
//! - a **key split** `(level, sep, Q)` or a **time split** `(level, t, H)`: a split delta
//!   alone, as a later increment's incremental pieces will chain them over an image.
//!
//! Every piece starts with the format version and its kind and ends with a crc32c of all the
//! bytes before it. [`decode`] never panics: truncated, bit-flipped or otherwise malformed
//! bytes give an error saying what is wrong at which byte; the caller adds the PID and the
//! LSS file and offset (`storage.rs`, forest-llama `read::payload_error`).
//!
//! Flushes write whole images only in this increment (`storage.rs`); the split pieces are
//! encoded and decoded but not yet written.

use forest_llama::Pid;

use crate::version::Record;

/// The format version (first byte of each piece).
pub const FORMAT_VERSION: u8 = 1;

const KIND_LEAF: u8 = 1;
const KIND_INDEX: u8 = 2;
const KIND_KEY_SPLIT: u8 = 3;
const KIND_TIME_SPLIT: u8 = 4;

/// A link field's "none" (PIDs are below `forest_llama::PID_COUNT_MAX`).
const NO_PID: u64 = u64::MAX;

/// Bytes of the crc32c trailer.
const CRC_BYTES: usize = 4;

/// A page's header: what a leaf and an index page both have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// 0 for a leaf.
    pub level: u32,
    pub low: Box<[u8]>,
    pub high: Option<Box<[u8]>>,
    pub start: u64,
    /// [`INFINITY`] for a current page.
    pub end: u64,
    pub side: Option<Pid>,
    pub history: Option<Pid>,
}

/// One decoded piece.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// A leaf's versions, sorted by (key, ts), unique.
    Leaf(Header, Vec<Record>),
    /// An index page's terms `(key, ts, PID)`, sorted by (key, ts).
    Index(Header, Vec<(Box<[u8]>, u64, Pid)>),
    /// Keys from `sep` on moved to page `q` (a leaf's at level 0, else an index page's).
    KeySplit { level: u32, sep: Box<[u8]>, q: Pid },
    /// Versions (or terms) before `t` moved to the historical page `h`.
    TimeSplit { level: u32, t: u64, h: Pid },
}

/// The bytes of a leaf image.
pub(crate) fn encode_leaf<'a>(
    header: &Header,
    records: impl ExactSizeIterator<Item = &'a Record>,
) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION, KIND_LEAF];
    put_header(&mut out, header);
    put_u32(&mut out, records.len());
    for r in records {
        put16(&mut out, &r.key);
        out.extend_from_slice(&r.ts.to_le_bytes());
        match &r.value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                put_u32(&mut out, v.len());
                out.extend_from_slice(v);
            }
        }
    }
    seal(out)
}

/// The bytes of an index image.
pub(crate) fn encode_index<'a>(
    header: &Header,
    terms: impl ExactSizeIterator<Item = (&'a [u8], u64, Pid)>,
) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION, KIND_INDEX];
    put_header(&mut out, header);
    put_u32(&mut out, terms.len());
    for (key, ts, pid) in terms {
        put16(&mut out, key);
        out.extend_from_slice(&ts.to_le_bytes());
        out.extend_from_slice(&pid.to_le_bytes());
    }
    seal(out)
}

/// The bytes of a key-split piece.
// Written by incremental flushes (open, module doc); the format is tested here.
#[allow(dead_code)]
pub(crate) fn encode_key_split(level: u32, sep: &[u8], q: Pid) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION, KIND_KEY_SPLIT];
    out.extend_from_slice(&level.to_le_bytes());
    put16(&mut out, sep);
    out.extend_from_slice(&q.to_le_bytes());
    seal(out)
}

/// The bytes of a time-split piece.
// Written by incremental flushes (open, module doc); the format is tested here.
#[allow(dead_code)]
pub(crate) fn encode_time_split(level: u32, t: u64, h: Pid) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION, KIND_TIME_SPLIT];
    out.extend_from_slice(&level.to_le_bytes());
    out.extend_from_slice(&t.to_le_bytes());
    out.extend_from_slice(&h.to_le_bytes());
    seal(out)
}

/// Decodes a piece; the error names the byte where the bytes stop making sense.
pub(crate) fn decode(bytes: &[u8]) -> Result<Piece, String> {
    let Some(body_len) = bytes.len().checked_sub(CRC_BYTES) else {
        return Err(format!(
            "tsbtree piece of {} bytes is shorter than its crc",
            bytes.len()
        ));
    };
    let (body, trailer) = bytes.split_at(body_len);
    let mut stored = [0u8; CRC_BYTES];
    stored.copy_from_slice(trailer);
    let stored = u32::from_le_bytes(stored);
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(format!(
            "tsbtree piece crc32c at byte {body_len} is {stored:#010x}, its bytes give \
             {computed:#010x}"
        ));
    }
    let mut r = Reader { bytes: body, at: 0 };
    match r.u8()? {
        FORMAT_VERSION => {}
        other => {
            return Err(r.error(format!(
                "format version {other}, this build reads {FORMAT_VERSION}"
            )))
        }
    }
    let piece = match r.u8()? {
        KIND_LEAF => {
            let header = r.header()?;
            if header.level != 0 {
                return Err(r.error(format!("a leaf image at level {}", header.level)));
            }
            let count = r.u32()?;
            let mut records: Vec<Record> = Vec::new();
            for _ in 0..count {
                let key = r.bytes16()?;
                let ts = r.u64()?;
                let value = match r.u8()? {
                    0 => None,
                    1 => {
                        let len = r.u32()?;
                        Some(r.take(len as usize)?.into())
                    }
                    flag => return Err(r.error(format!("value flag {flag} is neither 0 nor 1"))),
                };
                if let Some(last) = records.last() {
                    if (&*last.key, last.ts) >= (key, ts) {
                        return Err(r.error("versions not in strictly ascending (key, ts)".into()));
                    }
                }
                records.push(Record {
                    key: key.into(),
                    ts,
                    value,
                });
            }
            Piece::Leaf(header, records)
        }
        KIND_INDEX => {
            let header = r.header()?;
            if header.level == 0 {
                return Err(r.error("an index image at level 0".into()));
            }
            let count = r.u32()?;
            let mut terms: Vec<(Box<[u8]>, u64, Pid)> = Vec::new();
            for _ in 0..count {
                let key = r.bytes16()?;
                let ts = r.u64()?;
                let pid = r.pid()?;
                if let Some((k, t, _)) = terms.last() {
                    if (&**k, *t) > (key, ts) {
                        return Err(r.error("terms not in ascending (key, ts)".into()));
                    }
                }
                terms.push((key.into(), ts, pid));
            }
            Piece::Index(header, terms)
        }
        KIND_KEY_SPLIT => {
            let level = r.u32()?;
            let sep = r.bytes16()?.into();
            let q = r.pid()?;
            Piece::KeySplit { level, sep, q }
        }
        KIND_TIME_SPLIT => {
            let level = r.u32()?;
            let t = r.u64()?;
            let h = r.pid()?;
            Piece::TimeSplit { level, t, h }
        }
        other => return Err(r.error(format!("piece kind {other} is unknown"))),
    };
    if r.at != body.len() {
        return Err(r.error(format!(
            "{} bytes after the piece's last field",
            body.len() - r.at
        )));
    }
    Ok(piece)
}

fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn put_header(out: &mut Vec<u8>, h: &Header) {
    out.extend_from_slice(&h.level.to_le_bytes());
    out.extend_from_slice(&h.start.to_le_bytes());
    out.extend_from_slice(&h.end.to_le_bytes());
    out.extend_from_slice(&h.side.unwrap_or(NO_PID).to_le_bytes());
    out.extend_from_slice(&h.history.unwrap_or(NO_PID).to_le_bytes());
    put16(out, &h.low);
    match &h.high {
        None => out.push(0),
        Some(high) => {
            out.push(1);
            put16(out, high);
        }
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    // Counts and value lengths: values are at most 1 MiB, pages far fewer than 2^32 entries.
    let n = u32::try_from(n).expect("count fits u32");
    out.extend_from_slice(&n.to_le_bytes());
}

fn put16(out: &mut Vec<u8>, bytes: &[u8]) {
    // Keys are at most KEY_BYTES_MAX (16 KiB), which fits a u16.
    let len = u16::try_from(bytes.len()).expect("key length fits u16");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A bounds-checked reader.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, detail: String) -> String {
        format!("tsbtree piece at byte {}: {detail}", self.at)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(self.error(format!(
                "needs {len} bytes, {} left",
                self.bytes.len() - self.at
            )));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut w = [0u8; 4];
        w.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(w))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }

    fn pid(&mut self) -> Result<Pid, String> {
        let pid = self.u64()?;
        if pid as usize >= forest_llama::PID_COUNT_MAX {
            return Err(self.error(format!("PID {pid} is beyond the mapping table")));
        }
        Ok(pid)
    }

    fn link(&mut self) -> Result<Option<Pid>, String> {
        match self.u64()? {
            NO_PID => Ok(None),
            pid if pid as usize >= forest_llama::PID_COUNT_MAX => {
                Err(self.error(format!("link to PID {pid}, beyond the mapping table")))
            }
            pid => Ok(Some(pid)),
        }
    }

    fn bytes16(&mut self) -> Result<&'a [u8], String> {
        let mut w = [0u8; 2];
        w.copy_from_slice(self.take(2)?);
        self.take(usize::from(u16::from_le_bytes(w)))
    }

    fn header(&mut self) -> Result<Header, String> {
        let level = self.u32()?;
        let start = self.u64()?;
        let end = self.u64()?;
        if start >= end {
            return Err(self.error(format!("empty time range [{start}, {end})")));
        }
        let side = self.link()?;
        let history = self.link()?;
        let low: Box<[u8]> = self.bytes16()?.into();
        let high = match self.u8()? {
            0 => None,
            1 => Some(Box::<[u8]>::from(self.bytes16()?)),
            flag => return Err(self.error(format!("high-key flag {flag} is neither 0 nor 1"))),
        };
        if high.as_ref().is_some_and(|h| **h <= *low) {
            return Err(self.error("high key not above the low key".into()));
        }
        Ok(Header {
            level,
            low,
            high,
            start,
            end,
            side,
            history,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::INFINITY;

    fn header(level: u32, end: u64) -> Header {
        Header {
            level,
            low: b"apple".to_vec().into(),
            high: Some(b"melon".to_vec().into()),
            start: 17,
            end,
            side: Some(42),
            history: Some(7),
        }
    }

    fn records() -> Vec<Record> {
        vec![
            Record::new(b"apple", 18, Some(b"red")),
            Record::new(b"apple", 30, None),
            Record::new(b"banana", 19, Some(b"")),
            Record::new(b"cherry", 20, Some(&[0xff; 300])),
        ]
    }

    fn pieces() -> Vec<(Vec<u8>, Piece)> {
        let leaf = header(0, INFINITY);
        let historical = Header {
            high: None,
            side: None,
            history: None,
            low: Box::default(),
            ..header(0, 25)
        };
        let index = header(3, INFINITY);
        let terms: Vec<(Box<[u8]>, u64, Pid)> = vec![
            (b"apple".to_vec().into(), 0, 5),
            (b"apple".to_vec().into(), 17, 9),
            (b"kiwi".to_vec().into(), 20, 11),
        ];
        let recs = records();
        vec![
            (
                encode_leaf(&leaf, recs.iter()),
                Piece::Leaf(leaf.clone(), recs.clone()),
            ),
            (
                encode_leaf(&historical, [].iter()),
                Piece::Leaf(historical.clone(), Vec::new()),
            ),
            (
                encode_index(&index, terms.iter().map(|(k, t, p)| (&**k, *t, *p))),
                Piece::Index(index.clone(), terms.clone()),
            ),
            (
                encode_key_split(0, b"kiwi", 12),
                Piece::KeySplit {
                    level: 0,
                    sep: b"kiwi".to_vec().into(),
                    q: 12,
                },
            ),
            (
                encode_time_split(2, 99, 13),
                Piece::TimeSplit {
                    level: 2,
                    t: 99,
                    h: 13,
                },
            ),
        ]
    }

    // Goal: every piece kind decodes to what was encoded. Method: encode leaf images (current
    // with links and a tombstone, historical with no links), an index image, both split
    // pieces; decode each and compare.
    #[test]
    fn every_piece_kind_round_trips() {
        for (bytes, piece) in pieces() {
            assert_eq!(decode(&bytes), Ok(piece));
        }
    }

    // Goal: no truncation of a piece decodes, and none panics. Method: every proper prefix of
    // every piece kind is refused with an error.
    #[test]
    fn truncated_pieces_are_refused() {
        for (bytes, _) in pieces() {
            for len in 0..bytes.len() {
                let e = decode(&bytes[..len]).expect_err("a prefix must not decode");
                assert!(e.contains("byte") || e.contains("shorter"), "{e}");
            }
        }
    }

    // Goal: a flipped bit anywhere is caught (crc) and never panics. Method: flip each bit of
    // each piece in turn and decode.
    #[test]
    fn bit_flips_are_refused() {
        for (bytes, _) in pieces() {
            for bit in 0..bytes.len() * 8 {
                let mut damaged = bytes.clone();
                damaged[bit / 8] ^= 1 << (bit % 8);
                assert!(decode(&damaged).is_err(), "bit {bit} flipped decoded");
            }
        }
    }

    // Goal: malformed bodies with a valid crc are refused, not trusted (the crc only guards
    // the device). Method: re-seal bodies with an unknown kind or version, unsorted versions,
    // an empty time range, a PID beyond the table and trailing bytes.
    #[test]
    fn malformed_bodies_are_refused() {
        let reseal = |mut bytes: Vec<u8>, edit: &dyn Fn(&mut Vec<u8>)| {
            bytes.truncate(bytes.len() - CRC_BYTES);
            edit(&mut bytes);
            seal(bytes)
        };
        let leaf = encode_leaf(&header(0, INFINITY), records().iter());
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (reseal(leaf.clone(), &|b| b[0] = 9), "format version"),
            (reseal(leaf.clone(), &|b| b[1] = 77), "kind"),
            (reseal(leaf.clone(), &|b| b.push(0)), "after the piece"),
            (
                encode_leaf(&header(0, 17), records().iter()),
                "empty time range",
            ),
            (
                encode_leaf(&header(0, INFINITY), records().iter().rev()),
                "ascending",
            ),
            (encode_key_split(0, b"k", u64::MAX - 1), "beyond"),
            (
                encode_index(&header(0, INFINITY), std::iter::empty()),
                "level 0",
            ),
        ];
        for (bytes, want) in cases {
            let e = decode(&bytes).expect_err(want);
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}
