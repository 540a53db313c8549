//! SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]: keys in key order, a few at a time.
//!
//! The cursor is a number (Redis clients parse it as an unsigned integer) naming the key to
//! resume after, kept in the server's cursor table ([`crate::server::Cursors`]); `0` starts
//! and ends an iteration. COUNT (default 10) is the number of keys examined per call, as in
//! Redis; MATCH filters them. Every key present for a whole iteration is returned exactly
//! once (the scan resumes strictly after the last key examined). A forgotten cursor (the
//! table is bounded) is `-ERR invalid cursor`. Collections are keys like strings
//! ([`super::keys::list_keys`] merges both); TYPE filters by type name.

use std::ops::Bound;

use super::{is_word, syntax_error, Ctx, Reply};
use crate::frame::Frame;
use crate::glob;

/// Keys examined per SCAN call without COUNT (Redis's default).
pub(super) const SCAN_COUNT_DEFAULT: usize = 10;
/// The most keys one SCAN call examines, whatever COUNT says: bounds one reply.
const SCAN_COUNT_MAX: usize = 100_000;

/// A SCAN-family cursor argument (an unsigned number), or Redis's error.
pub(super) fn cursor_arg(arg: &[u8]) -> Result<u64, Frame> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| Frame::err("invalid cursor"))
}

/// A SCAN-family COUNT value: at least 1, at most [`SCAN_COUNT_MAX`]; Redis's errors.
pub(super) fn count_arg(value: &[u8]) -> Result<usize, Frame> {
    match crate::parse::parse_int(value) {
        Some(n) if n >= 1 => Ok((n as u64).min(SCAN_COUNT_MAX as u64) as usize),
        Some(_) => Err(syntax_error()),
        None => Err(super::not_an_integer()),
    }
}

pub fn scan(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let invalid_cursor = || Frame::err("invalid cursor");
    let cursor = cursor_arg(argv[1])?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = SCAN_COUNT_DEFAULT;
    let mut filter: Option<&str> = None;
    let mut i = 2;
    while i < argv.len() {
        let Some(&value) = argv.get(i + 1) else {
            return Err(syntax_error());
        };
        if is_word(argv[i], "match") {
            pattern = Some(value);
        } else if is_word(argv[i], "count") {
            count = count_arg(value)?;
        } else if is_word(argv[i], "type") {
            let names = ["string", "list", "set", "hash", "zset", "stream"];
            // An unknown type matches no key (Redis 7.0 does the same).
            filter = Some(
                names
                    .iter()
                    .find(|n| is_word(value, n))
                    .copied()
                    .unwrap_or("?"),
            );
        } else {
            return Err(syntax_error());
        }
        i += 2;
    }
    let resume = if cursor == 0 {
        None
    } else {
        Some(
            ctx.shared
                .cursors
                .lock()
                .take(cursor)
                .ok_or_else(invalid_cursor)?,
        )
    };
    let (prefix, end) = match pattern {
        Some(p) => super::keys::pattern_bounds(p),
        None => (Vec::new(), None),
    };
    let lower = match &resume {
        Some(key) if key.as_slice() >= prefix.as_slice() => Bound::Excluded(key.as_slice()),
        _ => Bound::Included(prefix.as_slice()),
    };
    let generation = ctx.shared.expires.generation();
    let mut examined = super::keys::list_keys(ctx, lower, end.as_deref(), count, filter);
    let last = (examined.len() >= count)
        .then(|| examined.last().map(|(key, _)| key.clone()))
        .flatten();
    // Expired keys are skipped (and keys deleted as expired while they were listed).
    examined.retain(|(key, _)| !ctx.is_due(key));
    super::expire::recheck_listed(ctx, generation, &mut examined);
    let found: Vec<Frame> = examined
        .into_iter()
        .filter(|(key, _)| pattern.is_none_or(|p| glob::matches(p, key)))
        .map(|(key, _)| Frame::Bulk(key))
        .collect();
    let next = match last {
        Some(key) => ctx.shared.cursors.lock().remember(key),
        None => 0,
    };
    Ok(Frame::Array(vec![
        Frame::bulk(next.to_string()),
        Frame::Array(found),
    ]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    /// Runs a SCAN to its end; returns the keys and the number of calls.
    fn scan_all(h: &mut Harness, extra: &[&str]) -> (Vec<String>, usize) {
        let mut cursor = "0".to_string();
        let mut keys = Vec::new();
        let mut calls = 0;
        loop {
            let mut argv = vec!["SCAN", &cursor];
            argv.extend_from_slice(extra);
            let Frame::Array(reply) = h.run(&argv) else {
                panic!("array expected");
            };
            calls += 1;
            let [Frame::Bulk(next), Frame::Array(batch)] = &reply[..] else {
                panic!("cursor and keys expected: {reply:?}");
            };
            for k in batch {
                let Frame::Bulk(k) = k else {
                    panic!("bulk expected")
                };
                keys.push(String::from_utf8(k.clone()).expect("utf8"));
            }
            cursor = String::from_utf8(next.clone()).expect("utf8");
            assert!(cursor.parse::<u64>().is_ok(), "numeric cursor {cursor}");
            if cursor == "0" {
                return (keys, calls);
            }
        }
    }

    // Goal: SCAN walks every key once in key order, COUNT sets the step, MATCH filters.
    // Method: 25 keys scanned with the default COUNT, with COUNT 100, and with MATCH.
    #[test]
    fn scan_walks_in_order() {
        let mut h = Harness::new();
        let mut want: Vec<String> = (0..25).map(|i| format!("k{i:02}")).collect();
        for k in &want {
            h.run(&["SET", k, "v"]);
        }
        h.run(&["SET", "other", "v"]);
        want.push("other".into());
        want.sort();
        let (keys, calls) = scan_all(&mut h, &[]);
        assert_eq!(keys, want);
        assert!(calls >= 3, "{calls}");
        let (keys, calls) = scan_all(&mut h, &["COUNT", "100"]);
        assert_eq!(keys, want);
        assert_eq!(calls, 1);
        let (keys, _) = scan_all(&mut h, &["MATCH", "k1*", "COUNT", "3"]);
        assert_eq!(keys, (10..20).map(|i| format!("k{i}")).collect::<Vec<_>>());
        let (keys, _) = scan_all(&mut h, &["TYPE", "hash"]);
        assert!(keys.is_empty());
    }

    // Goal: bad cursors and options get Redis's errors.
    // Method: one bad input each.
    #[test]
    fn scan_errors() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["SCAN", "x"]),
            Frame::Error("ERR invalid cursor".into())
        );
        assert_eq!(
            h.run(&["SCAN", "12345"]),
            Frame::Error("ERR invalid cursor".into())
        );
        assert_eq!(
            h.run(&["SCAN", "0", "COUNT", "0"]),
            Frame::Error("ERR syntax error".into())
        );
        assert_eq!(
            h.run(&["SCAN", "0", "MATCH"]),
            Frame::Error("ERR syntax error".into())
        );
        assert_eq!(
            h.run(&["SCAN", "0", "FOO", "1"]),
            Frame::Error("ERR syntax error".into())
        );
    }
}
