//! When `forest serve` acknowledges writes (issue 6 "Pipelining is batched"; protocol.md
//! "Pipelining"): in `sync` and `group` a write's reply waits for its fsync, so one client's
//! sequential writes cost an fsync each; a pipeline's writes share one durability wait, so a
//! pipeline of 1,000 writes costs a handful; `periodic` acknowledges at once; reads cost none.
//!
//! The fsyncs are counted through `INFO persistence`'s `forest_fsyncs` (the store's own
//! counter), the one black-box view of durability waits the server gives.

use crate::common;

use common::{data_dir, io_flag_sets, read_exact_len, resp, Server};
use std::io::Write;

/// The store's fsync count so far.
fn fsyncs(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query(con)
        .expect("INFO persistence");
    info.lines()
        .find_map(|l| l.strip_prefix("forest_fsyncs:"))
        .unwrap_or_else(|| panic!("INFO persistence has no forest_fsyncs:\n{info}"))
        .trim()
        .parse()
        .expect("forest_fsyncs is a number")
}

/// Each write command once, sequentially, each changing the store; returns how many ran.
fn one_of_each_write(con: &mut redis::Connection, round: u32) -> u64 {
    let k = |name: &str| format!("{name}{round}");
    let mut ran = 0;
    let mut run = |cmd: &mut redis::Cmd| {
        cmd.query::<redis::Value>(con).expect("write");
        ran += 1;
    };
    run(redis::cmd("SET").arg(k("s")).arg("v"));
    run(redis::cmd("SETNX").arg(k("nx")).arg("v"));
    run(redis::cmd("GETSET").arg(k("s")).arg("w"));
    run(redis::cmd("MSET")
        .arg(k("m1"))
        .arg("1")
        .arg(k("m2"))
        .arg("2"));
    run(redis::cmd("MSETNX")
        .arg(k("x1"))
        .arg("1")
        .arg(k("x2"))
        .arg("2"));
    run(redis::cmd("INCR").arg(k("n")));
    run(redis::cmd("INCRBY").arg(k("n")).arg("5"));
    run(redis::cmd("DECR").arg(k("n")));
    run(redis::cmd("DECRBY").arg(k("n")).arg("2"));
    run(redis::cmd("APPEND").arg(k("s")).arg("x"));
    run(redis::cmd("DEL").arg(k("m1")));
    run(redis::cmd("UNLINK").arg(k("m2")));
    let lo = format!("[{}", k("x1"));
    let hi = format!("[{}", k("x2"));
    run(redis::cmd("FOREST.DELRANGE").arg(lo).arg(hi));
    ran
}

// Goal: in sync and group, every write command's reply waits for its fsync. Method: one client
// runs each write command in turn (each waits for the last reply); the fsync count must grow
// by at least one per write.
#[test]
fn sync_and_group_replies_wait_for_the_fsync() {
    for mode in ["sync", "group"] {
        let (_tmp, dir) = data_dir();
        let server = Server::start(&dir, &["--durability", mode]);
        let mut c = server.client();
        let before = fsyncs(&mut c);
        let mut writes = 0;
        for round in 0..5 {
            writes += one_of_each_write(&mut c, round);
        }
        let after = fsyncs(&mut c);
        println!(
            "{mode}: {writes} sequential writes, {} fsyncs",
            after - before
        );
        assert!(
            after - before >= writes,
            "{mode}: {writes} sequential writes acknowledged after only {} fsyncs",
            after - before
        );
    }
}

// Goal: the acknowledged-write rule holds under every I/O model, not only the default
// (review rev-pcore F4: with per-core the default, the test above no longer ran threads).
// Method: one round of each write in sync mode per `--io` flag set; the fsync count must
// grow by at least one per write.
#[test]
fn sync_replies_wait_for_the_fsync_under_each_io_model() {
    for io in io_flag_sets() {
        let (_tmp, dir) = data_dir();
        let mut flags = vec!["--durability", "sync"];
        flags.extend_from_slice(&io);
        let server = Server::start(&dir, &flags);
        let mut c = server.client();
        let before = fsyncs(&mut c);
        let writes = one_of_each_write(&mut c, 0);
        let after = fsyncs(&mut c);
        assert!(
            after - before >= writes,
            "{io:?}: {writes} sequential writes acknowledged after only {} fsyncs",
            after - before
        );
    }
}

// Goal: periodic acknowledges at once, and reads never wait for an fsync. Method: periodic
// with a long interval, sequential writes: few fsyncs; then reads only in sync mode: none.
#[test]
fn periodic_acks_at_once_and_reads_cost_no_fsync() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "periodic:60000"]);
    let mut c = server.client();
    let before = fsyncs(&mut c);
    let mut writes = 0;
    for round in 0..5 {
        writes += one_of_each_write(&mut c, round);
    }
    let grew = fsyncs(&mut c) - before;
    println!("periodic: {writes} sequential writes, {grew} fsyncs");
    assert!(
        grew < writes / 4,
        "periodic: {writes} writes cost {grew} fsyncs"
    );

    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "sync"]);
    let mut c = server.client();
    one_of_each_write(&mut c, 0);
    let before = fsyncs(&mut c);
    for _ in 0..20 {
        for cmd in [
            redis::cmd("GET").arg("s0"),
            redis::cmd("EXISTS").arg("s0"),
            redis::cmd("MGET").arg("s0").arg("n0"),
            redis::cmd("STRLEN").arg("s0"),
            redis::cmd("FOREST.RANGE").arg("-").arg("+"),
            redis::cmd("FOREST.COUNT").arg("-").arg("+"),
            redis::cmd("KEYS").arg("*"),
            &mut redis::cmd("DBSIZE"),
        ] {
            cmd.query::<redis::Value>(&mut c).expect("read");
        }
    }
    let grew = fsyncs(&mut c) - before;
    println!("reads: {grew} fsyncs");
    assert!(grew <= 2, "160 reads cost {grew} fsyncs");
}

// Goal: a pipeline's writes share one durability wait (Masstree §5 batching). Method: sync and
// group; 1,000 SETs in one write on a raw connection, all replies read; the fsync count may
// grow by a few (the server may read the 40 KB in several batches), never by one per write.
#[test]
fn a_pipeline_shares_one_durability_wait() {
    for mode in ["sync", "group"] {
        let (_tmp, dir) = data_dir();
        let server = Server::start(&dir, &["--durability", mode]);
        let mut c = server.client();
        let before = fsyncs(&mut c);
        let mut raw = server.raw();
        let mut request = Vec::new();
        for i in 0..1000u32 {
            request.extend(resp(&[
                b"SET",
                format!("key{i:04}").as_bytes(),
                b"value-xyz",
            ]));
        }
        raw.write_all(&request).expect("write");
        let replies = read_exact_len(&mut raw, 1000 * b"+OK\r\n".len());
        assert_eq!(replies, b"+OK\r\n".repeat(1000));
        let grew = fsyncs(&mut c) - before;
        println!("{mode}: a pipeline of 1000 writes, {grew} fsyncs");
        assert!(
            grew >= 1,
            "{mode}: the pipeline was acknowledged with no fsync"
        );
        assert!(
            grew <= 50,
            "{mode}: a pipeline of 1000 writes cost {grew} fsyncs"
        );
    }
}

// Goal: FLUSHDB and FOREST.DELRANGE are durable once acknowledged, like any write. Method: sync
// mode; load keys, DELRANGE part of them, SIGKILL, restart, check; FLUSHDB, SIGKILL, restart,
// check that nothing is left.
#[test]
fn flushdb_and_delrange_survive_a_kill() {
    let (_tmp, dir) = data_dir();
    let mut server = Server::start(&dir, &["--durability", "sync"]);
    let mut c = server.client();
    let mut pipe = redis::pipe();
    for i in 0..300 {
        pipe.cmd("SET").arg(format!("k{i:03}")).arg(i).ignore();
    }
    pipe.query::<()>(&mut c).expect("load");
    let removed: i64 = redis::cmd("FOREST.DELRANGE")
        .arg("[k100")
        .arg("(k200")
        .query(&mut c)
        .expect("DELRANGE");
    assert_eq!(removed, 100);
    drop(c);
    server.kill();

    let mut server = Server::start(&dir, &["--durability", "sync"]);
    let mut c = server.client();
    let count: i64 = redis::cmd("DBSIZE").query(&mut c).expect("DBSIZE");
    assert_eq!(count, 200);
    let gone: i64 = redis::cmd("EXISTS")
        .arg("k100")
        .arg("k199")
        .query(&mut c)
        .expect("EXISTS");
    assert_eq!(gone, 0);
    let () = redis::cmd("FLUSHDB").query(&mut c).expect("FLUSHDB");
    drop(c);
    server.kill();

    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let count: i64 = redis::cmd("DBSIZE").query(&mut c).expect("DBSIZE");
    assert_eq!(
        count, 0,
        "FLUSHDB was acknowledged, so it survives the kill"
    );
}
