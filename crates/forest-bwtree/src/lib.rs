//! The Bw-tree: latch-free B-tree over LLAMA with delta records, consolidation and B-link SMOs
