//! RESP frames: the wire format (RESP2, and RESP3 after `HELLO 3`; docs/PROTOCOL.md).
//!
//! [`parse`] decodes one frame from the front of a buffer: `Ok(None)` while the buffer holds
//! only part of one, `Ok(Some((frame, bytes_used)))` once it is complete, an error when the
//! bytes can never become a valid frame or a claimed length is over a [`Limits`] bound.
//! [`Frame::encode`] writes RESP3's forms; [`Frame::encode_to`] downgrades the RESP3-only
//! types for a RESP2 connection the way Redis does (map -> flat array, null -> `$-1`,
//! double -> bulk string, boolean -> integer, verbatim -> bulk string).
//!
//! Invariants:
//! - No input panics the parser, and its memory is bounded by the input's length plus a
//!   small constant: a claimed length is checked against [`Limits`], and no buffer is sized
//!   from a claim beyond [`PREALLOC_ELEMENTS_MAX`] before the bytes are there.
//! - Every prefix of a valid frame parses as incomplete (`Ok(None)`), never as an error or
//!   another frame: every frame ends in CRLF and lengths are checked before contents.
//! - `parse(encode(f)) == f` for every frame whose simple and error texts hold no CR or LF
//!   (encoding replaces those with spaces, so it never writes a broken frame).
//!
//! Choices: a line whose first byte is no RESP type byte is an inline command (as Redis and
//! telnet send), parsed by [`crate::parse::split_inline`] into an array of bulk strings; a
//! RESP3 set (`~`) parses as an array; attribute, push, big number and blob error types are
//! refused (no client sends them to a server).

use std::fmt::Write as _;

/// The longest bulk string accepted: a value at the store's limit plus room for a key and
/// command overhead in the same frame, so an oversized value reaches the store and gets its
/// clear "value too long" error instead of a protocol error.
pub const BULK_BYTES_MAX: usize = forest_core::VALUE_BYTES_MAX + 64 * 1024;
/// The most elements of one array (Redis's own multibulk limit).
pub const ARRAY_ELEMENTS_MAX: usize = 1_048_576;
/// The longest inline command line, and the longest line of a simple type (Redis's
/// PROTO_INLINE_MAX_SIZE).
pub const INLINE_BYTES_MAX: usize = 64 * 1024;
/// The deepest nesting of aggregates; requests are flat and replies shallow, and the bound
/// keeps the recursive parser's stack small.
pub const DEPTH_MAX: usize = 32;
/// The most elements reserved ahead of their arrival, whatever an array claims.
pub const PREALLOC_ELEMENTS_MAX: usize = 1024;

/// Bounds on what a peer may claim (docs/PROTOCOL.md "Limits").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub bulk_bytes_max: usize,
    pub array_elements_max: usize,
    pub inline_bytes_max: usize,
    pub depth_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            bulk_bytes_max: BULK_BYTES_MAX,
            array_elements_max: ARRAY_ELEMENTS_MAX,
            inline_bytes_max: INLINE_BYTES_MAX,
            depth_max: DEPTH_MAX,
        }
    }
}

/// Why bytes can never become a valid frame. The text follows Redis's `Protocol error: `.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("invalid bulk length")]
    BulkLength,
    #[error("invalid multibulk length")]
    MultibulkLength,
    #[error("too big inline request")]
    InlineTooLong,
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("line too long")]
    LineTooLong,
    #[error("invalid integer")]
    Integer,
    #[error("invalid double")]
    Double,
    #[error("invalid boolean")]
    Boolean,
    #[error("invalid null")]
    Null,
    #[error("invalid verbatim string")]
    Verbatim,
    #[error("expected CRLF after the bulk string")]
    BulkTerminator,
    #[error("expected CRLF at the end of the line")]
    LineTerminator,
    #[error("nesting deeper than {0} levels")]
    TooDeep(usize),
    #[error("unsupported type byte '{}'", char::from(*.0))]
    UnsupportedType(u8),
    #[error("expected '$', got '{}'", char::from(*.0))]
    ExpectedBulk(u8),
}

/// Which protocol a connection speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

/// One RESP value.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// `+text` (no CR or LF in the text).
    Simple(String),
    /// `-text`, e.g. `ERR ...` (no CR or LF in the text).
    Error(String),
    /// `:n`
    Integer(i64),
    /// `$len` and the bytes.
    Bulk(Vec<u8>),
    /// RESP3 `_`; RESP2 `$-1`.
    Null,
    /// `*n` and the elements.
    Array(Vec<Frame>),
    /// RESP2 `*-1`.
    NullArray,
    /// RESP3 `%n` and n key-value pairs; RESP2 a flat array of 2n elements.
    Map(Vec<(Frame, Frame)>),
    /// RESP3 `,`; RESP2 a bulk string of the same text.
    Double(f64),
    /// RESP3 `#t` / `#f`; RESP2 `:1` / `:0`.
    Boolean(bool),
    /// RESP3 `=len` and `fmt:text`; RESP2 a bulk string of the text.
    Verbatim { format: [u8; 3], text: Vec<u8> },
    /// RESP3 `>n` and the elements (an out-of-band message: Pub/Sub); RESP2 `*n`.
    Push(Vec<Frame>),
    /// Several replies to one command, one after the other (SUBSCRIBE's one confirmation
    /// per channel); never nested in another frame.
    Sequence(Vec<Frame>),
}

impl Frame {
    /// `+OK`.
    pub fn ok() -> Frame {
        Frame::Simple("OK".to_string())
    }

    /// An `-ERR message` error.
    pub fn err(message: impl std::fmt::Display) -> Frame {
        Frame::Error(format!("ERR {message}"))
    }

    /// A bulk string of `bytes`.
    pub fn bulk(bytes: impl Into<Vec<u8>>) -> Frame {
        Frame::Bulk(bytes.into())
    }

    /// Writes the frame in RESP3's forms.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_to(Protocol::Resp3, out);
    }

    /// Writes the frame for a connection speaking `protocol`.
    pub fn encode_to(&self, protocol: Protocol, out: &mut Vec<u8>) {
        let resp3 = protocol == Protocol::Resp3;
        match self {
            Frame::Simple(text) => encode_line(out, b'+', text.as_bytes()),
            Frame::Error(text) => encode_line(out, b'-', text.as_bytes()),
            Frame::Integer(n) => encode_number(out, b':', *n),
            Frame::Bulk(bytes) => encode_bulk(out, bytes),
            Frame::Null if resp3 => out.extend_from_slice(b"_\r\n"),
            Frame::Null => out.extend_from_slice(b"$-1\r\n"),
            Frame::Array(items) => {
                encode_len(out, b'*', items.len());
                for item in items {
                    item.encode_to(protocol, out);
                }
            }
            Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
            Frame::Map(pairs) => {
                if resp3 {
                    encode_len(out, b'%', pairs.len());
                } else {
                    encode_len(out, b'*', pairs.len() * 2);
                }
                for (key, value) in pairs {
                    key.encode_to(protocol, out);
                    value.encode_to(protocol, out);
                }
            }
            Frame::Double(x) => {
                let text = double_text(*x);
                if resp3 {
                    encode_line(out, b',', text.as_bytes());
                } else {
                    encode_bulk(out, text.as_bytes());
                }
            }
            Frame::Boolean(b) if resp3 => {
                out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" })
            }
            Frame::Boolean(b) => encode_number(out, b':', i64::from(*b)),
            Frame::Verbatim { format, text } if resp3 => {
                encode_len(out, b'=', text.len() + 4);
                out.extend_from_slice(format);
                out.push(b':');
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            Frame::Verbatim { text, .. } => encode_bulk(out, text),
            Frame::Push(items) => {
                encode_len(out, if resp3 { b'>' } else { b'*' }, items.len());
                for item in items {
                    item.encode_to(protocol, out);
                }
            }
            Frame::Sequence(frames) => {
                for frame in frames {
                    frame.encode_to(protocol, out);
                }
            }
        }
    }
}

fn encode_line(out: &mut Vec<u8>, tag: u8, text: &[u8]) {
    out.push(tag);
    // A CR or LF would end the line early and desynchronize the peer.
    out.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

fn encode_number(out: &mut Vec<u8>, tag: u8, n: i64) {
    out.push(tag);
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

fn encode_len(out: &mut Vec<u8>, tag: u8, len: usize) {
    // Lengths come from in-memory collections, far below i64::MAX.
    encode_number(out, tag, i64::try_from(len).unwrap_or(i64::MAX));
}

/// A bulk string (`$len`, the bytes, CRLF), the same in RESP2 and RESP3: for replies that
/// write their elements straight into the output (`crate::cmd::range`).
pub(crate) fn encode_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    encode_len(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// An array's header, `*len` and CRLF, on the stack: for a reply whose elements are written
/// before their count is known (`crate::cmd::range` fills a placeholder with it).
pub(crate) struct ArrayHeader {
    bytes: [u8; 24],
    len: usize,
}

impl ArrayHeader {
    pub(crate) fn new(len: usize) -> Self {
        let mut bytes = [0u8; 24];
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut m = len;
        loop {
            i -= 1;
            digits[i] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        let n = digits.len() - i;
        bytes[0] = b'*';
        bytes[1..=n].copy_from_slice(&digits[i..]);
        bytes[n + 1..n + 3].copy_from_slice(b"\r\n");
        Self { bytes, len: n + 3 }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A double as Redis 7.2 prints it (its `fpconv_dtoa`): `inf`, `-inf`, `nan`, or the shortest
/// digits that read back to the same value, written plainly when the decimal exponent is
/// small (`1.5`, `2000`, `0.000001`) and as `d.ddde±x` otherwise (`1e+21`, `1e-7`,
/// `1.7976931348623157e+308`), never hundreds of zeros.
pub(crate) fn double_text(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `d.ddd e E`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let e: i64 = exponent.parse().unwrap_or(0);
    let n = digits.len() as i64;
    // value = digits × 10^k
    let k = e - (n - 1);
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    if k >= 0 && e.abs() < n + 7 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', k as usize));
    } else if k < 0 && (k > -7 || e.abs() < 4) {
        let point = n + k;
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point) as usize));
            out.push_str(&digits);
        } else {
            out.push_str(&digits[..point as usize]);
            out.push('.');
            out.push_str(&digits[point as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    out
}

/// Decodes one frame from the front of `buf` (see the module doc).
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Option<(Frame, usize)>, FrameError> {
    parse_at(buf, 0, limits, 0)
}

/// The line starting at `pos` (type byte excluded by the caller): its end (index of the CR)
/// and the index after the LF; None while incomplete.
pub(crate) fn line_at(
    buf: &[u8],
    pos: usize,
    limit: usize,
) -> Result<Option<(usize, usize)>, FrameError> {
    let rest = buf.get(pos..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'\r') {
        Some(cr) => {
            if cr > limit {
                return Err(FrameError::LineTooLong);
            }
            match rest.get(cr + 1) {
                None => Ok(None),
                Some(b'\n') => Ok(Some((pos + cr, pos + cr + 2))),
                Some(_) => Err(FrameError::LineTerminator),
            }
        }
        None if rest.len() > limit => Err(FrameError::LineTooLong),
        None => Ok(None),
    }
}

/// A decimal i64 as RESP writes it: an optional sign, then digits only.
pub(crate) fn parse_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(d - b'0');
        // Accumulate negatively so that i64::MIN is reachable.
        value = value.checked_mul(10)?.checked_sub(digit)?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// The length in a `$`, `*`, `%`, `~` or `=` header: -1 or 0..=max; anything else is `bad`.
fn parse_len(text: &[u8], max: usize, bad: FrameError) -> Result<Option<usize>, FrameError> {
    match parse_i64(text) {
        Some(-1) => Ok(None),
        Some(n) if n >= 0 => match usize::try_from(n) {
            Ok(n) if n <= max => Ok(Some(n)),
            _ => Err(bad),
        },
        _ => Err(bad),
    }
}

type Parsed = Result<Option<(Frame, usize)>, FrameError>;

fn parse_at(buf: &[u8], pos: usize, limits: &Limits, depth: usize) -> Parsed {
    let Some(&tag) = buf.get(pos) else {
        return Ok(None);
    };
    let body = pos + 1;
    match tag {
        b'+' | b'-' | b':' | b',' | b'#' | b'_' => {
            let Some((end, next)) = line_at(buf, body, limits.inline_bytes_max)? else {
                return Ok(None);
            };
            let text = &buf[body..end];
            let frame = match tag {
                b'+' => Frame::Simple(String::from_utf8_lossy(text).into_owned()),
                b'-' => Frame::Error(String::from_utf8_lossy(text).into_owned()),
                b':' => Frame::Integer(parse_i64(text).ok_or(FrameError::Integer)?),
                b',' => Frame::Double(parse_double(text)?),
                b'#' => match text {
                    b"t" => Frame::Boolean(true),
                    b"f" => Frame::Boolean(false),
                    _ => return Err(FrameError::Boolean),
                },
                _ if text.is_empty() => Frame::Null,
                _ => return Err(FrameError::Null),
            };
            Ok(Some((frame, next)))
        }
        b'$' | b'=' => {
            let Some((end, next)) = line_at(buf, body, limits.inline_bytes_max)? else {
                return Ok(None);
            };
            let Some(len) = parse_len(
                &buf[body..end],
                limits.bulk_bytes_max,
                FrameError::BulkLength,
            )?
            else {
                return if tag == b'$' {
                    Ok(Some((Frame::Null, next)))
                } else {
                    Err(FrameError::Verbatim)
                };
            };
            let data_end = next + len;
            if buf.len() < data_end + 2 {
                // Only a prefix is here; if the bytes that are here already break the
                // terminator, say so now.
                if buf.len() > data_end && buf[data_end] != b'\r' {
                    return Err(FrameError::BulkTerminator);
                }
                return Ok(None);
            }
            if &buf[data_end..data_end + 2] != b"\r\n" {
                return Err(FrameError::BulkTerminator);
            }
            let data = &buf[next..data_end];
            let frame = if tag == b'$' {
                Frame::Bulk(data.to_vec())
            } else {
                match data {
                    [a, b, c, b':', text @ ..] => Frame::Verbatim {
                        format: [*a, *b, *c],
                        text: text.to_vec(),
                    },
                    _ => return Err(FrameError::Verbatim),
                }
            };
            Ok(Some((frame, data_end + 2)))
        }
        b'*' | b'~' | b'%' => {
            if depth >= limits.depth_max {
                return Err(FrameError::TooDeep(limits.depth_max));
            }
            let Some((end, mut next)) = line_at(buf, body, limits.inline_bytes_max)? else {
                return Ok(None);
            };
            let max = if tag == b'%' {
                limits.array_elements_max / 2
            } else {
                limits.array_elements_max
            };
            let Some(count) = parse_len(&buf[body..end], max, FrameError::MultibulkLength)? else {
                return if tag == b'*' {
                    Ok(Some((Frame::NullArray, next)))
                } else {
                    Err(FrameError::MultibulkLength)
                };
            };
            if tag == b'%' {
                let mut pairs = Vec::with_capacity(count.min(PREALLOC_ELEMENTS_MAX));
                for _ in 0..count {
                    let Some((key, after_key)) = parse_at(buf, next, limits, depth + 1)? else {
                        return Ok(None);
                    };
                    let Some((value, after_value)) = parse_at(buf, after_key, limits, depth + 1)?
                    else {
                        return Ok(None);
                    };
                    pairs.push((key, value));
                    next = after_value;
                }
                return Ok(Some((Frame::Map(pairs), next)));
            }
            let mut items = Vec::with_capacity(count.min(PREALLOC_ELEMENTS_MAX));
            for _ in 0..count {
                let Some((item, after)) = parse_at(buf, next, limits, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                next = after;
            }
            Ok(Some((Frame::Array(items), next)))
        }
        b'>' | b'|' | b'(' | b'!' => Err(FrameError::UnsupportedType(tag)),
        _ => {
            let Some((args, next)) = crate::parse::inline_at(buf, pos, limits)? else {
                return Ok(None);
            };
            Ok(Some((
                Frame::Array(args.into_iter().map(Frame::Bulk).collect()),
                next,
            )))
        }
    }
}

fn parse_double(text: &[u8]) -> Result<f64, FrameError> {
    let text = std::str::from_utf8(text).map_err(|_| FrameError::Double)?;
    match text {
        "inf" | "+inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        "nan" => Ok(f64::NAN),
        // Only decimal forms: Rust would also take "infinity" or "NaN".
        _ if text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')) =>
        {
            text.parse().map_err(|_| FrameError::Double)
        }
        _ => Err(FrameError::Double),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(bytes: &[u8]) -> Parsed {
        parse(bytes, &Limits::default())
    }

    fn round_trip(frame: Frame) {
        let mut out = Vec::new();
        frame.encode(&mut out);
        assert_eq!(
            parse_all(&out),
            Ok(Some((frame.clone(), out.len()))),
            "{out:?}"
        );
        for cut in 0..out.len() {
            assert_eq!(parse_all(&out[..cut]), Ok(None), "prefix {cut} of {out:?}");
        }
    }

    // Goal: every frame type encodes and parses back, and each of its prefixes is incomplete.
    // Method: one frame per type, nested aggregates, the integer extremes.
    #[test]
    fn every_type_round_trips() {
        for frame in [
            Frame::ok(),
            Frame::err("unknown command"),
            Frame::Integer(0),
            Frame::Integer(i64::MIN),
            Frame::Integer(i64::MAX),
            Frame::bulk(""),
            Frame::bulk(b"a\r\nb".to_vec()),
            Frame::Null,
            Frame::NullArray,
            Frame::Array(vec![]),
            Frame::Array(vec![Frame::Integer(1), Frame::Array(vec![Frame::Null])]),
            Frame::Map(vec![(Frame::bulk("k"), Frame::Boolean(true))]),
            Frame::Double(1.5),
            Frame::Double(-1e300),
            Frame::Double(f64::INFINITY),
            Frame::Boolean(false),
            Frame::Verbatim {
                format: *b"txt",
                text: b"line\r\n".to_vec(),
            },
        ] {
            round_trip(frame);
        }
    }

    // Goal: RESP2 connections get Redis's downgrades of the RESP3 types.
    // Method: compare encoded bytes.
    #[test]
    fn resp2_downgrades() {
        let cases: [(Frame, &[u8]); 5] = [
            (Frame::Null, b"$-1\r\n"),
            (
                Frame::Map(vec![(Frame::bulk("a"), Frame::Integer(1))]),
                b"*2\r\n$1\r\na\r\n:1\r\n",
            ),
            (Frame::Double(2.5), b"$3\r\n2.5\r\n"),
            (Frame::Boolean(true), b":1\r\n"),
            (
                Frame::Verbatim {
                    format: *b"txt",
                    text: b"hi".to_vec(),
                },
                b"$2\r\nhi\r\n",
            ),
        ];
        for (frame, bytes) in cases {
            let mut out = Vec::new();
            frame.encode_to(Protocol::Resp2, &mut out);
            assert_eq!(out, bytes, "{frame:?}");
        }
    }

    // Goal: CR and LF in simple texts never break the stream.
    // Method: encode a simple string holding both and parse it back as one frame.
    #[test]
    fn simple_text_is_sanitized() {
        let mut out = Vec::new();
        Frame::Simple("a\r\nb".into()).encode(&mut out);
        assert_eq!(out, b"+a  b\r\n");
    }

    // Goal: malformed input and claims over the limits are errors, with Redis's wording.
    // Method: one input per error kind.
    #[test]
    fn malformed_frames_are_errors() {
        let limits = Limits::default();
        let too_big_bulk = format!("${}\r\n", BULK_BYTES_MAX + 1);
        let too_many = format!("*{}\r\n", ARRAY_ELEMENTS_MAX + 1);
        let cases: Vec<(&[u8], FrameError)> = vec![
            (b"$-2\r\n", FrameError::BulkLength),
            (b"$x\r\n", FrameError::BulkLength),
            (too_big_bulk.as_bytes(), FrameError::BulkLength),
            (too_many.as_bytes(), FrameError::MultibulkLength),
            (b"*1x\r\n", FrameError::MultibulkLength),
            (b"$1\r\nab\r\n", FrameError::BulkTerminator),
            (b":12a\r\n", FrameError::Integer),
            (b":99999999999999999999\r\n", FrameError::Integer),
            (b"#x\r\n", FrameError::Boolean),
            (b",infinity\r\n", FrameError::Double),
            (b"_x\r\n", FrameError::Null),
            (b"=2\r\nab\r\n", FrameError::Verbatim),
            (b"+ok\rx", FrameError::LineTerminator),
            (b">1\r\n", FrameError::UnsupportedType(b'>')),
            (b"\"unclosed\r\n", FrameError::UnbalancedQuotes),
        ];
        for (bytes, want) in cases {
            assert_eq!(parse(bytes, &limits), Err(want.clone()), "{bytes:?}");
        }
        let deep = "*1\r\n".repeat(DEPTH_MAX + 1);
        assert_eq!(
            parse_all(deep.as_bytes()),
            Err(FrameError::TooDeep(DEPTH_MAX))
        );
        let long_line = vec![b'a'; INLINE_BYTES_MAX + 1];
        assert_eq!(parse_all(&long_line), Err(FrameError::InlineTooLong));
        assert_eq!(
            FrameError::BulkLength.to_string(),
            "invalid bulk length",
            "Redis's wording"
        );
    }

    // Goal: a huge claimed array with no elements behind it costs no memory up front.
    // Method: claim the maximum, supply nothing, expect incomplete (and no allocation abort).
    #[test]
    fn claimed_lengths_are_not_preallocated() {
        let header = format!("*{ARRAY_ELEMENTS_MAX}\r\n");
        assert_eq!(parse_all(header.as_bytes()), Ok(None));
        let header = format!("${BULK_BYTES_MAX}\r\nabc");
        assert_eq!(parse_all(header.as_bytes()), Ok(None));
    }

    // Goal: inline commands parse as arrays of bulk strings, quotes and escapes as in Redis.
    // Method: a few lines, including one ending in a bare LF.
    #[test]
    fn inline_commands() {
        let bulks =
            |items: &[&[u8]]| Frame::Array(items.iter().map(|b| Frame::Bulk(b.to_vec())).collect());
        assert_eq!(
            parse_all(b"SET k \"a b\\x41\\n\"\r\n"),
            Ok(Some((bulks(&[b"SET", b"k", b"a bA\n"]), 19)))
        );
        assert_eq!(
            parse_all(b"get 'it\\'s'\n"),
            Ok(Some((bulks(&[b"get", b"it's"]), 12)))
        );
        assert_eq!(parse_all(b"PING"), Ok(None));
    }

    // Goal: doubles print as Redis 7.2's fpconv_dtoa: shortest round-trip digits, plain for
    // small exponents, d.ddde±x otherwise (never a 309-digit 1e308, as the issue-19 review
    // found). Method: values around each switch; every text reads back to its value.
    #[test]
    fn double_text_as_redis() {
        for (x, text) in [
            (1.5, "1.5"),
            (2000.0, "2000"),
            (0.1, "0.1"),
            (10.5, "10.5"),
            (1e7, "10000000"),
            (1e8, "1e+8"),
            (123456789.0, "123456789"),
            (1e21, "1e+21"),
            (1e308, "1e+308"),
            (f64::MAX, "1.7976931348623157e+308"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (0.00012, "0.00012"),
            (1.5e-10, "1.5e-10"),
            (5e-324, "5e-324"),
            (-2.5, "-2.5"),
            (-1e300, "-1e+300"),
            (0.0, "0"),
            (-0.0, "-0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(double_text(x), text, "{x:e}");
            if x.is_finite() {
                assert_eq!(text.parse::<f64>().ok(), Some(x), "{text} reads back");
            }
        }
    }
}
