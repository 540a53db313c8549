//! SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB (docs/PROTOCOL.md
//! "Pub/Sub"; the delivery and its bound are [`crate::pubsub`]).

use super::{is_word, unknown_subcommand, wrong_arity, Ctx, Reply};
use crate::frame::Frame;

pub fn subscribe(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let protocol = ctx.client.protocol;
    Ok(ctx.client.pubsub.subscribe(false, &argv[1..], protocol))
}

pub fn psubscribe(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let protocol = ctx.client.protocol;
    Ok(ctx.client.pubsub.subscribe(true, &argv[1..], protocol))
}

pub fn unsubscribe(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    Ok(ctx.client.pubsub.unsubscribe(false, &argv[1..]))
}

pub fn punsubscribe(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    Ok(ctx.client.pubsub.unsubscribe(true, &argv[1..]))
}

/// PUBLISH channel message: the number of clients that received it (inside EXEC: that
/// will, once the transaction is written).
pub fn publish(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let hub = &ctx.shared.pubsub;
    if super::multi::defer_publish(ctx, argv[1], argv[2]) {
        return Ok(Frame::Integer(hub.receivers(argv[1]) as i64));
    }
    Ok(Frame::Integer(hub.publish(argv[1], argv[2]) as i64))
}

/// PUBSUB CHANNELS [pattern] | NUMSUB [channel ...] | NUMPAT | SHARDCHANNELS [pattern] |
/// SHARDNUMSUB [channel ...] (no shard channels in forest: empty answers).
pub fn pubsub(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let hub = &ctx.shared.pubsub;
    let sub = argv[1];
    let rest = &argv[2..];
    if is_word(sub, "channels") || is_word(sub, "shardchannels") {
        if rest.len() > 1 {
            return Err(wrong_arity(&format!(
                "pubsub|{}",
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            )));
        }
        if is_word(sub, "shardchannels") {
            return Ok(Frame::Array(vec![]));
        }
        let channels = hub.channels(rest.first().copied());
        Ok(Frame::Array(
            channels.into_iter().map(Frame::Bulk).collect(),
        ))
    } else if is_word(sub, "numsub") || is_word(sub, "shardnumsub") {
        let shard = is_word(sub, "shardnumsub");
        Ok(Frame::Map(
            rest.iter()
                .map(|c| {
                    let n = if shard { 0 } else { hub.numsub(c) };
                    (Frame::bulk(*c), Frame::Integer(n as i64))
                })
                .collect(),
        ))
    } else if is_word(sub, "numpat") {
        if !rest.is_empty() {
            return Err(wrong_arity("pubsub|numpat"));
        }
        Ok(Frame::Integer(hub.numpat() as i64))
    } else {
        Err(unknown_subcommand("pubsub", sub))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    fn push(items: &[Frame]) -> Frame {
        Frame::Push(items.to_vec())
    }

    // Goal: confirmations count channels and patterns; UNSUBSCRIBE without names leaves
    // all, and with none answers one null confirmation; PUBSUB's introspection; RESP2's
    // subscribed mode refuses other commands with Redis's text and answers PING as an
    // array. Method: one client through the dispatch.
    #[test]
    fn subscriptions_and_introspection() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["SUBSCRIBE", "a", "b"]),
            Frame::Sequence(vec![
                push(&[bulk("subscribe"), bulk("a"), Frame::Integer(1)]),
                push(&[bulk("subscribe"), bulk("b"), Frame::Integer(2)]),
            ])
        );
        assert_eq!(
            h.run(&["PSUBSCRIBE", "n*"]),
            Frame::Sequence(vec![push(&[
                bulk("psubscribe"),
                bulk("n*"),
                Frame::Integer(3)
            ])])
        );
        assert_eq!(
            h.run(&["GET", "k"]),
            Frame::Error(
                "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / \
                 QUIT / RESET are allowed in this context"
                    .into()
            )
        );
        assert_eq!(h.run(&["PING"]), bulks(&["pong", ""]));
        assert_eq!(h.run(&["PING", "x"]), bulks(&["pong", "x"]));
        let mut other = h.shared.new_client("b".into(), "c".into(), None);
        let mut run = |argv: &[&str]| {
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            run_on(&h.shared, &mut other, &argv)
        };
        assert_eq!(run(&["PUBSUB", "CHANNELS"]), bulks(&["a", "b"]));
        assert_eq!(run(&["PUBSUB", "CHANNELS", "b*"]), bulks(&["b"]));
        assert_eq!(
            run(&["PUBSUB", "NUMSUB", "a", "zz"]),
            Frame::Map(vec![
                (bulk("a"), Frame::Integer(1)),
                (bulk("zz"), Frame::Integer(0))
            ])
        );
        assert_eq!(run(&["PUBSUB", "NUMPAT"]), Frame::Integer(1));
        assert_eq!(run(&["PUBSUB", "SHARDCHANNELS"]), bulks(&[]));
        assert_eq!(run(&["PUBLISH", "a", "m"]), Frame::Integer(1));
        assert_eq!(run(&["PUBLISH", "nx", "m"]), Frame::Integer(1));
        assert_eq!(run(&["PUBLISH", "q", "m"]), Frame::Integer(0));
        assert!(matches!(run(&["PUBSUB", "NOPE"]), Frame::Error(e) if e.contains("PUBSUB HELP")));
        assert_eq!(
            h.run(&["UNSUBSCRIBE"]),
            Frame::Sequence(vec![
                push(&[bulk("unsubscribe"), bulk("a"), Frame::Integer(2)]),
                push(&[bulk("unsubscribe"), bulk("b"), Frame::Integer(1)]),
            ])
        );
        assert_eq!(
            h.run(&["PUNSUBSCRIBE", "n*", "other"]),
            Frame::Sequence(vec![
                push(&[bulk("punsubscribe"), bulk("n*"), Frame::Integer(0)]),
                push(&[bulk("punsubscribe"), bulk("other"), Frame::Integer(0)]),
            ])
        );
        assert_eq!(
            h.run(&["UNSUBSCRIBE"]),
            Frame::Sequence(vec![push(&[
                bulk("unsubscribe"),
                Frame::Null,
                Frame::Integer(0)
            ])])
        );
        assert_eq!(h.run(&["GET", "k"]), Frame::Null);
        assert_eq!(h.run(&["PING"]), Frame::Simple("PONG".into()));
    }

    // Goal: RESP3 has no subscribed mode: any command runs. RESET leaves it all.
    #[test]
    fn resp3_subscribers_run_commands_and_reset() {
        let mut h = Harness::new();
        assert!(matches!(h.run(&["HELLO", "3"]), Frame::Map(_)));
        h.run(&["SUBSCRIBE", "a"]);
        assert_eq!(h.run(&["GET", "k"]), Frame::Null);
        assert_eq!(h.run(&["RESET"]), Frame::Simple("RESET".into()));
        assert_eq!(h.shared.pubsub.numsub(b"a"), 0);
        assert_eq!(h.client.protocol, crate::frame::Protocol::Resp2);
    }

    // Goal: PUBLISH inside EXEC answers its receivers and delivers once the transaction is
    // written. Method: a subscriber's mailbox, a transaction from another client.
    #[test]
    fn publish_inside_exec_delivers_after_the_writes() {
        let mut h = Harness::new();
        h.run(&["SUBSCRIBE", "ch"]);
        let mailbox = std::sync::Arc::clone(h.client.pubsub.mailbox().expect("mailbox"));
        mailbox.end_batch(&mut Vec::new(), crate::frame::Protocol::Resp2);
        let mut other = h.shared.new_client("b".into(), "c".into(), None);
        let mut run = |argv: &[&str]| {
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            run_on(&h.shared, &mut other, &argv)
        };
        run(&["MULTI"]);
        run(&["SET", "k", "v"]);
        run(&["PUBLISH", "ch", "m"]);
        assert!(mailbox.take().is_empty(), "nothing before EXEC");
        assert_eq!(
            run(&["EXEC"]),
            Frame::Array(vec![Frame::ok(), Frame::Integer(1)])
        );
        let bytes = crate::pubsub::concat(mailbox.take());
        assert_eq!(bytes, b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n");
    }
}
