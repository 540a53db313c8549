//! The string and keyspace commands of issue 15 over real sockets: raw RESP byte for byte in
//! RESP2 and RESP3 (the replies of Redis's command pages and its edge cases), the `redis`
//! crate's typed replies, and RENAME's atomicity seen by concurrent readers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use forest_server::shutdown::Shutdown;
use forest_server::{Config, IoModel, Server};
use forest_store::Durability;

struct Running {
    addr: SocketAddr,
    shutdown: Arc<Shutdown>,
    thread: Option<JoinHandle<forest_core::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Running {
    fn start() -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = Config {
            dir: dir.path().to_path_buf(),
            port: 0,
            io: IoModel::Threads,
            durability: Durability::Group,
            ..Config::default()
        };
        let server = Server::open(config).expect("open");
        let addr = server.local_addr().expect("bound");
        let shutdown = server.shutdown_handle();
        let thread = std::thread::spawn(move || server.run());
        Running {
            addr,
            shutdown,
            thread: Some(thread),
            _dir: dir,
        }
    }

    fn raw(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        stream
    }

    fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://{}/", self.addr))
            .expect("url")
            .get_connection()
            .expect("connect")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shutdown.request(false);
            let _ = thread.join();
        }
    }
}

/// A command as a RESP array of bulk strings.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends each command and checks the reply bytes exactly.
fn exchange(stream: &mut TcpStream, cases: &[(&[&[u8]], &[u8])]) {
    for (args, want) in cases {
        stream.write_all(&resp(args)).expect("write");
        let mut got = vec![0u8; want.len()];
        let mut filled = 0;
        while filled < want.len() {
            match stream.read(&mut got[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) => panic!("{args:?}: read: {e}"),
            }
        }
        assert_eq!(
            String::from_utf8_lossy(&got[..filled]),
            String::from_utf8_lossy(want),
            "reply to {:?}",
            args.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

// Goal: the new string commands' replies are Redis's bytes in RESP2 and RESP3: empty bulk
// for GETRANGE of a missing key, integers, INCRBYFLOAT's bulk, LCS IDX as a flat array
// (RESP2) and a map (RESP3), nulls as `$-1` and `_`. Method: raw RESP on one connection,
// HELLO 3 in the middle.
#[test]
fn string_commands_raw() {
    let server = Running::start();
    let mut s = server.raw();
    let wrongtype: &[u8] =
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    exchange(
        &mut s,
        &[
            (&[b"SET", b"mykey", b"This is a string"], b"+OK\r\n"),
            (&[b"GETRANGE", b"mykey", b"0", b"3"], b"$4\r\nThis\r\n"),
            (&[b"GETRANGE", b"mykey", b"-3", b"-1"], b"$3\r\ning\r\n"),
            (&[b"GETRANGE", b"mykey", b"0", b"-1"], b"$16\r\nThis is a string\r\n"),
            (&[b"GETRANGE", b"mykey", b"10", b"100"], b"$6\r\nstring\r\n"),
            (&[b"GETRANGE", b"none", b"0", b"-1"], b"$0\r\n\r\n"),
            (&[b"SUBSTR", b"mykey", b"5", b"6"], b"$2\r\nis\r\n"),
            (&[b"SET", b"key1", b"Hello World"], b"+OK\r\n"),
            (&[b"SETRANGE", b"key1", b"6", b"Redis"], b":11\r\n"),
            (&[b"GET", b"key1"], b"$11\r\nHello Redis\r\n"),
            (&[b"SETRANGE", b"key2", b"6", b"Redis"], b":11\r\n"),
            (&[b"GET", b"key2"], b"$11\r\n\0\0\0\0\0\0Redis\r\n"),
            (&[b"SETRANGE", b"key2", b"-1", b"x"], b"-ERR offset is out of range\r\n"),
            (
                &[b"SETRANGE", b"key2", b"1048576", b"x"],
                b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n",
            ),
            (&[b"GETDEL", b"key1"], b"$11\r\nHello Redis\r\n"),
            (&[b"GETDEL", b"key1"], b"$-1\r\n"),
            (&[b"SET", b"f", b"10.50"], b"+OK\r\n"),
            (&[b"INCRBYFLOAT", b"f", b"0.1"], b"$4\r\n10.6\r\n"),
            (&[b"INCRBYFLOAT", b"f", b"-5"], b"$3\r\n5.6\r\n"),
            (&[b"SET", b"f", b"5.0e3"], b"+OK\r\n"),
            (&[b"INCRBYFLOAT", b"f", b"2.0e2"], b"$4\r\n5200\r\n"),
            (&[b"SET", b"g", b"0.15"], b"+OK\r\n"),
            // Redis's long double rounding, reproduced.
            (&[b"INCRBYFLOAT", b"g", b"1000"], b"$22\r\n1000.15000000000000002\r\n"),
            (&[b"INCRBYFLOAT", b"f", b"abc"], b"-ERR value is not a valid float\r\n"),
            (
                &[b"INCRBYFLOAT", b"f", b"inf"],
                b"-ERR increment would produce NaN or Infinity\r\n",
            ),
            (&[b"MSET", b"key1", b"ohmytext", b"key2", b"mynewtext"], b"+OK\r\n"),
            (&[b"LCS", b"key1", b"key2"], b"$6\r\nmytext\r\n"),
            (&[b"LCS", b"key1", b"key2", b"LEN"], b":6\r\n"),
            (
                &[b"LCS", b"key1", b"key2", b"IDX", b"MINMATCHLEN", b"4", b"WITHMATCHLEN"],
                b"*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n$3\r\nlen\r\n:6\r\n",
            ),
            (&[b"RPUSH", b"list", b"a"], b":1\r\n"),
            (&[b"GETRANGE", b"list", b"0", b"1"], wrongtype),
            (&[b"SETRANGE", b"list", b"0", b"1"], wrongtype),
            (&[b"INCRBYFLOAT", b"list", b"1"], wrongtype),
            (&[b"GETDEL", b"list"], wrongtype),
            (
                &[b"LCS", b"list", b"key1"],
                b"-ERR The specified keys must contain string values\r\n",
            ),
            (
                &[b"GETRANGE", b"list"],
                b"-ERR wrong number of arguments for 'getrange' command\r\n",
            ),
            (&[b"HELLO", b"3"], b"%7\r\n"),
        ],
    );
    // The rest of HELLO's map (it ends with `modules`, an empty array), then RESP3 forms.
    let mut rest = Vec::new();
    while !rest.ends_with(b"modules\r\n*0\r\n") {
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).expect("hello map");
        assert!(
            n > 0,
            "closed during HELLO: {:?}",
            String::from_utf8_lossy(&rest)
        );
        rest.extend_from_slice(&buf[..n]);
    }
    exchange(
        &mut s,
        &[
            (
                &[b"LCS", b"key1", b"key2", b"IDX", b"MINMATCHLEN", b"4"],
                b"%2\r\n$7\r\nmatches\r\n*1\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n$3\r\nlen\r\n:6\r\n",
            ),
            (&[b"GETDEL", b"none"], b"_\r\n"),
            (&[b"OBJECT", b"ENCODING", b"none"], b"_\r\n"),
            (&[b"RANDOMKEY"], b"$"),
        ],
    );
}

// Goal: the bit commands answer the examples of Redis's SETBIT, GETBIT, BITCOUNT, BITPOS and
// BITOP pages byte for byte, with their errors. Method: raw RESP.
#[test]
fn bit_commands_raw() {
    let server = Running::start();
    let mut s = server.raw();
    exchange(
        &mut s,
        &[
            (&[b"SETBIT", b"mykey", b"7", b"1"], b":0\r\n"),
            (&[b"SETBIT", b"mykey", b"7", b"0"], b":1\r\n"),
            (&[b"GET", b"mykey"], b"$1\r\n\0\r\n"),
            (&[b"SETBIT", b"mykey", b"7", b"1"], b":0\r\n"),
            (&[b"GETBIT", b"mykey", b"0"], b":0\r\n"),
            (&[b"GETBIT", b"mykey", b"7"], b":1\r\n"),
            (&[b"GETBIT", b"mykey", b"100"], b":0\r\n"),
            (
                &[b"SETBIT", b"mykey", b"8388608", b"1"],
                b"-ERR bit offset is not an integer or out of range\r\n",
            ),
            (
                &[b"SETBIT", b"mykey", b"0", b"2"],
                b"-ERR bit is not an integer or out of range\r\n",
            ),
            (&[b"SET", b"mykey", b"foobar"], b"+OK\r\n"),
            (&[b"BITCOUNT", b"mykey"], b":26\r\n"),
            (&[b"BITCOUNT", b"mykey", b"0", b"0"], b":4\r\n"),
            (&[b"BITCOUNT", b"mykey", b"1", b"1"], b":6\r\n"),
            (&[b"BITCOUNT", b"mykey", b"1", b"1", b"BYTE"], b":6\r\n"),
            (&[b"BITCOUNT", b"mykey", b"5", b"30", b"BIT"], b":17\r\n"),
            (&[b"BITCOUNT", b"mykey", b"0"], b"-ERR syntax error\r\n"),
            (&[b"SET", b"mykey", b"\xff\xf0\x00"], b"+OK\r\n"),
            (&[b"BITPOS", b"mykey", b"0"], b":12\r\n"),
            (&[b"SET", b"mykey", b"\x00\xff\xf0"], b"+OK\r\n"),
            (&[b"BITPOS", b"mykey", b"1", b"0"], b":8\r\n"),
            (&[b"BITPOS", b"mykey", b"1", b"2"], b":16\r\n"),
            (
                &[b"BITPOS", b"mykey", b"1", b"2", b"-1", b"BYTE"],
                b":16\r\n",
            ),
            (&[b"BITPOS", b"mykey", b"1", b"7", b"15", b"BIT"], b":8\r\n"),
            (&[b"SET", b"mykey", b"\x00\x00\x00"], b"+OK\r\n"),
            (&[b"BITPOS", b"mykey", b"1"], b":-1\r\n"),
            (
                &[b"BITPOS", b"mykey", b"1", b"7", b"-3", b"BIT"],
                b":-1\r\n",
            ),
            (
                &[b"BITPOS", b"mykey", b"3"],
                b"-ERR The bit argument must be 1 or 0.\r\n",
            ),
            (&[b"SET", b"key1", b"foobar"], b"+OK\r\n"),
            (&[b"SET", b"key2", b"abcdef"], b"+OK\r\n"),
            (&[b"BITOP", b"AND", b"dest", b"key1", b"key2"], b":6\r\n"),
            (&[b"GET", b"dest"], b"$6\r\n`bc`ab\r\n"),
            (&[b"BITOP", b"OR", b"dest", b"key1", b"key2"], b":6\r\n"),
            (&[b"GET", b"dest"], b"$6\r\ngoofev\r\n"),
            (
                &[b"BITOP", b"NOT", b"dest", b"key1", b"key2"],
                b"-ERR BITOP NOT must be called with a single source key.\r\n",
            ),
            (
                &[b"BITOP", b"NOR", b"dest", b"key1"],
                b"-ERR syntax error\r\n",
            ),
            (
                &[b"BITOP", b"AND", b"dest"],
                b"-ERR wrong number of arguments for 'bitop' command\r\n",
            ),
        ],
    );
}

// Goal: the keyspace commands answer Redis's bytes: RENAME's +OK and "no such key",
// RENAMENX and COPY's integers and errors, TOUCH, TYPE of every type, OBJECT ENCODING,
// RANDOMKEY's null on an empty store, FUNCTION FLUSH, FLUSHALL. Method: raw RESP.
#[test]
fn keyspace_commands_raw() {
    let server = Running::start();
    let mut s = server.raw();
    exchange(
        &mut s,
        &[
            (&[b"RANDOMKEY"], b"$-1\r\n"),
            (&[b"SET", b"mykey", b"Hello"], b"+OK\r\n"),
            (&[b"RENAME", b"mykey", b"myotherkey"], b"+OK\r\n"),
            (&[b"GET", b"myotherkey"], b"$5\r\nHello\r\n"),
            (&[b"RENAME", b"mykey", b"x"], b"-ERR no such key\r\n"),
            (&[b"SET", b"mykey", b"World"], b"+OK\r\n"),
            (&[b"RENAMENX", b"mykey", b"myotherkey"], b":0\r\n"),
            (&[b"RENAMENX", b"mykey", b"third"], b":1\r\n"),
            (&[b"SADD", b"set", b"a", b"b"], b":2\r\n"),
            (&[b"COPY", b"set", b"set2"], b":1\r\n"),
            (&[b"COPY", b"set", b"set2"], b":0\r\n"),
            (&[b"COPY", b"third", b"set2", b"REPLACE"], b":1\r\n"),
            (&[b"TYPE", b"set2"], b"+string\r\n"),
            (&[b"TYPE", b"set"], b"+set\r\n"),
            (
                &[b"COPY", b"set", b"x", b"DB", b"1"],
                b"-ERR DB index is out of range\r\n",
            ),
            (
                &[b"COPY", b"set", b"set"],
                b"-ERR source and destination objects are the same\r\n",
            ),
            (&[b"TOUCH", b"set", b"third", b"nope"], b":2\r\n"),
            (&[b"OBJECT", b"ENCODING", b"set"], b"$8\r\nlistpack\r\n"),
            (&[b"OBJECT", b"ENCODING", b"nope"], b"$-1\r\n"),
            (&[b"SET", b"n", b"100"], b"+OK\r\n"),
            (&[b"OBJECT", b"ENCODING", b"n"], b"$3\r\nint\r\n"),
            (&[b"FUNCTION", b"FLUSH"], b"+OK\r\n"),
            (&[b"FUNCTION", b"LIST"], b"*0\r\n"),
            (&[b"FLUSHALL", b"SYNC"], b"+OK\r\n"),
            (&[b"DBSIZE"], b":0\r\n"),
            (&[b"RANDOMKEY"], b"$-1\r\n"),
        ],
    );
}

// Goal: the `redis` crate reads every new command's reply as the type an application asks
// for. Method: typed queries through redis::cmd.
#[test]
fn redis_crate_typed_replies() {
    let server = Running::start();
    let mut con = server.client();
    let q = |con: &mut redis::Connection, args: &[&str]| -> redis::Value {
        let mut cmd = redis::Cmd::new();
        for a in args {
            cmd.arg(*a);
        }
        cmd.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    };
    q(&mut con, &["SET", "k", "Hello World"]);
    let range: String = redis::cmd("GETRANGE")
        .arg("k")
        .arg(0)
        .arg(4)
        .query(&mut con)
        .expect("getrange");
    assert_eq!(range, "Hello");
    let len: i64 = redis::cmd("SETRANGE")
        .arg("k")
        .arg(6)
        .arg("Redis")
        .query(&mut con)
        .expect("setrange");
    assert_eq!(len, 11);
    let f: f64 = redis::cmd("INCRBYFLOAT")
        .arg("f")
        .arg(2.5)
        .query(&mut con)
        .expect("incrbyfloat");
    assert_eq!(f, 2.5);
    let old: Option<String> = redis::cmd("GETDEL")
        .arg("k")
        .query(&mut con)
        .expect("getdel");
    assert_eq!(old.as_deref(), Some("Hello Redis"));
    let gone: Option<String> = redis::cmd("GETDEL")
        .arg("k")
        .query(&mut con)
        .expect("getdel");
    assert_eq!(gone, None);
    let bit: i64 = redis::cmd("SETBIT")
        .arg("b")
        .arg(3)
        .arg(1)
        .query(&mut con)
        .expect("setbit");
    assert_eq!(bit, 0);
    let count: i64 = redis::cmd("BITCOUNT")
        .arg("b")
        .query(&mut con)
        .expect("bitcount");
    assert_eq!(count, 1);
    let pos: i64 = redis::cmd("BITPOS")
        .arg("b")
        .arg(1)
        .query(&mut con)
        .expect("bitpos");
    assert_eq!(pos, 3);
    q(&mut con, &["RPUSH", "l", "a", "b"]);
    let ok: String = redis::cmd("RENAME")
        .arg("l")
        .arg("l2")
        .query(&mut con)
        .expect("rename");
    assert_eq!(ok, "OK");
    let items: Vec<String> = redis::cmd("LRANGE")
        .arg("l2")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .expect("lrange");
    assert_eq!(items, ["a", "b"]);
    let copied: bool = redis::cmd("COPY")
        .arg("l2")
        .arg("l3")
        .query(&mut con)
        .expect("copy");
    assert!(copied);
    let touched: i64 = redis::cmd("TOUCH")
        .arg(&["l2", "l3", "none"])
        .query(&mut con)
        .expect("touch");
    assert_eq!(touched, 2);
    let key: Option<String> = redis::cmd("RANDOMKEY").query(&mut con).expect("randomkey");
    assert!(
        matches!(key.as_deref(), Some("l2" | "l3" | "f" | "b")),
        "{key:?}"
    );
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg("l2")
        .query(&mut con)
        .expect("object");
    assert_eq!(encoding, "listpack");
    let err = redis::cmd("RENAME")
        .arg("none")
        .arg("x")
        .query::<redis::Value>(&mut con)
        .expect_err("no such key");
    assert_eq!(err.detail(), Some("no such key"), "{err}");
    let lcs: String = redis::cmd("LCS")
        .arg("l2")
        .arg("f")
        .query::<redis::Value>(&mut con)
        .map(|v| format!("{v:?}"))
        .unwrap_or_else(|e| e.detail().unwrap_or_default().to_string());
    assert_eq!(lcs, "The specified keys must contain string values");
}

// Goal: RENAME of a collection is one atomic step for other clients: a reader listing the
// keys sees the collection under exactly one of its two names, whole, at every moment.
// Method: one client renames a 300-member set back and forth 200 times while another runs
// KEYS * and SCARD of the name it saw.
#[test]
fn rename_is_atomic_for_readers() {
    let server = Running::start();
    let mut writer = server.client();
    let members: Vec<String> = (0..300).map(|i| format!("m{i:03}")).collect();
    redis::cmd("SADD")
        .arg("a")
        .arg(&members)
        .query::<i64>(&mut writer)
        .expect("sadd");
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let done = Arc::clone(&done);
        let mut con = server.client();
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).expect("keys");
                assert!(
                    keys == ["a"] || keys == ["b"],
                    "the set is under both names or neither: {keys:?}"
                );
                reads += 1;
            }
            reads
        })
    };
    for i in 0..200 {
        let (from, to) = if i % 2 == 0 { ("a", "b") } else { ("b", "a") };
        let _: () = redis::cmd("RENAME")
            .arg(from)
            .arg(to)
            .query(&mut writer)
            .expect("rename");
        let card: i64 = redis::cmd("SCARD")
            .arg(to)
            .query(&mut writer)
            .expect("scard");
        assert_eq!(card, 300);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let reads = reader.join().expect("reader");
    assert!(reads > 0);
    let size: i64 = redis::cmd("DBSIZE").query(&mut writer).expect("dbsize");
    assert_eq!(size, 1);
}
