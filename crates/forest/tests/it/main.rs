//! forest's integration tests in one binary: each module is one test file (a binary per file
//! compiled the shared helpers and dependencies' generic code again for each, which cost CI
//! minutes of build). One file's tests: `cargo test -p forest --test it -- NAME::`.

mod cli;
mod collection_models;
mod common;
mod serve_asof;
mod serve_blocking_crash;
mod serve_collection_models;
mod serve_collections;
mod serve_commands;
mod serve_crash;
mod serve_durability;
mod serve_expiry;
mod serve_job_queue;
mod serve_memory_budget;
mod serve_multi_key_crash;
mod serve_ranges;
mod serve_raw;
mod serve_redis_tools;
mod serve_transactions;
