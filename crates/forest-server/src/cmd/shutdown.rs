//! SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] and SHUTDOWN ABORT: stop the server (see
//! [`crate::server`]). Like Redis, no reply: the connection closes. SAVE writes a
//! checkpoint before the store closes; without it the store still makes its log durable.
//!
//! Flags as Redis 7's `shutdownCommand` (redis src/server.c): SAVE with NOSAVE, or ABORT
//! with any flag, is a syntax error; ABORT alone answers that no shutdown is in progress
//! (forest's stop cannot be aborted once requested, and none is pending while commands run).
//!
//! While a script runs, SHUTDOWN and SHUTDOWN SAVE wait for it like any other command and
//! stop the server once it has ended (Redis serves no client during a script and answers
//! BUSY only past the time limit, where forest has stopped the script: review rev-pcore
//! F1); SHUTDOWN NOSAVE does not wait: it kills the script (its writes dropped, as Redis
//! exits under it) and stops the server.

use super::{is_word, syntax_error, After, Ctx, Reply};
use crate::frame::Frame;

pub fn shutdown(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (mut save, mut nosave, mut other, mut abort) = (false, false, false, false);
    for arg in &argv[1..] {
        if is_word(arg, "save") {
            save = true;
        } else if is_word(arg, "nosave") {
            nosave = true;
        } else if is_word(arg, "now") || is_word(arg, "force") {
            other = true;
        } else if is_word(arg, "abort") {
            abort = true;
        } else {
            return Err(syntax_error());
        }
    }
    if (save && nosave) || (abort && (save || nosave || other)) {
        return Err(syntax_error());
    }
    if abort {
        return Err(Frame::err("No shutdown in progress."));
    }
    let scripts = &ctx.shared.scripts;
    if nosave {
        if scripts.busy() {
            scripts.stop_now();
        }
    } else {
        // A script runs under every stripe lock: taking one waits for its end (re-entrant,
        // and SHUTDOWN is refused inside MULTI and scripts, so nothing of ours is held).
        drop(ctx.shared.collections.lock(b""));
    }
    ctx.after = After::Shutdown { save };
    Ok(Frame::Null)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: SHUTDOWN's illegal flag combinations and ABORT answer as Redis 7 and stop
    // nothing (review rev-pcore F3). Method: each form on a harness; a later SET still runs.
    #[test]
    fn shutdown_flag_combinations_and_abort_answer_as_redis() {
        let mut h = Harness::new();
        let syntax = Frame::err("syntax error");
        for argv in [
            &["SHUTDOWN", "SAVE", "NOSAVE"][..],
            &["SHUTDOWN", "nosave", "save", "now"],
            &["SHUTDOWN", "ABORT", "NOW"],
            &["SHUTDOWN", "FORCE", "ABORT"],
            &["SHUTDOWN", "LATER"],
        ] {
            assert_eq!(h.run(argv), syntax, "{argv:?}");
        }
        assert_eq!(
            h.run(&["SHUTDOWN", "abort"]),
            Frame::err("No shutdown in progress.")
        );
        assert_eq!(h.run(&["SET", "k", "v"]), Frame::ok());
    }
}
