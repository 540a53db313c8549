//! Requests: the server's incremental decoder of pipelined commands, inline command lines,
//! and the argument helpers the commands share.
//!
//! A request is a RESP array of bulk strings or an inline line (masstree.md §3: "a single
//! client message can include many queries"). [`Requests::decode`] finds every complete
//! command in a connection's buffer in one pass, as spans into the buffer (no copy of the
//! arguments), so that the connection runs them as one batch (masstree.md §5).
//!
//! Invariants:
//! - The limits are those of [`crate::frame::parse`] (same [`Limits`], same errors), so a
//!   frame the general parser refuses is refused here too.
//! - A partly received array is not parsed again from its start on the next read: the
//!   decoder keeps the arguments already found (their offsets relative to the command's
//!   start), so a large pipelined array costs linear, not quadratic, time.
//! - Memory is bounded by the buffer: nothing is reserved from a claimed count.
//!
//! Choices, as Redis: an array of zero or negative length is skipped; an empty inline line
//! is skipped; inline lines end at LF with an optional CR before it; quotes and escapes in
//! inline lines follow Redis's `sdssplitargs`.

use crate::frame::{line_at, parse_i64, FrameError, Limits, PREALLOC_ELEMENTS_MAX};

/// One argument: where its bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    /// In the decoder's own buffer of unescaped inline arguments, not the read buffer.
    inline: bool,
    start: usize,
    end: usize,
}

/// An array whose arguments have not all arrived.
#[derive(Clone, Debug)]
struct Partial {
    count: usize,
    /// Offset (from the command's start) of the next argument's header.
    next: usize,
    spans: Vec<Span>,
}

/// The complete commands of a read buffer (see the module doc).
#[derive(Debug)]
pub struct Requests {
    limits: Limits,
    spans: Vec<Span>,
    /// Each command's range in `spans`.
    commands: Vec<(usize, usize)>,
    /// Each command's end offset in the buffer.
    ends: Vec<usize>,
    inline: Vec<u8>,
    partial: Option<Partial>,
    error: Option<FrameError>,
}

impl Requests {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            spans: Vec::new(),
            commands: Vec::new(),
            ends: Vec::new(),
            inline: Vec::new(),
            partial: None,
            error: None,
        }
    }

    /// Finds the complete commands at the front of `buf` and returns how many bytes they
    /// take. The caller must remove exactly those bytes from the front of its buffer before
    /// the next call (a partly received command is resumed from the front). After a
    /// protocol error the commands before it are still returned, and [`Self::error`] tells.
    pub fn decode(&mut self, buf: &[u8]) -> usize {
        self.spans.clear();
        self.commands.clear();
        self.ends.clear();
        self.inline.clear();
        self.error = None;
        let mut pos = 0;
        while pos < buf.len() {
            match self.decode_one(buf, pos) {
                Ok(Some(next)) => {
                    if self.ends.len() < self.commands.len() {
                        self.ends.push(next);
                    }
                    pos = next;
                }
                Ok(None) => break,
                Err(err) => {
                    self.partial = None;
                    self.error = Some(err);
                    break;
                }
            }
        }
        pos
    }

    /// Keeps only the first `count` commands (the caller runs no more of this decode): the
    /// bytes they take, for the caller to remove. The rest is decoded again next time.
    pub fn cut(&mut self, count: usize) -> usize {
        debug_assert!(count <= self.commands.len());
        self.partial = None;
        self.error = None;
        self.commands.truncate(count);
        self.ends.truncate(count);
        self.ends.last().copied().unwrap_or(0)
    }

    /// Gives back the memory of an unusually large batch (kept otherwise, for reuse).
    pub fn shrink(&mut self) {
        const KEPT_COUNT: usize = 4096;
        if self.spans.capacity() > KEPT_COUNT && self.partial.is_none() {
            self.spans = Vec::new();
        }
        if self.commands.capacity() > KEPT_COUNT {
            self.commands = Vec::new();
            self.ends = Vec::new();
        }
        if self.inline.capacity() > KEPT_COUNT * 16 {
            self.inline = Vec::new();
        }
    }

    /// The protocol error that stopped the last [`Self::decode`], if any.
    pub fn error(&self) -> Option<&FrameError> {
        self.error.as_ref()
    }

    /// How many complete commands the last [`Self::decode`] found.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Puts command `index`'s arguments into `argv` (cleared first).
    pub fn argv<'a>(&'a self, index: usize, buf: &'a [u8], argv: &mut Vec<&'a [u8]>) {
        argv.clear();
        let (from, to) = self.commands[index];
        for span in &self.spans[from..to] {
            let source = if span.inline { &self.inline[..] } else { buf };
            argv.push(&source[span.start..span.end]);
        }
    }

    /// Decodes the command at `pos`: the offset after it, None while incomplete.
    fn decode_one(&mut self, buf: &[u8], pos: usize) -> Result<Option<usize>, FrameError> {
        if buf[pos] != b'*' {
            return self.decode_inline(buf, pos);
        }
        let from = self.spans.len();
        let (count, mut next) = match self.partial.take() {
            // Resumed: the command starts at the buffer's front (see `decode`).
            Some(partial) => {
                debug_assert_eq!(pos, 0, "a partial command resumes at the buffer's front");
                self.spans.extend(partial.spans);
                (partial.count, partial.next)
            }
            None => {
                let Some((number, next)) = header(buf, pos + 1, self.limits.inline_bytes_max)?
                else {
                    return Ok(None);
                };
                let count = match number {
                    Some(n) if n <= 0 => return Ok(Some(next)),
                    Some(n) if n as u64 <= self.limits.array_elements_max as u64 => n as usize,
                    _ => return Err(FrameError::MultibulkLength),
                };
                (count, next)
            }
        };
        while self.spans.len() - from < count {
            match self.decode_bulk(buf, next)? {
                Some((start, end, after)) => {
                    self.spans.push(Span {
                        inline: false,
                        start,
                        end,
                    });
                    next = after;
                }
                None => {
                    let mut spans =
                        Vec::with_capacity((self.spans.len() - from).min(PREALLOC_ELEMENTS_MAX));
                    spans.extend(self.spans.drain(from..).map(|s| Span {
                        start: s.start - pos,
                        end: s.end - pos,
                        ..s
                    }));
                    self.partial = Some(Partial {
                        count,
                        next: next - pos,
                        spans,
                    });
                    return Ok(None);
                }
            }
        }
        self.commands.push((from, self.spans.len()));
        Ok(Some(next))
    }

    /// One `$len\r\n...\r\n` at `pos`: the data's range and the offset after it.
    fn decode_bulk(
        &self,
        buf: &[u8],
        pos: usize,
    ) -> Result<Option<(usize, usize, usize)>, FrameError> {
        let Some(&tag) = buf.get(pos) else {
            return Ok(None);
        };
        if tag != b'$' {
            return Err(FrameError::ExpectedBulk(tag));
        }
        let Some((number, next)) = header(buf, pos + 1, self.limits.inline_bytes_max)? else {
            return Ok(None);
        };
        let len = match number {
            Some(n) if n >= 0 && n as u64 <= self.limits.bulk_bytes_max as u64 => n as usize,
            _ => return Err(FrameError::BulkLength),
        };
        let data_end = next + len;
        if buf.len() < data_end + 2 {
            if buf.len() > data_end && buf[data_end] != b'\r' {
                return Err(FrameError::BulkTerminator);
            }
            return Ok(None);
        }
        if &buf[data_end..data_end + 2] != b"\r\n" {
            return Err(FrameError::BulkTerminator);
        }
        Ok(Some((next, data_end, data_end + 2)))
    }

    fn decode_inline(&mut self, buf: &[u8], pos: usize) -> Result<Option<usize>, FrameError> {
        let Some((args, next)) = inline_at(buf, pos, &self.limits)? else {
            return Ok(None);
        };
        if args.is_empty() {
            return Ok(Some(next));
        }
        let from = self.spans.len();
        for arg in args {
            let start = self.inline.len();
            self.inline.extend_from_slice(&arg);
            self.spans.push(Span {
                inline: true,
                start,
                end: self.inline.len(),
            });
        }
        self.commands.push((from, self.spans.len()));
        Ok(Some(next))
    }
}

/// A header's number (None if its line is no number) and the offset after its CRLF.
type Header = (Option<i64>, usize);

/// The number of a `*` or `$` header whose text starts at `at` (None if the line is no
/// number) and the offset after its CRLF; Ok(None) while the line is incomplete. Errors are
/// [`line_at`]'s; the number is read strictly, as Redis's `string2ll` does ([`parse_int`]: no
/// `+`, no leading zeros; review rev-p16 F1), so `*02` or `$+3` is a protocol error as there.
fn header(buf: &[u8], at: usize, limit: usize) -> Result<Option<Header>, FrameError> {
    if let Some((number, next)) = short_header(buf, at, limit) {
        return Ok(Some((Some(number), next)));
    }
    let Some((end, next)) = line_at(buf, at, limit)? else {
        return Ok(None);
    };
    Ok(Some((parse_int(&buf[at..end]), next)))
}

/// The common header, 1 to 9 digits then CRLF, read in one pass (issue 15: a GET's request
/// has three such headers, and the general path scans each line twice). None for anything
/// else, which [`header`] reads the general way, so that every error and every value stays
/// the general path's.
#[inline]
fn short_header(buf: &[u8], at: usize, limit: usize) -> Option<(i64, usize)> {
    let rest = buf.get(at..)?;
    let mut number = 0i64;
    for (i, &b) in rest.iter().enumerate().take(10) {
        if b.is_ascii_digit() {
            number = number * 10 + i64::from(b - b'0');
            continue;
        }
        // A leading zero of a longer number goes to the general path, which refuses it.
        let whole = b == b'\r'
            && i > 0
            && i <= limit
            && !(i > 1 && rest[0] == b'0')
            && rest.get(i + 1) == Some(&b'\n');
        return whole.then_some((number, at + i + 2));
    }
    None
}

/// An inline line's arguments and the offset after it.
type InlineLine = (Vec<Vec<u8>>, usize);

/// The inline command line at `pos`: its arguments and the offset after its LF; None while
/// no LF has arrived.
pub(crate) fn inline_at(
    buf: &[u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<InlineLine>, FrameError> {
    let rest = buf.get(pos..).unwrap_or_default();
    let Some(lf) = rest.iter().position(|&b| b == b'\n') else {
        if rest.len() > limits.inline_bytes_max {
            return Err(FrameError::InlineTooLong);
        }
        return Ok(None);
    };
    let mut line = &rest[..lf];
    if let Some(stripped) = line.strip_suffix(b"\r") {
        line = stripped;
    }
    if line.len() > limits.inline_bytes_max {
        return Err(FrameError::InlineTooLong);
    }
    Ok(Some((split_inline(line)?, pos + lf + 1)))
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | 0)
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits an inline line into arguments as Redis's `sdssplitargs` does: spaces separate,
/// `"..."` takes `\n \r \t \b \a \\ \" \xHH` escapes, `'...'` takes `\'`, and a closing
/// quote must be followed by a space or the end of the line.
pub fn split_inline(line: &[u8]) -> Result<Vec<Vec<u8>>, FrameError> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        if i >= line.len() {
            return Ok(args);
        }
        let mut arg = Vec::new();
        let mut double = false;
        let mut single = false;
        loop {
            let Some(&c) = line.get(i) else {
                if double || single {
                    return Err(FrameError::UnbalancedQuotes);
                }
                break;
            };
            if double {
                if c == b'\\' && i + 3 < line.len() && line[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex_digit(line[i + 2]), hex_digit(line[i + 3])) {
                        arg.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < line.len() {
                    arg.push(match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                    i += 2;
                    continue;
                }
                if c == b'"' {
                    if line.get(i + 1).is_some_and(|&n| !is_space(n)) {
                        return Err(FrameError::UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                }
                arg.push(c);
            } else if single {
                if c == b'\\' && line.get(i + 1) == Some(&b'\'') {
                    arg.push(b'\'');
                    i += 2;
                    continue;
                }
                if c == b'\'' {
                    if line.get(i + 1).is_some_and(|&n| !is_space(n)) {
                        return Err(FrameError::UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                }
                arg.push(c);
            } else {
                match c {
                    b'"' => double = true,
                    b'\'' => single = true,
                    _ if is_space(c) => break,
                    _ => arg.push(c),
                }
            }
            i += 1;
        }
        args.push(arg);
    }
}

/// A strict decimal i64 as Redis's `string2ll` reads it: `0`, or an optional `-` and a
/// digit string without leading zeros; no `+`, no spaces.
pub fn parse_int(bytes: &[u8]) -> Option<i64> {
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    match digits {
        [b'0'] if digits.len() == bytes.len() => Some(0),
        [b'1'..=b'9', ..] => parse_i64(bytes),
        _ => None,
    }
}

/// Whether `arg` is `word` in any letter case (`word` is lower case).
pub fn is_word(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(requests: &Requests, buf: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let mut all = Vec::new();
        let mut argv = Vec::new();
        for i in 0..requests.len() {
            requests.argv(i, buf, &mut argv);
            all.push(argv.iter().map(|a| a.to_vec()).collect());
        }
        all
    }

    // Goal: a pipeline of arrays and inline lines decodes into its commands in order.
    // Method: decode one buffer holding three commands and half of a fourth.
    #[test]
    fn decodes_a_pipeline() {
        let mut requests = Requests::new(Limits::default());
        let buf = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n*0\r\n\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv";
        let used = requests.decode(buf);
        assert_eq!(
            commands(&requests, buf),
            vec![vec![b"GET".to_vec(), b"k".to_vec()], vec![b"PING".to_vec()]]
        );
        assert_eq!(&buf[used..], b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv");
        assert!(requests.error().is_none());
        // The rest arrives: the partial array resumes from the buffer's front.
        let mut rest = buf[used..].to_vec();
        rest.extend_from_slice(b"\r\n");
        let used = requests.decode(&rest);
        assert_eq!(used, rest.len());
        assert_eq!(
            commands(&requests, &rest),
            vec![vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]]
        );
    }

    // Goal: an array fed one byte at a time decodes exactly once, to the right arguments.
    // Method: grow a buffer byte by byte, draining what decode consumes.
    #[test]
    fn byte_by_byte() {
        let input = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$0\r\n\r\n";
        let mut requests = Requests::new(Limits::default());
        let mut buf = Vec::new();
        let mut found = Vec::new();
        for &b in input {
            buf.push(b);
            let used = requests.decode(&buf);
            found.extend(commands(&requests, &buf));
            buf.drain(..used);
            assert!(requests.error().is_none());
        }
        assert!(buf.is_empty());
        assert_eq!(
            found,
            vec![vec![b"SET".to_vec(), b"hello".to_vec(), b"".to_vec()]]
        );
    }

    // Goal: a protocol error still returns the commands before it.
    // Method: a good command, then an array whose element is not a bulk string.
    #[test]
    fn error_after_good_commands() {
        let mut requests = Requests::new(Limits::default());
        let buf = b"PING\r\n*1\r\n:1\r\n";
        let used = requests.decode(buf);
        assert_eq!(used, 6);
        assert_eq!(requests.len(), 1);
        assert_eq!(requests.error(), Some(&FrameError::ExpectedBulk(b':')));
        for (bad, want) in [
            (&b"*1\r\n$-1\r\n"[..], FrameError::BulkLength),
            (b"*99999999\r\n", FrameError::MultibulkLength),
            (b"*1\r\n$1\r\nab", FrameError::BulkTerminator),
            (b"set \"a\r\n", FrameError::UnbalancedQuotes),
        ] {
            requests.decode(bad);
            assert_eq!(requests.error(), Some(&want), "{bad:?}");
        }
    }

    // Goal (review rev-p16 F1): a `*`/`$` header's number in Redis's strict syntax, as
    // redis-server's `processMultibulkBuffer` reads it with `string2ll`: no leading zero, no
    // `+`; anything else is `invalid multibulk length` / `invalid bulk length` (redis 7.0.15
    // answers `*02`, `*+2`, `$03`, `$+3` so on a raw socket; forest runs the GET).
    // Method: each spelling decoded, its error compared.
    #[test]
    fn rev_p16_f1_header_number_is_strict_as_redis() {
        let cases: [(&[u8], FrameError); 6] = [
            (
                b"*02\r\n$3\r\nGET\r\n$1\r\nk\r\n",
                FrameError::MultibulkLength,
            ),
            (
                b"*+2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
                FrameError::MultibulkLength,
            ),
            (b"*00\r\n", FrameError::MultibulkLength),
            (b"*2\r\n$03\r\nGET\r\n$1\r\nk\r\n", FrameError::BulkLength),
            (b"*2\r\n$+3\r\nGET\r\n$1\r\nk\r\n", FrameError::BulkLength),
            (b"*2\r\n$3\r\nGET\r\n$00\r\n\r\n", FrameError::BulkLength),
        ];
        let mut wrong = Vec::new();
        for (buf, want) in cases {
            let mut requests = Requests::new(Limits::default());
            requests.decode(buf);
            if requests.error() != Some(&want) {
                wrong.push(format!(
                    "{:?}: {:?}, {} commands",
                    String::from_utf8_lossy(buf),
                    requests.error(),
                    requests.len()
                ));
            }
        }
        assert!(wrong.is_empty(), "accepted where Redis refuses: {wrong:#?}");
    }

    // Goal: the one-pass header read answers exactly as the general path (line_at, then
    // parse_int): value, offset, incompleteness and error, at any line limit.
    // Method: headers of 0 to 11 digits, with leading zeros, signs, letters, a CR without its
    // LF or cut anywhere, each under limits 0 to 12 and the default.
    #[test]
    fn one_pass_header_agrees_with_the_general_path() {
        let general = |buf: &[u8], limit: usize| {
            line_at(buf, 0, limit)
                .map(|line| line.map(|(end, next)| (parse_int(&buf[..end]), next)))
        };
        let mut texts: Vec<Vec<u8>> = Vec::new();
        for digits in 0..12 {
            let number: Vec<u8> = (0..digits).map(|i| b'1' + (i % 9) as u8).collect();
            for tail in [&b"\r\n"[..], b"\r", b"", b"\rx", b"\n", b"x\r\n"] {
                for prefix in [&b""[..], b"0", b"-", b"+", b"00"] {
                    texts.push([prefix, &number[..], tail].concat());
                }
            }
        }
        texts.push(b"-1\r\n".to_vec());
        texts.push(b"999999999\r\n".to_vec());
        texts.push(b"1234567890\r\n".to_vec());
        let limits = (0..=12).chain([crate::frame::INLINE_BYTES_MAX]);
        for limit in limits {
            for text in &texts {
                let mut buf = text.clone();
                buf.extend_from_slice(b"$1\r\nk\r\n");
                for cut in 0..=buf.len() {
                    let buf = &buf[..cut];
                    assert_eq!(
                        header(buf, 0, limit),
                        general(buf, limit),
                        "{buf:?} limit {limit}"
                    );
                }
            }
        }
    }

    // Goal: Redis's strict integer syntax.
    // Method: accepted and refused spellings.
    #[test]
    fn strict_integers() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b"-0",
            b" 1",
            b"1 ",
            b"1.0",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_int(bad), None, "{bad:?}");
        }
    }

    // Goal: inline splitting matches sdssplitargs on quotes and spaces.
    // Method: several lines and their expected arguments.
    #[test]
    fn inline_splitting() {
        let split = |s: &[u8]| split_inline(s);
        assert_eq!(split(b"  a  b\t"), Ok(vec![b"a".to_vec(), b"b".to_vec()]));
        assert_eq!(split(b"\"\""), Ok(vec![b"".to_vec()]));
        assert_eq!(split(b"'a\"b'"), Ok(vec![b"a\"b".to_vec()]));
        assert_eq!(split(b"\"a\"b"), Err(FrameError::UnbalancedQuotes));
        assert_eq!(split(b"'a"), Err(FrameError::UnbalancedQuotes));
        assert_eq!(split(b""), Ok(vec![]));
    }
}
