//! forest's benchmark harness
