//! MULTI/EXEC/WATCH over real sockets in both I/O models: Redis's replies byte for byte, and
//! atomicity under concurrency: transactions moving values between keys while readers and
//! scanners check invariants that a half-applied transaction would break, and WATCH's
//! optimistic increments losing no update (issue 15 "Transactions"; docs/PROTOCOL.md).

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{Client, Running, IO_MODELS, R};

// Goal: MULTI/EXEC, EXECABORT and WATCH's null replies byte for byte, in RESP2 and RESP3.
// Method: pipelined raw commands; a second client writes the watched key.
#[test]
fn transaction_replies_byte_for_byte() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        c.send_raw(b"MULTI\r\nSET a 1\r\nINCR a\r\nGET a\r\nEXEC\r\n");
        let want = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n+OK\r\n:2\r\n$1\r\n2\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
        c.send_raw(b"MULTI\r\nSET b 1\r\nNOPE\r\nEXEC\r\nEXISTS b\r\n");
        let want = b"+OK\r\n+QUEUED\r\n-ERR unknown command 'NOPE', with args beginning with: \r\n\
            -EXECABORT Transaction discarded because of previous errors.\r\n:0\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
        let mut other = server.client();
        assert_eq!(c.cmd(&["WATCH", "a"]), R::Simple("OK".into()));
        assert_eq!(other.cmd(&["SET", "a", "9"]), R::Simple("OK".into()));
        c.send_raw(b"MULTI\r\nSET a 100\r\nEXEC\r\nGET a\r\n");
        let want = b"+OK\r\n+QUEUED\r\n*-1\r\n$1\r\n9\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
        assert!(matches!(c.cmd(&["HELLO", "3"]), R::Map(_)));
        c.cmd(&["WATCH", "a"]);
        other.cmd(&["DEL", "a"]);
        c.send_raw(b"MULTI\r\nPING\r\nEXEC\r\n");
        let want = b"+OK\r\n+QUEUED\r\n_\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
        c.send_raw(b"EXEC\r\nDISCARD\r\nMULTI\r\nMULTI\r\nWATCH x\r\nDISCARD\r\n");
        let want = b"-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n\
            -ERR MULTI calls can not be nested\r\n-ERR WATCH inside MULTI is not allowed\r\n+OK\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
    }
}

const ACCOUNTS: usize = 8;
const START_BALANCE: i64 = 1000;
const WRITERS: usize = 3;
const TRANSACTIONS: usize = 150;

/// One writer's transactions: move 7 units from one account to another, and move the
/// writer's token from one slot to the next, in one MULTI/EXEC (pipelined).
fn transfer(c: &mut Client, writer: usize, i: usize) {
    let from = (i * 3 + writer) % ACCOUNTS;
    let to = (from + 1 + i % (ACCOUNTS - 1)) % ACCOUNTS;
    let (from, to) = (format!("acct:{from}"), format!("acct:{to}"));
    let old = format!("tok:{writer}:{}", i % ACCOUNTS);
    let new = format!("tok:{writer}:{}", (i + 1) % ACCOUNTS);
    let mut bytes = common::encode(&[b"MULTI"]);
    bytes.extend(common::encode(&[b"DECRBY", from.as_bytes(), b"7"]));
    bytes.extend(common::encode(&[b"INCRBY", to.as_bytes(), b"7"]));
    bytes.extend(common::encode(&[b"DEL", old.as_bytes()]));
    bytes.extend(common::encode(&[b"SET", new.as_bytes(), b"here"]));
    bytes.extend(common::encode(&[b"EXEC"]));
    c.send_raw(&bytes);
    for _ in 0..5 {
        c.read();
    }
    let replies = c.read().items();
    assert_eq!(replies.len(), 4, "{replies:?}");
    assert_eq!(
        replies[2],
        R::Int(1),
        "the token was where this writer left it"
    );
}

fn sum(values: &[R]) -> i64 {
    values
        .iter()
        .map(|v| v.text().parse::<i64>().expect("balance"))
        .sum()
}

/// Every reader's checks: the balances sum to the start (MGET, FOREST.RANGE) and each
/// writer's token is in exactly one slot (KEYS, SCAN, FOREST.RANGE).
fn check_invariants(c: &mut Client) {
    let keys: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct:{i}")).collect();
    let mut argv = vec!["MGET"];
    argv.extend(keys.iter().map(String::as_str));
    let total = START_BALANCE * ACCOUNTS as i64;
    assert_eq!(sum(&c.cmd(&argv).items()), total, "MGET");
    let range = c.cmd(&["FOREST.RANGE", "[acct:", "(acct;"]).items();
    let values: Vec<R> = range.chunks(2).map(|p| p[1].clone()).collect();
    assert_eq!(values.len(), ACCOUNTS);
    assert_eq!(sum(&values), total, "FOREST.RANGE");
    let rev = c.cmd(&["FOREST.RANGE", "[acct:", "(acct;", "REV"]).items();
    let values: Vec<R> = rev.chunks(2).map(|p| p[1].clone()).collect();
    assert_eq!(sum(&values), total, "FOREST.RANGE REV");
    let tokens = c.cmd(&["KEYS", "tok:*"]).items();
    assert_eq!(tokens.len(), WRITERS, "KEYS {tokens:?}");
    let scan = c
        .cmd(&["SCAN", "0", "MATCH", "tok:*", "COUNT", "100000"])
        .items();
    assert_eq!(scan[1].clone().items().len(), WRITERS, "SCAN {scan:?}");
    let range = c
        .cmd(&["FOREST.RANGE", "[tok:", "(tok;", "KEYSONLY"])
        .items();
    assert_eq!(range.len(), WRITERS, "FOREST.RANGE tokens {range:?}");
    assert_eq!(c.cmd(&["DBSIZE"]), R::Int((ACCOUNTS + WRITERS) as i64));
}

// Goal: no client ever sees part of an EXEC: not MGET, FOREST.RANGE in either order, KEYS,
// SCAN or DBSIZE. Method: writers run transactions that keep two invariants (a sum over
// eight accounts, one token per writer) while readers check both in a loop; a fixed
// number of transactions, so the test ends by count, not by time.
#[test]
fn concurrent_transactions_are_atomic_to_readers_and_scans() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut setup = server.client();
        for i in 0..ACCOUNTS {
            setup.cmd(&["SET", &format!("acct:{i}"), &START_BALANCE.to_string()]);
        }
        for w in 0..WRITERS {
            setup.cmd(&["SET", &format!("tok:{w}:0"), "here"]);
        }
        let done = AtomicBool::new(false);
        let checks = std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let mut c = server.client();
                    let done = &done;
                    s.spawn(move || {
                        let mut checks = 0;
                        while !done.load(Ordering::SeqCst) || checks == 0 {
                            check_invariants(&mut c);
                            checks += 1;
                        }
                        checks
                    })
                })
                .collect();
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let mut c = server.client();
                    s.spawn(move || {
                        for i in 0..TRANSACTIONS {
                            transfer(&mut c, w, i);
                        }
                    })
                })
                .collect();
            for writer in writers {
                writer.join().expect("writer");
            }
            done.store(true, Ordering::SeqCst);
            readers
                .into_iter()
                .map(|r| r.join().expect("reader"))
                .sum::<usize>()
        });
        assert!(checks >= 2, "{io}: {checks}");
        check_invariants(&mut setup);
    }
}

// Goal: WATCH-based optimistic increments lose no update under contention (a null EXEC
// is retried). Method: four clients add 40 each to one counter with WATCH/GET/MULTI/SET.
#[test]
fn watch_increments_lose_no_update() {
    const CLIENTS: usize = 4;
    const EACH: usize = 40;
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        std::thread::scope(|s| {
            for _ in 0..CLIENTS {
                let mut c = server.client();
                s.spawn(move || {
                    for _ in 0..EACH {
                        loop {
                            c.cmd(&["WATCH", "counter"]);
                            let now = match c.cmd(&["GET", "counter"]) {
                                R::Nil => 0,
                                v => v.text().parse::<i64>().expect("counter"),
                            };
                            let next = (now + 1).to_string();
                            c.send_raw(&common::encode(&[b"MULTI"]));
                            c.send_raw(&common::encode(&[b"SET", b"counter", next.as_bytes()]));
                            c.send_raw(&common::encode(&[b"EXEC"]));
                            assert_eq!(c.read(), R::Simple("OK".into()));
                            assert_eq!(c.read(), R::Simple("QUEUED".into()));
                            match c.read() {
                                R::Nil => continue,
                                R::Arr(r) => {
                                    assert_eq!(r, vec![R::Simple("OK".into())]);
                                    break;
                                }
                                other => panic!("EXEC: {other:?}"),
                            }
                        }
                    }
                });
            }
        });
        let mut c = server.client();
        assert_eq!(
            c.cmd(&["GET", "counter"]),
            R::bulk(&(CLIENTS * EACH).to_string()),
            "{io}"
        );
    }
}

// Goal: CLIENT LIST shows another connection's transaction and subscriptions as Redis does
// (`flags=x multi=N`, `watch=N`, `flags=d` once a watched key is written, `flags=P sub= psub=`).
// Method: one connection in MULTI with queued commands, one watching, one subscribed; a
// fourth lists them.
#[test]
fn client_list_shows_transactions_and_subscriptions() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut txn = server.client();
        txn.cmd(&["CLIENT", "SETNAME", "txn"]);
        txn.cmd(&["WATCH", "w1", "w2"]);
        txn.cmd(&["MULTI"]);
        txn.cmd(&["SET", "a", "1"]);
        txn.cmd(&["INCR", "a"]);
        let mut sub = server.client();
        sub.cmd(&["CLIENT", "SETNAME", "sub"]);
        sub.send_raw(&common::encode(&[b"SUBSCRIBE", b"c1", b"c2"]));
        sub.read();
        sub.read();
        sub.send_raw(&common::encode(&[b"PSUBSCRIBE", b"p*"]));
        sub.read();
        let mut lister = server.client();
        let line = |l: &mut Client, name: &str| {
            let list = l.cmd(&["CLIENT", "LIST"]).text();
            list.lines()
                .find(|line| line.contains(&format!(" name={name} ")))
                .unwrap_or_else(|| panic!("{name} in {list}"))
                .to_string()
        };
        let t = line(&mut lister, "txn");
        assert!(
            t.contains(" flags=x ") && t.contains(" multi=2 ") && t.contains(" watch=2 "),
            "{io}: {t}"
        );
        let s = line(&mut lister, "sub");
        assert!(
            s.contains(" flags=P ") && s.contains(" sub=2 ") && s.contains(" psub=1 "),
            "{io}: {s}"
        );
        assert!(
            s.contains(" multi=-1 ") && s.contains(" watch=0 "),
            "{io}: {s}"
        );
        lister.cmd(&["SET", "w1", "x"]);
        txn.cmd(&["DISCARD"]);
        let t = line(&mut lister, "txn");
        assert!(
            t.contains(" flags=N ") && t.contains(" multi=-1 ") && t.contains(" watch=0 "),
            "{io}: {t}"
        );
        let me = lister.cmd(&["CLIENT", "INFO"]).text();
        assert!(
            me.contains(" flags=N ") && me.contains(" sub=0 "),
            "{io}: {me}"
        );
    }
}
