//! FOREST.RANGE over real sockets, in both I/O models and both protocols (issue 14: the
//! KEYSONLY form, with REV and LIMIT, in RESP2 and RESP3): reply bytes compared exactly,
//! and pipelines of pages whose replies reuse the connection's pooled buffers (each page's
//! bytes must be its own, whatever the buffers held before).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::Running;
use forest_server::frame::{parse, Frame, Limits};
use forest_server::IoModel;

fn read_exact_len(stream: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut out = vec![0u8; want];
    stream.read_exact(&mut out).expect("the whole reply");
    out
}

/// Reads one whole frame (of any length) and returns it.
fn read_frame(stream: &mut TcpStream) -> Frame {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((frame, used)) = parse(&buf, &Limits::default()).expect("a valid frame") {
            assert_eq!(used, buf.len(), "one frame, nothing after it");
            return frame;
        }
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "closed mid-frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A command as a RESP array of bulk strings.
fn command(args: &[&[u8]]) -> Vec<u8> {
    common::encode(args)
}

/// A flat array of bulk strings, as RESP bytes (the same in RESP2 and RESP3).
fn array(items: &[&[u8]]) -> Vec<u8> {
    command(items)
}

// Goal: KEYSONLY replies with keys only, alone and with REV and LIMIT, and the pairs form is
// unchanged, byte for byte in RESP2 and again after HELLO 3 (flat arrays in both).
// Method: one pipeline per protocol; the RESP3 switch's own reply is read as a frame.
#[test]
fn keysonly_with_rev_and_limit_in_resp2_and_resp3() {
    for io in [IoModel::Threads, IoModel::PerCore] {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.stream();
        c.write_all(b"MSET a 1 b 22 c 333 d 4\r\n").expect("write");
        assert_eq!(read_exact_len(&mut c, 5), b"+OK\r\n");
        let queries: [&[&[u8]]; 5] = [
            &[b"FOREST.RANGE", b"-", b"+", b"KEYSONLY"],
            &[
                b"FOREST.RANGE",
                b"-",
                b"+",
                b"KEYSONLY",
                b"REV",
                b"LIMIT",
                b"2",
            ],
            &[b"FOREST.RANGE", b"(a", b"+", b"LIMIT", b"2", b"KEYSONLY"],
            &[b"FOREST.RANGE", b"[b", b"[c", b"REV"],
            &[b"FOREST.RANGE", b"-", b"+", b"LIMIT", b"0", b"KEYSONLY"],
        ];
        let want = [
            array(&[b"a", b"b", b"c", b"d"]),
            array(&[b"d", b"c"]),
            array(&[b"b", b"c"]),
            array(&[b"c", b"333", b"b", b"22"]),
            b"*0\r\n".to_vec(),
        ]
        .concat();
        for protocol in ["RESP2", "RESP3"] {
            if protocol == "RESP3" {
                c.write_all(&command(&[b"HELLO", b"3"])).expect("write");
                assert!(
                    matches!(read_frame(&mut c), Frame::Map(_)),
                    "HELLO 3 is a map"
                );
            }
            let pipeline: Vec<u8> = queries.iter().flat_map(|q| command(q)).collect();
            c.write_all(&pipeline).expect("write");
            let got = read_exact_len(&mut c, want.len());
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{io} {protocol}"
            );
        }
    }
}

// Goal: pages of a pipeline hold their own bytes though their bulk strings reuse the buffers
// earlier replies gave back (values of different lengths, so a reused buffer is longer or
// shorter than what it now holds). Method: 300 keys, pipelines of 30 pages of LIMIT 50
// (pairs and KEYSONLY, up and down) sent three times, each reply compared with a model.
#[test]
fn pipelined_pages_reusing_buffers_hold_their_own_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start(dir.path(), IoModel::Threads);
    let mut c = server.stream();
    let keys: Vec<(Vec<u8>, Vec<u8>)> = (0..300u32)
        .map(|i| {
            let key = format!("k{i:04}").into_bytes();
            let value = vec![b'a' + (i % 26) as u8; 1 + (i as usize * 37) % 200];
            (key, value)
        })
        .collect();
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for (k, v) in &keys {
        mset.push(k);
        mset.push(v);
    }
    c.write_all(&command(&mset)).expect("write");
    assert_eq!(read_exact_len(&mut c, 5), b"+OK\r\n");
    for _ in 0..3 {
        let mut pipeline = Vec::new();
        let mut want = Vec::new();
        for page in 0..30usize {
            let start = (page * 37) % keys.len();
            let rev = page % 2 == 1;
            let keys_only = page % 3 == 0;
            let bound = [&b"["[..], &keys[start].0].concat();
            let mut args: Vec<&[u8]> = if rev {
                vec![b"FOREST.RANGE", b"-", &bound, b"REV"]
            } else {
                vec![b"FOREST.RANGE", &bound, b"+"]
            };
            args.extend_from_slice(&[b"LIMIT", b"50"]);
            if keys_only {
                args.push(b"KEYSONLY");
            }
            pipeline.extend(command(&args));
            let records: Vec<&(Vec<u8>, Vec<u8>)> = if rev {
                keys[..=start].iter().rev().take(50).collect()
            } else {
                keys[start..].iter().take(50).collect()
            };
            let mut items: Vec<&[u8]> = Vec::new();
            for (k, v) in records {
                items.push(k);
                if !keys_only {
                    items.push(v);
                }
            }
            want.extend(array(&items));
        }
        c.write_all(&pipeline).expect("write");
        let got = read_exact_len(&mut c, want.len());
        assert!(got == want, "pipelined pages differ from the model");
    }
}
