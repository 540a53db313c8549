//! Model tests of the collection types through a real `forest serve` (issue 19 "Tests": "a
//! model test per type (random commands against an in-memory model of the type, with reopen
//! and SIGKILL among them)"). The driver and the models are in `collection_models/` (a module of this binary); each test
//! runs one type under `--durability sync` and under the default mode, `group`.

use crate::collection_models;

use collection_models::{
    hashes::Hashes, lists::Lists, run, sets::Sets, streams::Streams, zsets::Zsets,
};

/// Commands per run; two runs per type.
const STEPS: usize = 400;

// Goal: lists keep every acknowledged write across SIGKILL and restart, LLEN agrees with
// LRANGE, and every reply matches the model. Method: the model driver (collection_models).
#[test]
fn list_model_sync() {
    run::<Lists>("sync", STEPS);
}

#[test]
fn list_model_group() {
    run::<Lists>("group", STEPS);
}

// Goal: as for lists, for sets (SCARD against SMEMBERS; SPOP's random pick checked).
#[test]
fn set_model_sync() {
    run::<Sets>("sync", STEPS);
}

#[test]
fn set_model_group() {
    run::<Sets>("group", STEPS);
}

// Goal: as for lists, for hashes (HLEN against HGETALL).
#[test]
fn hash_model_sync() {
    run::<Hashes>("sync", STEPS);
}

#[test]
fn hash_model_group() {
    run::<Hashes>("group", STEPS);
}

// Goal: as for lists, for sorted sets (ZCARD against ZRANGE, which must be in order).
#[test]
fn zset_model_sync() {
    run::<Zsets>("sync", STEPS);
}

#[test]
fn zset_model_group() {
    run::<Zsets>("group", STEPS);
}

// Goal: as for lists, for streams (XLEN against XRANGE; the last-generated id survives too).
#[test]
fn stream_model_sync() {
    run::<Streams>("sync", STEPS);
}

#[test]
fn stream_model_group() {
    run::<Streams>("group", STEPS);
}

// Goal: the models are Redis's semantics, so that a disagreement with forest is forest's.
// Method: each model's commands against a redis-server on PATH (not in CI, which has only
// redis-tools; run with --ignored where redis-server is installed).
#[test]
#[ignore = "needs redis-server on PATH"]
fn models_agree_with_redis_server() {
    use collection_models::against_redis_server;
    let steps = 20_000;
    assert!(
        against_redis_server::<Lists>(steps),
        "redis-server is not on PATH"
    );
    assert!(against_redis_server::<Sets>(steps));
    assert!(against_redis_server::<Hashes>(steps));
    assert!(against_redis_server::<Zsets>(steps));
    assert!(against_redis_server::<Streams>(steps));
}
