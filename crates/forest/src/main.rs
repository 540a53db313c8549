//! The `forest` command line.
fn main() {}
