//! forest-server: Redis's protocol (RESP2, RESP3 after `HELLO 3`) over a durable forest
//! store, so that redis-cli, redis-benchmark and Redis client libraries work unchanged, with
//! ordered ranges added (issue 6; DESIGN.md "Server"; docs/PROTOCOL.md lists every command).
//!
//! Masstree is a network key-value server (masstree.md §3): clients send many queries per
//! message and ranges (`getrange`) next to gets and puts; its throughput comes from batching
//! per connection and logging in the background (§5). Here:
//!
//! | module | role | paper |
//! |---|---|---|
//! | [`frame`] | RESP frames: zero-panic bounded parser, encoder for RESP2 and RESP3 | — |
//! | [`parse`] | incremental decoder of pipelined requests, inline commands, argument syntax | §3 "a single client message can include many queries" |
//! | [`cmd`] | one file per command or family; `execute` over a store batch | §3 get, put, remove, getrange |
//! | [`connection`] | a connection's batch: all complete commands, one durability wait, one write | §5 |
//! | [`server`] | settings, shared state, accept loop, client bound, orderly stop | §5 |
//! | [`tokio_io`] | the second I/O model, tokio tasks on worker threads | — |
//! | [`shutdown`] | the stop latch and the signal thread | — |
//! | [`info`] | INFO's sections, with the engine's counters | — |
//! | [`collection`] | lists, sets, hashes, sorted sets, streams as key ranges under byte 0xFF; stripe locks | §3 one ordered map |
//! | [`meta_cache`] | recently written collections' type entries in memory per stripe lock | — |
//! | [`glob`] | Redis glob patterns for KEYS, SCAN MATCH, CONFIG GET, PSUBSCRIBE | — |
//! | [`expiry`] | key deadlines: a string with one lives at `FF 'x'` (deadline in its value), a collection's is an `FF 'E'` entry; the time order in memory, the active task | §3 one ordered map |
//! | [`watch`] | WATCH's registry and the hook every write calls | — |
//! | [`pubsub`] | channels, patterns, each subscriber's bounded mailbox | — |
//! | [`blocking`] | clients blocked on keys (BLPOP...): per-key queues, each waiter's wake-up | — |
//!
//! The store does the logging (forest-store: group commit, `periodic` acknowledges at once
//! as Masstree does). No `unsafe` in this crate.

#![forbid(unsafe_code)]

pub mod blocking;
pub mod cmd;
pub mod collection;
pub mod connection;
pub mod expiry;
pub mod frame;
pub mod glob;
pub mod info;
pub mod meta_cache;
pub mod parse;
pub mod per_core;
pub mod pubsub;
pub mod server;
pub mod shutdown;
pub mod tokio_io;
pub mod watch;

#[cfg(test)]
mod review_rev2;
#[cfg(test)]
mod review_setex;

pub use frame::{Frame, FrameError, Limits};
pub use server::{Config, IoModel, Server};
