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

/// Keys starting with these bytes hold a value stamped with [`STAMP_BYTES`] more bytes in
/// front: the server keeps a string with a deadline at `FF 'x' <key>` -> `<deadline BE>
/// <value>`, so that a value at [`VALUE_BYTES_MAX`] can take a deadline too. The limit on
/// the value itself is unchanged.
pub const STAMPED_KEY_PREFIX: [u8; 2] = [0xFF, b'x'];

/// Bytes a stamped entry ([`STAMPED_KEY_PREFIX`]) may hold beyond [`VALUE_BYTES_MAX`].
pub const STAMP_BYTES: usize = 8;

/// The longest value any entry holds: [`VALUE_BYTES_MAX`], plus [`STAMP_BYTES`] for a
/// stamped entry. What the logs and checkpoints accept when they decode.
pub const STORED_VALUE_BYTES_MAX: usize = VALUE_BYTES_MAX + STAMP_BYTES;

const _: () = assert!(KEY_BYTES_MAX < VALUE_BYTES_MAX);
const _: () = assert!(STORED_VALUE_BYTES_MAX <= u32::MAX as usize); // lengths fit a u32 on disk

/// The longest value `key` may hold: [`STORED_VALUE_BYTES_MAX`] for a stamped key
/// ([`STAMPED_KEY_PREFIX`]), else [`VALUE_BYTES_MAX`].
#[inline]
pub fn value_bytes_max(key: &[u8]) -> usize {
    if key.starts_with(&STAMPED_KEY_PREFIX) {
        STORED_VALUE_BYTES_MAX
    } else {
        VALUE_BYTES_MAX
    }
}

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

/// Checks that `key` and `value` are within [`KEY_BYTES_MAX`] and [`VALUE_BYTES_MAX`] (a
/// stamped key's value: [`STAMP_BYTES`] more, see [`value_bytes_max`]). A stamped value too
/// long is reported as the value after its stamp against [`VALUE_BYTES_MAX`]: the limit
/// the user of the value knows.
#[inline]
pub fn check_entry(key: &[u8], value: &[u8]) -> Result<()> {
    check_key(key)?;
    let max = value_bytes_max(key);
    if value.len() > max {
        let stamp = max - VALUE_BYTES_MAX;
        return Err(Error::ValueTooLong {
            len: value.len() - stamp,
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

    // Goal: a stamped key (the server's string with a deadline) holds the longest value and
    // its 8-byte stamp; no other key does, and one byte more is refused, named as the value
    // after its stamp against the value limit.
    #[test]
    fn stamped_keys_take_the_stamp_beyond_the_limit() {
        let stamped = [&STAMPED_KEY_PREFIX[..], b"user"].concat();
        let value = vec![1u8; STORED_VALUE_BYTES_MAX];
        assert!(check_entry(&stamped, &value).is_ok());
        assert!(check_entry(&STAMPED_KEY_PREFIX, &value).is_ok());
        assert!(matches!(
            check_entry(b"user", &value),
            Err(Error::ValueTooLong { len, max }) if len == STORED_VALUE_BYTES_MAX && max == VALUE_BYTES_MAX
        ));
        assert!(check_entry(&[0xFF, b'y', b'u'], &value).is_err());
        assert!(check_entry(&[0xFF], &value).is_err());
        let long = vec![1u8; STORED_VALUE_BYTES_MAX + 1];
        assert!(matches!(
            check_entry(&stamped, &long),
            Err(Error::ValueTooLong { len, max }) if len == VALUE_BYTES_MAX + 1 && max == VALUE_BYTES_MAX
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
