//! Size limits of keys and values, and the checks every engine runs before it writes.
//!
//! Limits are part of the API: a key or value over its limit is an [`Error`], never a panic
//! and never a silent truncation. Reads with an over-long key simply find nothing, since no
//! such key can have been written.

use crate::error::{Error, Result};

/// The longest key, in bytes. 16 KiB keeps several keys per page in the page-oriented
/// engines (Bw-tree, BzTree) and matches DESIGN.md; no workload of the papers comes near it
/// (the Xbox trace's keys are 94 bytes).
pub const KEY_BYTES_MAX: usize = 16 * 1024;

/// The longest value, in bytes. 1 MiB bounds the memory one request can pin in the server and
/// one log record can occupy (DESIGN.md); the largest values of the papers' workloads are the
/// Xbox trace's 1200 bytes.
pub const VALUE_BYTES_MAX: usize = 1024 * 1024;

const _: () = assert!(KEY_BYTES_MAX < VALUE_BYTES_MAX);
const _: () = assert!(VALUE_BYTES_MAX <= u32::MAX as usize); // lengths fit a u32 on disk

/// Checks that `key` is within [`KEY_BYTES_MAX`].
#[inline]
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_BYTES_MAX {
        return Err(Error::KeyTooLong {
            len: key.len(),
            max: KEY_BYTES_MAX,
        });
    }
    Ok(())
}

/// Checks that `key` and `value` are within [`KEY_BYTES_MAX`] and [`VALUE_BYTES_MAX`].
#[inline]
pub fn check_entry(key: &[u8], value: &[u8]) -> Result<()> {
    check_key(key)?;
    if value.len() > VALUE_BYTES_MAX {
        return Err(Error::ValueTooLong {
            len: value.len(),
            max: VALUE_BYTES_MAX,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_accept_the_maximum_and_reject_one_more() {
        let key = vec![7u8; KEY_BYTES_MAX];
        let value = vec![9u8; VALUE_BYTES_MAX];
        assert!(check_entry(&key, &value).is_ok());
        let long_key = vec![7u8; KEY_BYTES_MAX + 1];
        assert!(matches!(
            check_key(&long_key),
            Err(Error::KeyTooLong { len, max }) if len == KEY_BYTES_MAX + 1 && max == KEY_BYTES_MAX
        ));
        let long_value = vec![9u8; VALUE_BYTES_MAX + 1];
        assert!(matches!(
            check_entry(b"k", &long_value),
            Err(Error::ValueTooLong { len, .. }) if len == VALUE_BYTES_MAX + 1
        ));
    }

    #[test]
    fn errors_name_the_problem() {
        let text = check_key(&vec![0u8; KEY_BYTES_MAX + 5])
            .unwrap_err()
            .to_string();
        assert!(text.contains("key"), "{text}");
        assert!(text.contains(&(KEY_BYTES_MAX + 5).to_string()), "{text}");
        assert!(text.contains(&KEY_BYTES_MAX.to_string()), "{text}");
    }
}
