//! Read of an evicted page (TSBw §II-C Read; Bw-tree §II-A: the only place an operation waits
//! for I/O; issue 17, increment 3).
//!
//! A page whose mapping-table word holds an LSS address (tag `01`, written by `evict.rs`) is
//! on flash as a chain of pieces, newest first: delta runs, each naming the page's previous
//! piece, ending at a page image (llama-notes §3, open point 2). [`read_pieces`] reads that
//! chain; the access method rebuilds one page from it and installs it with
//! [`crate::MappingTable::install_loaded`], a CAS from the address: if another thread loaded
//! the page first, the loser drops its copy and uses the winner's.
//!
//! Invariants:
//! - Every piece read names the PID asked for and lies below the piece that linked to it
//!   (pieces are in address order = chain order, `flush.rs`), so a damaged link can neither
//!   loop nor lead into another page.
//! - Every failure is an [`Error::Corrupt`] (or the LSS's I/O error) naming the segment file,
//!   the offset in it and the PID; nothing panics on bytes read from the device.
//!
//! Node-merge links: forest-bwtree never flushes a merged page as a run (a node merge delta
//! since the base page makes the next flush a whole image), so a chain never forks.
//!
//! [`read_page`] and [`load_page`] are the Read both access methods share: the word read
//! once, a memory state returned as it is, an LSS address loaded (the page rebuilt by the
//! access method's decoder, installed by the CAS from the address). Pause points (feature `pause-points`):
//! `load:word-read` (the address read, nothing rebuilt yet) and `load:rebuilt` (the copy
//! built, before its install CAS).

use crossbeam_epoch::{Guard, Owned, Shared};
use forest_core::pause::pause_point;
use forest_core::{Error, Result};

use crate::evict::{Clock, EvictStats};
use crate::lss::{Lss, LssAddress, Record, RecordKind};
use crate::mapping_table::{MappingTable, PageState};
use crate::page_state::PageLocation;
use crate::Pid;

/// How an access method loads its pages, for [`read_page`].
pub struct PageLoader<'a, R, D, I> {
    /// The attached LSS and its eviction counters (loads, lost races); `None`: a tree without
    /// one, which never meets an address (an error if it does).
    pub lss: Option<(&'a Lss, &'a EvictStats)>,
    /// Names a page in errors ("page", "tsbtree page").
    pub label: &'a str,
    /// The page's state from the address of its newest piece (the access method's decoder).
    pub rebuild: R,
    /// Drops a copy that lost the install race (never published).
    pub discard: D,
    /// Called with a state this thread installed (the access method's accounting).
    pub installed: I,
}

/// Read of page `pid` under `guard` (TSBw §II-C): the state its word holds, read once (a
/// second read could meet the page swapped out meanwhile), touched in `clock` (the eviction
/// clock of a tree on an LSS) when it is resident; `None` for an empty
/// or free word. An LSS address goes to `load` (the access method's [`load_page`] call, made
/// only there so that the resident path costs what a bare read of the word does); its `None`
/// (another thread's copy won, or the word changed) reads the word again.
#[inline(always)]
pub fn read_page<'g, T: PageState>(
    table: &MappingTable<T>,
    pid: Pid,
    clock: Option<&Clock>,
    mut load: impl FnMut(u64) -> Result<Option<Shared<'g, T>>>,
    _guard: &'g Guard,
) -> Result<Option<Shared<'g, T>>> {
    let mut bits = match resident(table.read_location(pid), pid, clock) {
        Ok(found) => return Ok(found),
        Err(bits) => bits,
    };
    // Evicted: out of the resident path's way.
    loop {
        if let Some(installed) = load(bits)? {
            return Ok(Some(installed));
        }
        bits = match resident(table.read_location(pid), pid, clock) {
            Ok(found) => return Ok(found),
            Err(bits) => bits,
        };
    }
}

/// What a word read at `at` says without a load: its state (touched in `clock`), or no page;
/// `Err` with the LSS address of an evicted page.
#[inline(always)]
fn resident<'g, T>(
    at: PageLocation<T>,
    pid: Pid,
    clock: Option<&Clock>,
) -> std::result::Result<Option<Shared<'g, T>>, u64> {
    match at {
        PageLocation::Memory(ptr) => {
            if let Some(clock) = clock {
                clock.touch(pid);
            }
            // The caller read the word under its guard: the state lives until it unpins.
            Ok(Some(Shared::from(ptr)))
        }
        PageLocation::Stored(bits) => Err(bits),
        PageLocation::Empty | PageLocation::FreeLink(_) => Ok(None),
    }
}

/// Load of evicted page `pid` whose word held `bits` (for [`read_page`]): rebuilt by
/// `loader.rebuild`, installed by a CAS from the address. `None` if another thread's copy
/// won, or a failed rebuild met a word that no longer holds the address (loaded, relocated by
/// the cleaner, freed): read the word again. An error only when a rebuild fails and the word
/// still holds its address.
#[cold]
pub fn load_page<'g, T, R, D, I>(
    table: &MappingTable<T>,
    pid: Pid,
    bits: u64,
    loader: &PageLoader<'_, R, D, I>,
    guard: &'g Guard,
) -> Result<Option<Shared<'g, T>>>
where
    T: PageState,
    R: Fn(&Lss, LssAddress) -> Result<Owned<T>>,
    D: Fn(Owned<T>),
    I: Fn(Shared<'g, T>),
{
    let label = loader.label;
    let Some((lss, stats)) = loader.lss else {
        return Err(Error::InvalidUse(format!(
            "{label} {pid} is on an LSS, but the tree has none attached"
        )));
    };
    let Some(address) = LssAddress::from_bits(bits) else {
        return Err(Error::InvalidUse(format!(
            "{label} {pid}'s mapping word holds {bits:#x}, no LSS address"
        )));
    };
    pause_point("load:word-read");
    let state = match (loader.rebuild)(lss, address) {
        Ok(state) => state,
        // Addresses only grow and a freed word holds none: a changed word means "read it
        // again".
        Err(_) if table.read_location(pid) != PageLocation::Stored(bits) => return Ok(None),
        Err(e) => return Err(e),
    };
    pause_point("load:rebuilt");
    match table.install_loaded(pid, bits, state, guard) {
        Ok(installed) => {
            stats.loads.incr();
            (loader.installed)(installed);
            Ok(Some(installed))
        }
        Err(copy) => {
            (loader.discard)(copy);
            stats.load_races.incr();
            Ok(None)
        }
    }
}

/// The pieces of page `pid` from its newest, at `newest`, back to and including its newest
/// page image; element 0 is the newest. Each piece's header names `pid`.
pub fn read_pieces(lss: &Lss, pid: Pid, newest: LssAddress) -> Result<Vec<(LssAddress, Record)>> {
    let mut pieces = Vec::new();
    let mut at = newest;
    loop {
        // A damaged header may claim any PID: name the page being loaded (review rev-evict F5).
        let record = lss.read(at).map_err(|e| match e {
            Error::Corrupt { path, offset, what } => Error::Corrupt {
                path,
                offset,
                what: format!("{what}; while loading page {pid}"),
            },
            other => other,
        })?;
        let corrupt = |what: String| {
            let (path, offset) = lss.locate(at);
            Error::Corrupt {
                path,
                offset,
                what: format!("LSS record at address {at} (page {pid}): {what}"),
            }
        };
        if record.header.pid != pid {
            return Err(corrupt(format!(
                "names page {}, reached from page {pid}'s chain",
                record.header.pid
            )));
        }
        match record.header.kind {
            RecordKind::PageImage => {
                pieces.push((at, record));
                return Ok(pieces);
            }
            RecordKind::DeltaRun => {
                let Some(prev) = record.header.prev.filter(|prev| *prev < at) else {
                    return Err(corrupt(format!(
                        "delta run's previous piece {:?} is not below it",
                        record.header.prev
                    )));
                };
                pieces.push((at, record));
                at = prev;
            }
            other => {
                return Err(corrupt(format!(
                    "a {} where a page piece was expected",
                    other.name()
                )))
            }
        }
    }
}

/// The [`Error::Corrupt`] for a piece at `address` of page `pid` whose payload the access
/// method could not decode (`what` says why).
pub fn payload_error(lss: &Lss, pid: Pid, address: LssAddress, what: &str) -> Error {
    let (path, offset) = lss.locate(address);
    Error::Corrupt {
        path,
        offset,
        what: format!("LSS record at address {address} (page {pid}): {what}"),
    }
}
