//! [`MemFile`]: a read-only [`File`] over bytes in memory, so the streaming decoders can be
//! run on any byte string (decoder tests, fuzz targets, tools that already hold a file's
//! bytes). Writes fail with an I/O error naming the path.

use std::path::{Path, PathBuf};

use forest_core::Result;

use super::{io_error, File};

/// A read-only file whose bytes are in memory.
#[derive(Clone, Debug)]
pub struct MemFile {
    path: PathBuf,
    data: Vec<u8>,
}

impl MemFile {
    /// A file named `path` (for error messages) holding `data`.
    pub fn new(path: impl Into<PathBuf>, data: Vec<u8>) -> Self {
        Self {
            path: path.into(),
            data,
        }
    }

    fn read_only(&self, op: &'static str) -> forest_core::Error {
        io_error(
            &self.path,
            op,
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "an in-memory file is read-only",
            ),
        )
    }
}

impl File for MemFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn len(&self) -> Result<u64> {
        Ok(self.data.len() as u64)
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let bytes = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(buf.len())?))
            .and_then(|range| self.data.get(range));
        match bytes {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(io_error(
                &self.path,
                "read",
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            )),
        }
    }

    fn append(&mut self, _data: &[u8]) -> Result<()> {
        Err(self.read_only("write"))
    }

    fn write_at(&mut self, _offset: u64, _data: &[u8]) -> Result<()> {
        Err(self.read_only("write"))
    }

    fn truncate(&mut self, _len: u64) -> Result<()> {
        Err(self.read_only("truncate"))
    }

    fn sync(&mut self) -> Result<()> {
        Err(self.read_only("fsync"))
    }
}
