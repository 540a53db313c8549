//! LMOVE, RPOPLPUSH and LMPOP (docs/PROTOCOL.md "Lists"): commands over several lists, each
//! one atomic unit under the stripe locks of all its keys ([`coll::write_many`]), so an
//! element is in its source or its destination, never both or neither, for every reader and
//! after a crash. Their cores ([`move_element`], [`pop_first`]) take parsed arguments, for
//! the blocking forms to call.

use super::coll;
use super::list::{next_seq, pop_elements, push_element};
use super::{syntax_error, Ctx, Reply};
use crate::collection::{member_key, member_prefix, Kind};
use crate::frame::Frame;
use crate::parse::{is_word, parse_int};

/// An end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Left,
    Right,
}

impl End {
    /// `LEFT` or `RIGHT` in any case, else `-ERR syntax error`.
    pub fn parse(arg: &[u8]) -> Result<End, Frame> {
        if is_word(arg, "left") {
            Ok(End::Left)
        } else if is_word(arg, "right") {
            Ok(End::Right)
        } else {
            Err(syntax_error())
        }
    }
}

/// LMOVE's core: moves the element at `from` of list `src` to `to` of list `dst` (the same
/// list: a rotation); the element, or None if `src` is missing (nothing changed, whatever
/// `dst` holds, as Redis). WRONGTYPE, nothing changed, if `src` or (with `src` present) `dst`
/// holds another type. Takes the stripe locks of both keys.
pub fn move_element(
    ctx: &mut Ctx<'_, '_>,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<Option<Vec<u8>>, Frame> {
    let (src_prefix, dst_prefix) = (member_prefix(src), member_prefix(dst));
    // The element fits under `src`; it must fit under `dst` too before anything moves.
    coll::check_member(&member_key(&dst_prefix, &[&[0; 8]]), b"")?;
    let reply = coll::write_many(ctx, &[src, dst], |ctx, many| {
        let Some(source) = many.existing(ctx, src, Kind::List)? else {
            return Ok(Frame::Null);
        };
        let target = many.open(ctx, dst, Kind::List)?;
        next_seq(many.meta(target), to == End::Left)?;
        let popped = pop_elements(ctx, &src_prefix, many.meta(source), from == End::Left, 1)?;
        let Some(element) = popped.into_iter().next() else {
            return Ok(Frame::Null);
        };
        push_element(
            ctx,
            &dst_prefix,
            many.meta(target),
            to == End::Left,
            &element,
        )?;
        Ok(Frame::Bulk(element))
    })?;
    Ok(match reply {
        Frame::Bulk(element) => Some(element),
        _ => None,
    })
}

/// LMOVE source destination LEFT|RIGHT LEFT|RIGHT: the element moved, or null.
pub fn lmove(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (from, to) = (End::parse(argv[3])?, End::parse(argv[4])?);
    let moved = move_element(ctx, argv[1], argv[2], from, to)?;
    Ok(moved.map_or(Frame::Null, Frame::Bulk))
}

/// RPOPLPUSH source destination: LMOVE source destination RIGHT LEFT.
pub fn rpoplpush(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let moved = move_element(ctx, argv[1], argv[2], End::Right, End::Left)?;
    Ok(moved.map_or(Frame::Null, Frame::Bulk))
}

/// The arguments of LMPOP and ZMPOP (and their blocking forms) from `numkeys` on.
pub struct MpopArgs<'a> {
    pub keys: &'a [&'a [u8]],
    /// Which of the two end words was given: false for the first (LEFT, MIN).
    pub second: bool,
    pub count: u64,
}

/// Parses `numkeys key [key ...] END [COUNT count]` (`args[0]` is numkeys; `ends` the two
/// words END may be) as Redis's lmpop/zmpop: `-ERR numkeys should be greater than 0` (also
/// for a non-number), `-ERR syntax error` for too few arguments, another word or a repeated
/// COUNT, `-ERR count should be greater than 0`; keys beginning with byte 0xff refused.
pub fn mpop_args<'a>(args: &'a [&'a [u8]], ends: [&str; 2]) -> Result<MpopArgs<'a>, Frame> {
    let numkeys = match parse_int(args[0]) {
        Some(n) if n > 0 => n as u64,
        _ => return Err(Frame::err("numkeys should be greater than 0")),
    };
    let end_at = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(1))
        .filter(|&i| i < args.len())
        .ok_or_else(syntax_error)?;
    let second = match args[end_at] {
        w if is_word(w, ends[0]) => false,
        w if is_word(w, ends[1]) => true,
        _ => return Err(syntax_error()),
    };
    let mut count = None;
    let mut i = end_at + 1;
    while i < args.len() {
        match args.get(i + 1) {
            Some(value) if count.is_none() && is_word(args[i], "count") => {
                count = match parse_int(value) {
                    Some(n) if n > 0 => Some(n as u64),
                    _ => return Err(Frame::err("count should be greater than 0")),
                };
                i += 2;
            }
            _ => return Err(syntax_error()),
        }
    }
    let keys = &args[1..end_at];
    coll::check_keys(keys)?;
    Ok(MpopArgs {
        keys,
        second,
        count: count.unwrap_or(1),
    })
}

/// LMPOP's core: pops up to `count` elements from `from` of the first of `keys` that holds
/// a list: `[key, [element ...]]`, or None if none does. WRONGTYPE for a key of another type
/// before it. Takes the stripe locks of every key.
pub fn pop_first(
    ctx: &mut Ctx<'_, '_>,
    keys: &[&[u8]],
    from: End,
    count: u64,
) -> Result<Option<Frame>, Frame> {
    let reply = coll::write_many(ctx, keys, |ctx, many| {
        for key in keys {
            let Some(slot) = many.existing(ctx, key, Kind::List)? else {
                continue;
            };
            let prefix = member_prefix(key);
            let popped = pop_elements(ctx, &prefix, many.meta(slot), from == End::Left, count)?;
            return Ok(Frame::Array(vec![
                Frame::bulk(*key),
                Frame::Array(popped.into_iter().map(Frame::Bulk).collect()),
            ]));
        }
        Ok(Frame::Null)
    })?;
    Ok(match reply {
        Frame::Null => None,
        popped => Some(popped),
    })
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]: `[key, [element ...]]` from the
/// first non-empty list, or a null array.
pub fn lmpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let args = mpop_args(&argv[1..], ["left", "right"])?;
    let from = if args.second { End::Right } else { End::Left };
    let popped = pop_first(ctx, args.keys, from, args.count)?;
    Ok(popped.unwrap_or_else(|| coll::null_array(ctx)))
}
