//! SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]: stop the server (see [`crate::server`]). Like Redis,
//! no reply: the connection closes. SAVE writes a checkpoint before the store closes;
//! without it the store still makes its log durable.

use super::{is_word, syntax_error, After, Ctx, Reply};
use crate::frame::Frame;

pub fn shutdown(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let mut save = false;
    for arg in &argv[1..] {
        if is_word(arg, "save") {
            save = true;
        } else if is_word(arg, "nosave") || is_word(arg, "now") || is_word(arg, "force") {
        } else {
            return Err(syntax_error());
        }
    }
    ctx.after = After::Shutdown { save };
    Ok(Frame::Null)
}
