//! SAVE, BGSAVE, LASTSAVE: a store checkpoint (masstree.md §5), in the foreground or on a
//! thread of its own. The log makes every write durable anyway; a checkpoint shortens the
//! next recovery and lets old logs go.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{is_word, store_error, syntax_error, Ctx, Reply};
use crate::frame::Frame;
use crate::server::unix_secs;

pub fn save(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    ctx.shared.store.checkpoint().map_err(|e| store_error(&e))?;
    ctx.shared
        .stats
        .last_save_unix
        .store(unix_secs(), Ordering::Relaxed);
    Ok(Frame::ok())
}

/// BGSAVE [SCHEDULE]: starts a checkpoint on a thread and replies at once.
pub fn bgsave(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if argv.len() > 2 || argv.get(1).is_some_and(|a| !is_word(a, "schedule")) {
        return Err(syntax_error());
    }
    let stats = &ctx.shared.stats;
    if stats.bgsave_in_progress.swap(true, Ordering::AcqRel) {
        return Err(Frame::err("Background save already in progress"));
    }
    let store = Arc::clone(&ctx.shared.store);
    let shared_stats = Arc::clone(&ctx.shared.stats);
    let spawned = std::thread::Builder::new()
        .name("forest-bgsave".into())
        .spawn(move || {
            let ok = store.checkpoint().is_ok();
            shared_stats.finish_bgsave(ok);
        });
    match spawned {
        Ok(_) => Ok(Frame::Simple("Background saving started".into())),
        Err(e) => {
            stats.bgsave_in_progress.store(false, Ordering::Release);
            Err(Frame::err(format!("cannot start a background save: {e}")))
        }
    }
}

pub fn lastsave(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    Ok(Frame::Integer(
        ctx.shared.stats.last_save_unix.load(Ordering::Relaxed) as i64,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: SAVE and BGSAVE write checkpoints and LASTSAVE moves no backwards.
    // Method: SAVE, then BGSAVE and wait for it through INFO persistence.
    #[test]
    fn saves() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "v"]);
        let Frame::Integer(before) = h.run(&["LASTSAVE"]) else {
            panic!("integer expected");
        };
        assert_eq!(h.run(&["SAVE"]), Frame::ok());
        assert_eq!(
            h.run(&["BGSAVE"]),
            Frame::Simple("Background saving started".into())
        );
        let started = std::time::Instant::now();
        while h
            .shared
            .stats
            .bgsave_in_progress
            .load(std::sync::atomic::Ordering::Acquire)
        {
            assert!(started.elapsed().as_secs() < 30, "bgsave never finished");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let Frame::Integer(after) = h.run(&["LASTSAVE"]) else {
            panic!("integer expected");
        };
        assert!(after >= before);
        assert!(h.shared.store.stats().checkpoint_count >= 2);
    }
}
