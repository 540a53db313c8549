//! Flush (TSBw §II-D; Bw-tree §V-B "Page Marshalling", "Incremental Flushing"; llama-notes §2):
//! copy one captured state of a page into the LSS flush buffer and record that by a flush
//! delta installed with a CAS, never blocking on I/O.
//!
//! The order (docs/ARCHITECTURE.md, "LLAMA on storage": LLAMA's, not §V-B's):
//! 1. the caller reads the page's state S and marshals from it the piece to write (a whole
//!    page image, or the run of deltas since its previous flush, naming that piece);
//! 2. [`flush`] reserves the piece's room in the flush buffer, which fixes its address A;
//! 3. it CASes a flush delta (A, highest LSN written, annotation) onto S;
//! 4. if the CAS won, it copies the piece into the reserved room; if it lost (S is no longer
//!    the page's state), it writes a failed-flush filler there instead, which recovery skips.
//!
//! Invariants:
//! - At most one flush of a given state S wins: the winner's delta replaces S in the word,
//!   so every other CAS from S fails. A lost flush leaves only a filler in the LSS and no
//!   delta in memory, so a flush delta is never lost (installed without its piece) or doubled
//!   (two pieces for one delta).
//! - A page's pieces lie in the LSS in the order of its flush deltas in the chain: the next
//!   flush of the page reads a state that holds the winner's delta, so it reserves after the
//!   winner did, and addresses only grow.
//! - The piece written is exactly the bytes marshalled from S, whatever the page became
//!   after the CAS (§V-B: "The page state is captured at the time it is intended to be
//!   flushed").
//! - A flush delta means "written to the buffer", not "durable": the piece is stable once
//!   [`Lss::hi_stable`] passes its end ([`Lss::mk_stable`] waits for that).
//! - The reservation is held only across the CAS and the copy, so no thread holds one while
//!   it waits for anything (the buffer's contract: release before reserving again).
//!
//! LLAMA does not interpret the piece's bytes or the annotation: both are the access
//! method's (forest-bwtree's `flush.rs` marshals pages and keeps its ESL in the annotation).

use crossbeam_epoch::{Guard, Owned, Shared};
use forest_core::pause::pause_point;
use forest_core::{Error, Result};

use crate::lss::{Lss, LssAddress, RecordHeader, RecordKind};
use crate::mapping_table::{MappingTable, PageState, Pid};

/// What a flush delta records (TSBw §II-D: "the location of the page in the LSS and the
/// annotation"; Bw-tree §V-A: "The highest LSN among updates flushed is recorded in the flush
/// delta").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushDelta {
    /// Where the piece lies in the LSS.
    pub address: LssAddress,
    /// The highest LSN of the updates in the piece (0 if it holds none).
    pub lsn_high: u64,
    /// The access method's annotation, opaque to LLAMA.
    pub annotation: u64,
}

/// One marshalled piece of a page: a whole image or an incremental delta run.
#[derive(Clone, Copy, Debug)]
pub struct Piece<'a> {
    /// [`RecordKind::PageImage`] or [`RecordKind::DeltaRun`].
    pub kind: RecordKind,
    /// The lowest and highest LSN of the updates in the piece (both 0 if none).
    pub lsn_low: u64,
    pub lsn_high: u64,
    /// The page's previous piece, which a delta run continues (None for an image).
    pub prev: Option<LssAddress>,
    /// The marshalled bytes.
    pub payload: &'a [u8],
}

/// How a flush ended.
pub enum FlushOutcome<'g, T> {
    /// The flush delta is installed: `state` is the page's new state (the delta), and the
    /// piece is in the buffer at `address`.
    Installed {
        address: LssAddress,
        state: Shared<'g, T>,
    },
    /// The page's state was no longer the one marshalled (`found`: the state the CAS met,
    /// null if the PID holds none): a failed-flush filler took the reserved room at `filler`.
    Lost {
        found: Shared<'g, T>,
        filler: LssAddress,
    },
}

/// Flush(PID, in, out, annotation) (TSBw §II-D): posts `piece`, marshalled from `expected`
/// (the state of `pid` the caller read under `guard`), and installs the flush delta that
/// `make_delta` builds on top of `expected` (the delta's older state must be `expected`).
/// Never waits for I/O; blocks only when every flush buffer is in flight (see `lss::buffer`).
///
/// Errors: a piece of another kind, or an LSS that cannot take it (too large, poisoned by an
/// I/O error); then nothing was installed and the page is unchanged.
// TSBw's Flush(PID, in, out, annotation) plus the table, the store, the piece and the guard.
#[allow(clippy::too_many_arguments)]
pub fn flush<'g, T: PageState>(
    table: &MappingTable<T>,
    lss: &Lss,
    pid: Pid,
    expected: Shared<'g, T>,
    piece: &Piece<'_>,
    annotation: u64,
    make_delta: impl FnOnce(FlushDelta) -> Owned<T>,
    guard: &'g Guard,
) -> Result<FlushOutcome<'g, T>> {
    match (piece.kind, piece.prev) {
        (RecordKind::PageImage, _) => {}
        (RecordKind::DeltaRun, Some(_)) => {}
        (RecordKind::DeltaRun, None) => {
            return Err(Error::InvalidUse(format!(
                "flush of page {pid}: a delta run must name the page's previous piece"
            )))
        }
        (other, _) => {
            return Err(Error::InvalidUse(format!(
                "flush of page {pid}: a piece is a page image or a delta run, not a {}",
                other.name()
            )))
        }
    }
    if piece.lsn_low > piece.lsn_high {
        return Err(Error::InvalidUse(format!(
            "flush of page {pid}: LSN range {}..={} is inverted",
            piece.lsn_low, piece.lsn_high
        )));
    }
    // (2) Reserve: fixes the address the flush delta names.
    let mut reservation = lss.reserve(piece.payload.len())?;
    let address = reservation.address();
    // Live from its reservation (`lss/space.rs`), so the cleaner never takes a piece about
    // to be installed for dead.
    lss.note_piece(pid, address, reservation.len());
    pause_point("flush:reserved");
    // (3) CAS the flush delta onto the state the piece was marshalled from.
    let delta = make_delta(FlushDelta {
        address,
        lsn_high: piece.lsn_high,
        annotation,
    });
    match table.update_d(pid, expected, delta, guard) {
        Ok(state) => {
            pause_point("flush:installed");
            // (4) Copy the captured piece; the page may have changed since, the piece not.
            reservation.payload_mut().copy_from_slice(piece.payload);
            reservation.commit(&RecordHeader {
                kind: piece.kind,
                pid,
                lsn_low: piece.lsn_low,
                lsn_high: piece.lsn_high,
                prev: piece.prev,
            });
            if piece.kind == RecordKind::PageImage {
                lss.note_image(pid, address);
            }
            Ok(FlushOutcome::Installed { address, state })
        }
        Err((delta, found)) => {
            // Never published: the caller's delta type drops alone, as after a failed Update-D.
            drop(delta);
            reservation.fail(pid);
            lss.note_lost(pid, address);
            Ok(FlushOutcome::Lost {
                found,
                filler: address,
            })
        }
    }
}
