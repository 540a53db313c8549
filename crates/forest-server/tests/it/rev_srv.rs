//! Review rev-srv (session 17) of branch h-srv: findings proved against redis-server 7.0.15.

use crate::common;

use common::{Running, IO_MODELS, R};

// Goal (rev-srv F1): a SET with EXAT/PXAT in the past of a key that does not exist counts as
// a write of that key for WATCH, as in Redis 7 (it sets the key, which then expires): the
// watcher's EXEC is null. docs/PROTOCOL.md "Expiry" says "no command can tell the
// difference" from Redis's set-then-expire; WATCH can. redis-server 7.0.15 answers nil.
// Method: client A watches a missing key; client B runs `SET k v EXAT 1` (and the same in an
// EVAL); A's EXEC must be null.
#[test]
fn set_past_deadline_of_missing_key_dirties_watch() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut a = server.client();
        let mut b = server.client();
        for writer in [
            &["SET", "k", "v", "EXAT", "1"][..],
            &[
                "EVAL",
                "return redis.call('SET', KEYS[1], 'v', 'PXAT', '1')",
                "1",
                "k",
            ][..],
        ] {
            assert_eq!(a.cmd(&["WATCH", "k"]), R::Simple("OK".into()));
            b.cmd(writer);
            assert_eq!(a.cmd(&["MULTI"]), R::Simple("OK".into()));
            a.cmd(&["PING"]);
            assert_eq!(a.cmd(&["EXEC"]), R::Nil, "{io}: after {writer:?}");
        }
    }
}
