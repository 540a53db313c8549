//! Commands that change two or more collections as one atomic unit (LMOVE, RPOPLPUSH, LMPOP,
//! ZMPOP, SMOVE, and the STORE forms, which replace their destination).
//!
//! [`write_many`] is [`super::write`] for several keys: it takes the stripe locks of all of
//! them at once, in stripe order ([`crate::collection::Collections::lock_many`], as RENAME
//! and EXEC do: two such callers take common stripes in the same order, and every other
//! caller holds one stripe and waits for none meanwhile, so no cycle of waits can form),
//! deletes the due ones, and opens one unit. The handler opens the collections it changes
//! through [`Many`] (each once, whatever the number of times it names it), decides its
//! writes, and [`write_many`] then writes every opened collection's metadata back
//! (removing the emptied ones, keeping the counts exact) and the unit as one batch, under
//! the locks. So a crash keeps the whole command or none of it: no member leaves one
//! collection without reaching the other, and no count disagrees with its members. Inside
//! EXEC or a script the unit is theirs (their locks cover the keys: LMOVE and SMOVE name
//! theirs by key position; the `numkeys` commands are `movablekeys`, for which EXEC takes
//! every stripe), and is written when they end.

use super::super::expire;
use super::{
    clear_members, delete_in_unit, open_read, open_write_in_unit, settle, wrongtype, Ctx, Frame,
    Kind, Meta, Open, Reply,
};
use crate::server::Shared;

/// A collection opened in a [`Many`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(usize);

/// The collections a [`write_many`] handler opened.
pub struct Many {
    /// Each key with its collection (`Open::opened` keeps the metadata it had when opened).
    opened: Vec<(Vec<u8>, Open)>,
}

/// Runs a change of several collections as one atomic unit: under the stripe locks of all
/// `keys` (which must name every key `change` reads or writes), after deleting the due
/// ones, `change` opens collections through [`Many`] and decides its writes; then every
/// opened collection's metadata is written back and the unit written as one batch. A
/// handler checks every key's type before it changes anything (Redis changes nothing on
/// WRONGTYPE); if it fails later, what it decided is still written, whole, with the
/// metadata as it left it, and its error is the reply (as [`super::write`]). The caller
/// must hold no stripe lock outside EXEC or a script.
pub fn write_many<'a, 's>(
    ctx: &mut Ctx<'a, 's>,
    keys: &[&[u8]],
    change: impl FnOnce(&mut Ctx<'a, 's>, &mut Many) -> Reply,
) -> Reply {
    let shared: &'a Shared = ctx.shared;
    let _guards = shared.collections.lock_many(keys.iter().copied());
    for key in keys {
        expire::purge_due(ctx, key)?;
    }
    ctx.begin_unit();
    let mut many = Many { opened: Vec::new() };
    let reply = change(ctx, &mut many);
    let mut settled = Ok(());
    for (user, open) in many.opened {
        // `settle` keeps an unchanged entry only when the unit changed nothing, and then
        // waits for the entry's last write (a no-op answers after what it read is durable).
        let result = settle(ctx, &user, open);
        settled = settled.and(result);
    }
    // Written here, under the locks, whatever happened above.
    let written = ctx.end_unit();
    // What the handler read of every key, an absent source too, is durable before the
    // reply (review rev-lists13 F1: SMOVE's 0 after an SREM that emptied the source).
    for key in keys {
        ctx.observe(&crate::collection::type_key(key));
    }
    settled.and(written)?;
    reply
}

/// `-ERR keys beginning with byte 0xff are reserved by forest` if any of `keys` is one: for
/// the `numkeys` commands, whose key positions the command table cannot name.
pub fn check_keys(keys: &[&[u8]]) -> Result<(), Frame> {
    if keys
        .iter()
        .any(|k| k.first() == Some(&crate::collection::RESERVED_BYTE))
    {
        return Err(super::reserved_key());
    }
    Ok(())
}

impl Many {
    fn find(&self, user: &[u8]) -> Option<usize> {
        self.opened.iter().position(|(u, _)| u == user)
    }

    /// `user` opened for a write of a `kind` command, created (in memory only) if absent;
    /// WRONGTYPE if it holds a string or another type. A key opened before gives its slot
    /// again (LMOVE of a list onto itself).
    pub fn open(&mut self, ctx: &mut Ctx<'_, '_>, user: &[u8], kind: Kind) -> Result<Slot, Frame> {
        if let Some(i) = self.find(user) {
            return if self.opened[i].1.meta.kind == kind {
                Ok(Slot(i))
            } else {
                Err(wrongtype())
            };
        }
        let open = open_write_in_unit(ctx, user, kind)?;
        self.opened.push((user.to_vec(), open));
        Ok(Slot(self.opened.len() - 1))
    }

    /// `user` opened if it is a `kind` collection; None, and nothing opened, if it is
    /// absent; WRONGTYPE if it holds a string or another type.
    pub fn existing(
        &mut self,
        ctx: &mut Ctx<'_, '_>,
        user: &[u8],
        kind: Kind,
    ) -> Result<Option<Slot>, Frame> {
        if self.find(user).is_none() && open_read(ctx, user, kind)?.is_none() {
            return Ok(None);
        }
        self.open(ctx, user, kind).map(Some)
    }

    /// `user` made an empty `kind` collection whatever it held (a string, a collection of any
    /// type), without a deadline: a STORE command's destination, which stays deleted if the
    /// handler adds nothing (Redis deletes the destination of an empty result).
    pub fn replace(
        &mut self,
        ctx: &mut Ctx<'_, '_>,
        user: &[u8],
        kind: Kind,
    ) -> Result<Slot, Frame> {
        if let Some(i) = self.find(user) {
            clear_members(ctx, user)?;
            self.opened[i].1.meta = Meta::new(kind);
            expire::stage_deadline(ctx, user, None)?;
            return Ok(Slot(i));
        }
        if ctx.present(user) {
            ctx.remove(user)?;
        } else if ctx.shared.collections.any() {
            delete_in_unit(ctx, user)?;
        }
        expire::stage_deadline(ctx, user, None)?;
        self.open(ctx, user, kind)
    }

    /// The metadata of an opened collection, to change as members are added or removed.
    pub fn meta(&mut self, slot: Slot) -> &mut Meta {
        &mut self.opened[slot.0].1.meta
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{run_alone, run_in, sim_shared};
    use crate::frame::Frame;
    use forest_store::file::{CrashMode, SimDir};
    use forest_store::Durability;

    // Goal: a multi-key command that changed nothing answers only once what it read is
    // durable, as a one-key no-op does ("a conditional no-op waits for what it saw"; review
    // rev-coll F1's rule). `write_many` skipped every collection whose metadata was
    // unchanged, without waiting for the last write under its type entry.
    // Method: client A's pipeline removes m from src and is not yet waited for; client B's
    // SMOVE src dst m (LMOVE of an emptied list, for lists) answers "nothing moved"; a power
    // loss right after: the state B's answer described must be the durable one.
    #[test]
    fn a_multi_key_no_op_waits_for_what_it_read() {
        for durability in [Durability::Sync, Durability::Group] {
            let dir = SimDir::new(3);
            let shared = sim_shared(&dir, durability);
            assert_eq!(
                run_alone(&shared, &["SADD", "src", "m", "x"]),
                Frame::Integer(2)
            );
            let mut batch_a = shared.store.batch();
            assert_eq!(
                run_in(&shared, &mut batch_a, &["SREM", "src", "m"]),
                Frame::Integer(1)
            );
            assert_eq!(
                run_alone(&shared, &["SMOVE", "src", "dst", "m"]),
                Frame::Integer(0)
            );
            dir.crash_with(CrashMode::DropUnsynced);
            std::mem::forget(batch_a);
            std::mem::forget(shared);
            let after = sim_shared(&dir, durability);
            assert_eq!(
                run_alone(&after, &["SISMEMBER", "src", "m"]),
                Frame::Integer(0),
                "{durability:?}: SMOVE answered 0 (m not in src), yet SREM src m was not durable"
            );
        }
    }

    // Goal: the control for the test below: DEL of a string key deleted by an unacknowledged
    // DEL answers 0 only once that DEL is durable (the store's conditional no-op waits for
    // its stripe), so the harness tells a waiting no-op from one that does not wait.
    #[test]
    fn rev_lists_del_of_a_deleted_string_waits() {
        for durability in [Durability::Sync, Durability::Group] {
            let dir = SimDir::new(3);
            let shared = sim_shared(&dir, durability);
            run_alone(&shared, &["SET", "k", "v"]);
            let mut batch_a = shared.store.batch();
            run_in(&shared, &mut batch_a, &["DEL", "k"]);
            assert_eq!(run_alone(&shared, &["DEL", "k"]), Frame::Integer(0));
            dir.crash_with(CrashMode::DropUnsynced);
            std::mem::forget(batch_a);
            std::mem::forget(shared);
            let after = sim_shared(&dir, durability);
            assert_eq!(
                run_alone(&after, &["EXISTS", "k"]),
                Frame::Integer(0),
                "{durability:?}"
            );
        }
    }

    // Goal (review rev-lists13 F1): as above, with the SREM removing the source's last member,
    // so SMOVE finds no source at all (`Many::existing` gives None: nothing opened, nothing
    // settled, nothing observed); LMOVE after an LPOP emptied its source; SINTERSTORE of an
    // emptied source into an absent destination (its sources are read, never opened); and
    // the one-key form (SREM of an emptied set, `write_existing`'s absent reply); DEL of the
    // emptied set (its user key's stripe is not its type entry's).
    // Method: as above; the source had one member; every case is run, failures listed.
    #[test]
    fn a_no_op_on_an_emptied_source_waits_for_what_it_read() {
        type Case<'a> = (
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
            Frame,
            &'a [&'a str],
            Frame,
        );
        let cases: [Case<'_>; 5] = [
            (
                &["SADD", "src", "m"],
                &["SREM", "src", "m"],
                &["SMOVE", "src", "dst", "m"],
                Frame::Integer(0),
                &["SISMEMBER", "src", "m"],
                Frame::Integer(0),
            ),
            (
                &["RPUSH", "src", "e"],
                &["LPOP", "src"],
                &["LMOVE", "src", "dst", "LEFT", "RIGHT"],
                Frame::Null,
                &["LLEN", "src"],
                Frame::Integer(0),
            ),
            (
                &["SADD", "src", "m"],
                &["SREM", "src", "m"],
                &["SINTERSTORE", "dst", "src"],
                Frame::Integer(0),
                &["SCARD", "src"],
                Frame::Integer(0),
            ),
            (
                &["SADD", "src", "m"],
                &["SREM", "src", "m"],
                &["SREM", "src", "m"],
                Frame::Integer(0),
                &["SISMEMBER", "src", "m"],
                Frame::Integer(0),
            ),
            (
                &["SADD", "src", "m"],
                &["SREM", "src", "m"],
                &["DEL", "src"],
                Frame::Integer(0),
                &["SCARD", "src"],
                Frame::Integer(0),
            ),
        ];
        let mut failures = Vec::new();
        for durability in [Durability::Sync, Durability::Group] {
            for (setup, by_a, by_b, b_says, check, durable) in &cases {
                let dir = SimDir::new(3);
                let shared = sim_shared(&dir, durability);
                run_alone(&shared, setup);
                let mut batch_a = shared.store.batch();
                run_in(&shared, &mut batch_a, by_a);
                assert_eq!(&run_alone(&shared, by_b), b_says, "{by_b:?}");
                dir.crash_with(CrashMode::DropUnsynced);
                std::mem::forget(batch_a);
                std::mem::forget(shared);
                let after = sim_shared(&dir, durability);
                let seen = run_alone(&after, check);
                if &seen != durable {
                    failures.push(format!(
                        "{durability:?}: {by_b:?} answered {b_says:?}, yet {by_a:?} was not \
                         durable ({check:?} gives {seen:?})"
                    ));
                }
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
