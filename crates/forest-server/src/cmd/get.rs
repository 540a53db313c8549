//! GET key. A miss looks for a collection of that name (only while any exists) to answer
//! WRONGTYPE as Redis does; a hit costs nothing more.

use super::{coll, Ctx, Reply};
use crate::frame::{encode_bulk, Frame};
use crate::server::Shared;

pub fn get(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    match ctx.get_reply(argv[1]) {
        Frame::Null => match coll::kind_of(ctx, argv[1])? {
            None => Ok(Frame::Null),
            Some(_) => Err(coll::wrongtype()),
        },
        reply => Ok(reply),
    }
}

/// GET with its reply written straight into the connection's output (`cmd::Encoder`): the
/// bytes `get`'s reply encodes to, without building a `Frame` or matching on it to encode
/// and recycle it (the value is still read into a pooled buffer and copied out; issue 15,
/// session 19: counted in instructions, most of a pipelined GET's server work is such
/// overhead around the store's read).
///
/// A GET whose value its connection read before it with the GETs around it ([`PreReads`])
/// takes that answer instead of reading; the rest is the same.
pub(crate) fn get_into(
    ctx: &mut Ctx<'_, '_>,
    argv: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), Frame> {
    let answer = match ctx.unit {
        None => ctx.buffers.prereads.answer(),
        Some(_) => None,
    };
    let found = match answer {
        Some(Answer { slot, deadline }) => {
            // As `Ctx::read`: a deadline is compared with the command's now.
            let live = slot.is_some() && deadline.is_none_or(|d| d > ctx.now_ms());
            if let (true, Some(slot)) = (live, slot) {
                encode_bulk(out, ctx.buffers.prereads.value(slot));
            }
            live
        }
        None => {
            let mut value = ctx.buffers.take();
            let found = ctx.read(argv[1], &mut value);
            if found {
                encode_bulk(out, &value);
            }
            ctx.buffers.give(value);
            found
        }
    };
    if !found {
        if coll::kind_of(ctx, argv[1])?.is_some() {
            return Err(coll::wrongtype());
        }
        Frame::Null.encode_to(ctx.client.protocol, out);
    }
    Ok(())
}

/// The answers of a run of pipelined GETs, read together before the first of them runs
/// (issue 15): the store looks their keys up in one call ([`forest_store::Store::try_get_each`],
/// masstree's descents overlapped), each read as that GET's own would be, in the GETs' order.
/// A run is consecutive requests of one batch with nothing of this connection between them,
/// so reading their values first is reading each where its GET stands: every other
/// semantic (the deadline against the command's now, WRONGTYPE on a miss, errors, MULTI,
/// authentication) stays with the GET, which only takes its answer from here.
///
/// Each GET's answer is what `Expires::read_string` gives: its string's value where the map
/// of deadlines says it lives, with its deadline. A miss while a string moved between its
/// places (a deadline set or cleared) may be wrong, so from such a miss on the GETs read for
/// themselves; so do they after a page-load error.
#[derive(Debug, Default)]
pub(crate) struct PreReads {
    /// The batch's request number of the first answer.
    first: usize,
    /// Answers held, for requests `first..first + count`.
    count: usize,
    /// The request running now ([`Self::at_request`]).
    current: usize,
    /// Per answer: the value (deadline stripped) and whether the string is present.
    values: Vec<Vec<u8>>,
    found: Vec<bool>,
    /// Per answer: the string's deadline, if it lives at `FF 'x'`.
    deadlines: Vec<Option<u64>>,
    /// Where each answer was looked up: whether at `FF 'x'`.
    timed: Vec<bool>,
    /// Value buffers written since the last [`Self::clear`].
    used: usize,
    /// See [`Self::run_end`].
    end: usize,
}

/// A GET's answer from [`PreReads`]: where its value is (None: its string is absent) and the
/// string's deadline, if it has one.
struct Answer {
    slot: Option<usize>,
    deadline: Option<u64>,
}

/// Values a [`PreReads`] keeps the buffers of between batches (a longer run's are dropped).
const PREREADS_KEPT: usize = 64;
/// The largest value buffer a [`PreReads`] keeps between batches.
const PREREAD_BYTES_KEPT: usize = 64 * 1024;

impl PreReads {
    /// Forgets every answer (a new batch: request numbers start again), and the buffers of
    /// large values or a long run.
    pub(crate) fn clear(&mut self) {
        self.count = 0;
        self.end = 0;
        for value in self.values.iter_mut().take(std::mem::take(&mut self.used)) {
            if value.capacity() > PREREAD_BYTES_KEPT {
                *value = Vec::new();
            }
        }
        if self.values.len() > PREREADS_KEPT {
            self.values.truncate(PREREADS_KEPT);
            self.values.shrink_to_fit();
        }
    }

    /// Whether request `i` has an answer.
    fn covers(&self, i: usize) -> bool {
        self.count > 0 && (self.first..self.first + self.count).contains(&i)
    }

    /// The request after the last run read in this batch (its GETs past the answers kept
    /// read for themselves; a new run starts after it).
    pub(crate) fn run_end(&self) -> usize {
        self.end
    }

    /// Marks request `i` as the one running, whose GET takes answer `i` if there is one.
    pub(crate) fn at_request(&mut self, i: usize) {
        self.current = i;
    }

    /// The running request's answer, None when there is none (it reads for itself). Taken
    /// once.
    fn answer(&mut self) -> Option<Answer> {
        if !self.covers(self.current) {
            return None;
        }
        let at = self.current - self.first;
        // Once taken, the answer is gone: a request number is never run twice in a batch.
        self.current = usize::MAX;
        Some(Answer {
            slot: self.found[at].then_some(at),
            deadline: self.deadlines[at],
        })
    }

    /// The value of answer `slot` ([`Answer::slot`]).
    fn value(&self, slot: usize) -> &[u8] {
        &self.values[slot]
    }

    /// Reads the answers of the GETs of `keys`, requests `first..` of the batch (see the type's
    /// doc). Keeps a prefix of them: all, or those before a miss that a move may explain.
    pub(crate) fn read(&mut self, shared: &Shared, keys: &[&[u8]], first: usize) {
        self.first = first;
        self.count = 0;
        let n = keys.len();
        self.end = first + n;
        if self.values.len() < n {
            self.values.resize_with(n, Vec::new);
        }
        self.used = self.used.max(n);
        self.found.clear();
        self.found.resize(n, false);
        self.deadlines.clear();
        self.deadlines.resize(n, None);
        self.timed.clear();
        let expires = &shared.expires;
        let ended = expires.moves_ended();
        let mut places: Vec<Vec<u8>> = Vec::new();
        for key in keys {
            let timed = expires.deadline(key).is_some();
            if timed {
                places.push(crate::expiry::string_key(key));
            }
            self.timed.push(timed);
        }
        let mut timed_places = places.iter();
        let lookups: Vec<&[u8]> = keys
            .iter()
            .zip(&self.timed)
            .map(|(key, &timed)| match timed {
                true => timed_places.next().map_or(*key, Vec::as_slice),
                false => *key,
            })
            .collect();
        let read = shared
            .store
            .try_get_each(&lookups, &mut self.values[..n], &mut self.found);
        if read.is_err() {
            // Each GET reads for itself and meets the error in its own command.
            return;
        }
        let mut kept = n;
        for i in 0..n {
            if self.found[i] && self.timed[i] {
                match crate::expiry::strip_deadline(&mut self.values[i]) {
                    Some(deadline) => self.deadlines[i] = Some(deadline),
                    // Too short to hold a deadline: absent, as `read_string` reads it.
                    None => self.found[i] = false,
                }
            }
            if !self.found[i] && expires.moved_since(ended) {
                kept = i;
                break;
            }
        }
        self.count = kept;
    }
}

/// Whether the GET at request `i` of a batch starts a run worth reading together: it and
/// the next request are GETs of one key, and the client runs commands now (not queued in
/// MULTI, not refused: authenticated, not in RESP2's subscribed mode). Otherwise the GETs
/// read one by one, as before (wasted work only, never a different answer).
pub(crate) fn starts_run(client: &crate::cmd::Client, argv: &[&[u8]]) -> bool {
    argv.len() == 2
        && crate::parse::is_word(argv[0], "get")
        && client.authenticated
        && !client.txn.in_multi()
        && !(client.pubsub.is_subscribed() && client.protocol == crate::frame::Protocol::Resp2)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: GET returns the value or null, binary-safe.
    // Method: set a binary value and read it back; read a missing key.
    #[test]
    fn get_values() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["GET", "k"]), Frame::Null);
        h.run_bytes(&[b"SET", b"k", b"\x00\r\n\xff"]);
        assert_eq!(h.run(&["GET", "k"]), Frame::bulk(&b"\x00\r\n\xff"[..]));
        assert_eq!(h.run(&["GET", ""]), Frame::Null);
    }

    // Goal: GET's encoder writes the bytes `get`'s reply encodes to, in RESP2 and RESP3: a
    // value (binary, empty), a missing key, a collection (WRONGTYPE), a key with a deadline
    // before and after it passed, and inside MULTI (QUEUED, then EXEC's array).
    // Method: each case through `run_into` against `run`'s reply encoded, the clock frozen.
    #[test]
    fn get_into_matches_get() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        h.run_bytes(&[b"SET", b"bin", b"\x00\r\n\xff"]);
        h.run(&["SET", "empty", ""]);
        h.run(&["RPUSH", "list", "a"]);
        h.run(&["SET", "timed", "v", "PX", "1000"]);
        let check = |h: &mut Harness, argv: &[&str]| {
            for protocol in [crate::frame::Protocol::Resp2, crate::frame::Protocol::Resp3] {
                h.client.protocol = protocol;
                let mut expected = Vec::new();
                h.run(argv).encode_to(protocol, &mut expected);
                assert_eq!(h.run_into(argv), expected, "{argv:?} {protocol:?}");
            }
        };
        for key in ["bin", "empty", "nope", "list", "timed"] {
            check(&mut h, &["GET", key]);
        }
        assert_eq!(h.run_into(&["GET", "timed"]), b"$1\r\nv\r\n");
        h.shared.expires.advance_clock_ms(2000);
        check(&mut h, &["GET", "timed"]);
        h.client.protocol = crate::frame::Protocol::Resp2;
        assert_eq!(h.run_into(&["MULTI"]), b"+OK\r\n");
        assert_eq!(h.run_into(&["GET", "empty"]), b"+QUEUED\r\n");
        assert_eq!(h.run_into(&["EXEC"]), b"*1\r\n$0\r\n\r\n");
    }
}
