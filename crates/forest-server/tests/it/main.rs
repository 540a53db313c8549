//! forest-server's integration tests in one binary: each module is one test file (a binary per file
//! compiled the shared helpers and dependencies' generic code again for each, which cost CI
//! minutes of build). One file's tests: `cargo test -p forest-server --test it -- NAME::`.

mod asof;
mod blocking;
mod client_libraries;
mod collection_reads;
mod common;
mod frame_proptest;
mod multi_key_collections;
mod per_core_scripts;
mod pipelined_gets;
mod protocol_doc;
mod pubsub;
mod range;
mod redis_benchmark;
mod rev_coll;
mod rev_lfix;
mod rev_lists;
mod rev_pcore;
mod rev_range;
mod rev_srv;
mod scripting;
mod server;
mod storage_errors;
mod stream_blocking;
mod streams;
mod string_keyspace;
mod transactions;
