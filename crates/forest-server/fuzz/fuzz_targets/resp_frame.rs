//! Fuzz target for the RESP frame decoder (`forest_server::frame::parse`).
//!
//! Checks the invariants of frame.rs's module doc on arbitrary bytes: no panic; a parsed frame
//! used at most the bytes given; re-encoding it and parsing that gives a frame that encodes to
//! the same bytes (a fixed point: texts with CR or LF are rewritten once by the encoder) and
//! uses exactly the encoded bytes; every proper prefix of the encoding is incomplete.
#![no_main]

use forest_server::frame::{parse, Limits};
use libfuzzer_sys::fuzz_target;

/// Prefixes checked one by one up to this encoding length (quadratic cost beyond it).
const PREFIX_CHECK_BYTES_MAX: usize = 512;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let Ok(Some((frame, used))) = parse(data, &limits) else {
        return;
    };
    assert!(
        used > 0 && used <= data.len(),
        "used {used} of {}",
        data.len()
    );

    let mut first = Vec::new();
    frame.encode(&mut first);
    let (again, again_used) = match parse(&first, &limits) {
        Ok(Some(parsed)) => parsed,
        other => panic!("encoding of {frame:?} does not parse: {other:?}"),
    };
    assert_eq!(
        again_used,
        first.len(),
        "re-parse of {frame:?} left bytes over"
    );
    let mut second = Vec::new();
    again.encode(&mut second);
    assert_eq!(
        first, second,
        "encode(parse(encode(f))) != encode(f) for {frame:?}"
    );

    let step = (first.len() / PREFIX_CHECK_BYTES_MAX).max(1);
    for cut in (0..first.len()).step_by(step) {
        assert!(
            matches!(parse(&first[..cut], &limits), Ok(None)),
            "prefix {cut} of {} bytes of {frame:?} is not incomplete",
            first.len()
        );
    }
});
