//! DEL and UNLINK key [key ...]: the number of keys removed, strings or collections
//! (UNLINK is DEL: a collection's members are removed at once, through the batch).

use super::{Ctx, Reply};
use crate::frame::Frame;

pub fn del(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let mut removed = 0;
    for key in &argv[1..] {
        // Under the key's stripe (EXEC and WATCH rely on every write holding it), with its
        // deadline; an expired key counts as absent.
        if super::expire::delete_key(ctx, key)? {
            removed += 1;
        }
    }
    Ok(Frame::Integer(removed))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: DEL/UNLINK count removed keys once each, EXISTS counts repeats as Redis.
    // Method: set two keys, delete with a repeat and a missing key.
    #[test]
    fn del_and_exists() {
        let mut h = Harness::new();
        h.run(&["MSET", "a", "1", "b", "2", "c", "3"]);
        assert_eq!(h.run(&["EXISTS", "a", "a", "b", "x"]), Frame::Integer(3));
        assert_eq!(h.run(&["DEL", "a", "a", "x"]), Frame::Integer(1));
        assert_eq!(h.run(&["UNLINK", "b", "c"]), Frame::Integer(2));
        assert_eq!(h.run(&["EXISTS", "a", "b", "c"]), Frame::Integer(0));
    }
}
