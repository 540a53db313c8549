//! SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]: stop the server (see [`crate::server`]). Like Redis,
//! no reply: the connection closes. SAVE writes a checkpoint before the store closes;
//! without it the store still makes its log durable.
//!
//! While a script runs, SHUTDOWN and SHUTDOWN SAVE answer Redis's BUSY error (redis
//! src/server.c `shutdownCommand`, when a script is past its time limit: forest has stopped
//! it by then, so any script counts, from the moment it takes the stripes); SHUTDOWN NOSAVE stops the script (its writes
//! dropped, as Redis exits under it) and the server.

use super::{is_word, syntax_error, After, Ctx, Reply};
use crate::frame::Frame;

/// Redis's reply to SHUTDOWN without NOSAVE while a script runs.
pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

pub fn shutdown(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (mut save, mut nosave) = (false, false);
    for arg in &argv[1..] {
        if is_word(arg, "save") {
            save = true;
        } else if is_word(arg, "nosave") {
            nosave = true;
        } else if is_word(arg, "now") || is_word(arg, "force") {
        } else {
            return Err(syntax_error());
        }
    }
    let scripts = &ctx.shared.scripts;
    if scripts.busy() {
        if !nosave {
            return Err(Frame::Error(BUSY.into()));
        }
        scripts.stop();
    }
    ctx.after = After::Shutdown { save };
    Ok(Frame::Null)
}
