//! [`ReadWindow`]: reads a file front to back through a bounded buffer, so the decoders of
//! logs and checkpoints need a few MiB whatever the file's size (issue 5: recovery of 10 M
//! keys must not hold the files in memory).
//!
//! Invariants: the buffer holds the file's bytes `start .. start + buf.len()`; offsets asked
//! for never go backwards (`at >= start`); after [`ReadWindow::bytes_at`]`(at, need)` the
//! buffer reaches `min(at + need, len)`; it never holds more than the largest `need` asked
//! for plus `chunk` bytes. Callers ask for what they know they need (a record's fixed
//! header, then its whole length), so a refill moves only the few bytes not yet used.

use std::path::Path;

use forest_core::Result;

use super::File;

/// Bytes read from the file at a time: large reads, bounded memory.
pub const READ_CHUNK_BYTES: usize = 1 << 20;

/// A forward-only window over a file (see the module doc).
pub struct ReadWindow {
    file: Box<dyn File>,
    len: u64,
    /// `buf[lo..hi]` holds the file's bytes from `start`; the buffer only grows (no zeroing
    /// per read), to the largest `need` asked for plus `chunk`.
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    /// The file offset of `buf[lo]`.
    start: u64,
    chunk: usize,
}

impl std::fmt::Debug for ReadWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWindow")
            .field("path", &self.file.path())
            .field("len", &self.len)
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl ReadWindow {
    /// A window over `file` (its length taken now) that reads `chunk` bytes at a time.
    pub fn new(file: Box<dyn File>, chunk: usize) -> Result<Self> {
        let len = file.len()?;
        Ok(Self {
            file,
            len,
            buf: Vec::new(),
            lo: 0,
            hi: 0,
            start: 0,
            chunk: chunk.max(1),
        })
    }

    /// The file's length when the window was made.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The bytes already buffered from `at` on, without reading (empty if `at` is outside
    /// the buffer).
    pub fn peek(&self, at: u64) -> &[u8] {
        at.checked_sub(self.start)
            .and_then(|skip| usize::try_from(skip).ok())
            .and_then(|skip| self.buf[self.lo..self.hi].get(skip..))
            .unwrap_or(&[])
    }

    /// The file's bytes from `at` on: at least `need` of them, or all up to the end of the
    /// file. A read drops the bytes before `at`. Precondition: `at` is not below the `at`
    /// of the last call that read.
    pub fn bytes_at(&mut self, at: u64, need: usize) -> Result<&[u8]> {
        assert!(at >= self.start, "a read window only moves forward");
        let at = at.min(self.len);
        let want_end = at.saturating_add(need as u64).min(self.len);
        let have_end = self.start + (self.hi - self.lo) as u64;
        if have_end < want_end {
            if at >= have_end {
                self.lo = 0;
                self.hi = 0;
            } else {
                let skip = usize::try_from(at - self.start).expect("within the buffer");
                self.buf.copy_within(self.lo + skip..self.hi, 0);
                self.hi -= self.lo + skip;
                self.lo = 0;
            }
            self.start = at;
            let read_end = want_end.saturating_add(self.chunk as u64).min(self.len);
            let total = usize::try_from(read_end - at).expect("need + chunk fits in memory");
            if self.buf.len() < total {
                self.buf.resize(total, 0);
            }
            let from = at + self.hi as u64;
            if let Err(e) = self.file.read_exact_at(from, &mut self.buf[self.hi..total]) {
                self.hi = 0;
                return Err(e);
            }
            self.hi = total;
        }
        let skip = usize::try_from(at - self.start).expect("within the buffer");
        Ok(&self.buf[self.lo + skip..self.hi])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemFile;

    // Goal: the window hands out the file's true bytes at every offset and stays bounded.
    // Method: walk a 10 kB file with odd steps and small chunks, comparing with the source.
    #[test]
    fn walks_a_file_in_bounded_memory() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut window = ReadWindow::new(Box::new(MemFile::new("/m", data.clone())), 64).unwrap();
        let mut at = 0u64;
        while at < data.len() as u64 {
            let need = (at % 50) as usize + 1;
            let bytes = window.bytes_at(at, need).unwrap();
            let expect_len = need.min(data.len() - at as usize);
            assert!(bytes.len() >= expect_len);
            assert!(
                bytes.len() <= 50 + 64,
                "bounded by the largest need plus a chunk"
            );
            assert_eq!(bytes, &data[at as usize..at as usize + bytes.len()]);
            at += (at % 13) + 1;
        }
        assert!(window.bytes_at(data.len() as u64, 10).unwrap().is_empty());
    }
}
