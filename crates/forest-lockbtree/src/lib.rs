//! The lock-coupling B+tree of Westerhoff's thesis: RW spin latches, interlocking reads, multi-pass writes
