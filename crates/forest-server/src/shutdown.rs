//! The stop signal: SIGINT, SIGTERM and the SHUTDOWN command all request it; the server
//! waits on it, then stops accepting, lets connections finish their batch, and closes the
//! store (see [`crate::server`]).
//!
//! Signals are caught by signal-hook's iterator on a thread of its own, so no code runs in
//! a signal handler beyond signal-hook's self-pipe write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// A one-way latch: requested once, seen by everyone.
#[derive(Debug, Default)]
pub struct Shutdown {
    requested: AtomicBool,
    save: AtomicBool,
    lock: Mutex<bool>,
    cond: Condvar,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests the stop; `save` asks for a checkpoint before the store closes.
    pub fn request(&self, save: bool) {
        if save {
            self.save.store(true, Ordering::Release);
        }
        self.requested.store(true, Ordering::Release);
        let mut done = self.lock.lock();
        *done = true;
        self.cond.notify_all();
    }

    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    pub fn save_requested(&self) -> bool {
        self.save.load(Ordering::Acquire)
    }

    /// Blocks until the stop is requested.
    pub fn wait(&self) {
        let mut done = self.lock.lock();
        while !*done {
            self.cond.wait(&mut done);
        }
    }
}

/// Requests `shutdown` on the first SIGINT or SIGTERM (a thread of its own).
pub fn install_signal_handlers(shutdown: Arc<Shutdown>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("forest-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                shutdown.request(false);
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a request wakes a waiter on another thread and is seen afterwards.
    // Method: wait on a thread, request from this one, join.
    #[test]
    fn request_wakes_waiters() {
        let shutdown = Arc::new(Shutdown::new());
        let waiter = {
            let s = Arc::clone(&shutdown);
            std::thread::spawn(move || s.wait())
        };
        assert!(!shutdown.is_requested());
        shutdown.request(true);
        waiter.join().expect("waiter");
        assert!(shutdown.is_requested());
        assert!(shutdown.save_requested());
    }
}
