//! Review rev-mscan2 (session 16) of the kept-layer-stack / per-slot-validation scan: scans
//! whose every step a writer may interleave with, deterministically. A writer thread applies
//! a few random inserts and removes of "churn" keys each time the scanning thread reaches a
//! scan pause point (features `pause-points`: scan:before-copy, scan:layer-slot-read,
//! scan:copy-failed, scan:next-node, scan:prev-node) or, for `scan_pinned`, each time its
//! visitor is called (so between a node's permutation read and its next slot's read, and
//! between a layer-1 record and the return to the layer-0 node that links it). The scanning
//! thread waits for the writer meanwhile (the schedule of a writer that ran while the scanner
//! was slow). Keys: lengths 0..=33 over a 4-letter alphabet (0x00, 'a', 'b', 0xff), so keys
//! share 8- and 16-byte prefixes, are prefixes of each other, end in zero bytes, and build
//! layers 1..4 that come and go.
//!
//! Checked for each scan: strictly ordered, within its bounds, no key never written, each
//! value the key's own, and every key present throughout (the stable keys and the churn keys
//! present at the start and not touched during the scan) handed out.
//!
//! Run: `cargo test -p forest-masstree --features pause-points --test it -- rev_mscan2::`

use std::collections::BTreeSet;
use std::ops::{Bound, ControlFlow};
use std::sync::mpsc;
use std::sync::Arc;

use forest_core::{Index, Order};
use forest_masstree::{Masstree, Masstree10x8, MasstreeConfig, SuffixStorage};

/// xorshift64 (also `scan_far_bound`'s).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const LENS: [usize; 16] = [0, 1, 3, 7, 8, 8, 9, 12, 16, 16, 17, 20, 24, 25, 31, 33];
const ALPHABET: [u8; 4] = [0x00, b'a', b'b', 0xff];

fn random_key(r: &mut Rng) -> Vec<u8> {
    let len = LENS[r.below(LENS.len() as u64) as usize];
    // Long runs of one letter, so keys share whole slices.
    let mut k = Vec::with_capacity(len);
    let mut c = ALPHABET[r.below(4) as usize];
    for _ in 0..len {
        if r.below(5) == 0 {
            c = ALPHABET[r.below(4) as usize];
        }
        k.push(c);
    }
    k
}

fn value_of(k: &[u8]) -> Vec<u8> {
    let mut v = vec![b'<'];
    v.extend(k.iter().rev());
    v.push(b'>');
    v
}

/// The writer's side: applies batches of (insert?, key) and acknowledges.
struct Writer {
    ops: mpsc::Sender<Vec<(bool, Vec<u8>)>>,
    done: mpsc::Receiver<()>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn new(t: Arc<dyn Index>) -> Self {
        let (ops, rx) = mpsc::channel::<Vec<(bool, Vec<u8>)>>();
        let (tx, done) = mpsc::channel();
        let handle = std::thread::spawn(move || {
            for batch in rx {
                for (insert, k) in batch {
                    if insert {
                        t.upsert(&k, &value_of(&k)).expect("within limits");
                    } else {
                        t.remove(&k);
                    }
                }
                if tx.send(()).is_err() {
                    return;
                }
            }
        });
        Self {
            ops,
            done,
            handle: Some(handle),
        }
    }
    fn apply(&self, batch: Vec<(bool, Vec<u8>)>) {
        self.ops.send(batch).expect("writer alive");
        self.done.recv().expect("writer alive");
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let (tx, _) = mpsc::channel();
        self.ops = tx;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The scanning side's model of the churn keys and the mutations still allowed.
struct Mutator {
    rng: Rng,
    churn: Vec<Vec<u8>>,
    present: BTreeSet<Vec<u8>>,
    touched: BTreeSet<Vec<u8>>,
    ever: BTreeSet<Vec<u8>>,
    budget: usize,
    writer: Writer,
}

impl Mutator {
    /// Maybe a few writes: runs of inserts (splits, new layers) or removes (emptied nodes,
    /// removed layers), of keys near one another (a random churn key and its neighbours).
    fn maybe_mutate(&mut self) {
        if self.budget == 0 || self.rng.below(3) == 0 {
            return;
        }
        self.budget -= 1;
        let n = self.churn.len();
        let at = self.rng.below(n as u64) as usize;
        let run = 1 + self.rng.below(24) as usize;
        let insert = self.rng.below(2) == 0;
        let mut batch = Vec::new();
        for k in self.churn[at..(at + run).min(n)].iter() {
            self.touched.insert(k.clone());
            if insert {
                self.present.insert(k.clone());
                self.ever.insert(k.clone());
            } else {
                self.present.remove(k);
            }
            batch.push((insert, k.clone()));
        }
        self.writer.apply(batch);
    }
}

fn in_bounds(k: &[u8], lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    (match lower {
        Bound::Unbounded => true,
        Bound::Included(l) => k >= l,
        Bound::Excluded(l) => k > l,
    }) && (match upper {
        Bound::Unbounded => true,
        Bound::Included(u) => k <= u,
        Bound::Excluded(u) => k < u,
    })
}

fn bound_of<'a>(r: &mut Rng, k: &'a [u8]) -> Bound<&'a [u8]> {
    match r.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(k),
        _ => Bound::Excluded(k),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Driver {
    /// Writes at the scan's pause points (needs the `pause-points` feature).
    #[cfg_attr(not(feature = "pause-points"), allow(dead_code))]
    PausePoints,
    /// Writes from `scan_pinned`'s visitor, as each record is reached.
    PinnedVisitor,
}

std::thread_local! {
    static MUTATOR: std::cell::RefCell<Option<Mutator>> = const { std::cell::RefCell::new(None) };
}

const SCANNER: &str = "rev-mscan2-scanner";

#[cfg(feature = "pause-points")]
fn install_hook() {
    forest_core::pause::set_pause_hook(Some(Arc::new(|name: &'static str| {
        if !name.starts_with("scan:") || std::thread::current().name() != Some(SCANNER) {
            return;
        }
        MUTATOR.with(|m| {
            if let Ok(mut m) = m.try_borrow_mut() {
                if let Some(m) = m.as_mut() {
                    m.maybe_mutate();
                }
            }
        });
    })));
}

/// `seeds` runs of one checked scan each, on fresh trees from `make`.
fn run_scans(make: &dyn Fn() -> Arc<dyn Index>, driver: Driver, seeds: std::ops::Range<u64>) {
    #[cfg(feature = "pause-points")]
    let _turn = forest_core::conformance::pause::take_turn();
    #[cfg(feature = "pause-points")]
    if driver == Driver::PausePoints {
        install_hook();
    }
    for seed in seeds {
        let t = make();
        let seed_copy = seed;
        let t2 = Arc::clone(&t);
        let outcome = std::thread::Builder::new()
            .name(SCANNER.into())
            .spawn(move || one_scan(t2, driver, seed_copy))
            .expect("spawn")
            .join();
        if let Err(e) = outcome {
            #[cfg(feature = "pause-points")]
            forest_core::pause::set_pause_hook(None);
            std::panic::resume_unwind(e);
        }
        drop(t);
    }
    #[cfg(feature = "pause-points")]
    forest_core::pause::set_pause_hook(None);
}

fn one_scan(t: Arc<dyn Index>, driver: Driver, seed: u64) {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let mut stable = BTreeSet::new();
    let mut churn = BTreeSet::new();
    for _ in 0..400 {
        let k = random_key(&mut r);
        if r.below(3) == 0 {
            stable.insert(k);
        } else {
            churn.insert(k);
        }
    }
    let churn: Vec<Vec<u8>> = churn.difference(&stable).cloned().collect();
    for k in &stable {
        t.upsert(k, &value_of(k)).expect("within limits");
    }
    let mut present = BTreeSet::new();
    for k in &churn {
        if r.below(2) == 0 {
            t.upsert(k, &value_of(k)).expect("within limits");
            present.insert(k.clone());
        }
    }
    let order = if r.below(2) == 0 {
        Order::Ascending
    } else {
        Order::Descending
    };
    let (lk, uk) = (random_key(&mut r), random_key(&mut r));
    let (lk, uk) = if lk <= uk { (lk, uk) } else { (uk, lk) };
    let lower = bound_of(&mut r, &lk);
    let upper = bound_of(&mut r, &uk);
    let ever = present.clone();
    MUTATOR.with(|m| {
        *m.borrow_mut() = Some(Mutator {
            rng: Rng(r.next() | 1),
            churn: churn.clone(),
            present: present.clone(),
            touched: BTreeSet::new(),
            ever,
            budget: 60,
            writer: Writer::new(Arc::clone(&t)),
        })
    });
    let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    {
        let mut visit = |k: &[u8], v: &[u8]| {
            got.push((k.to_vec(), v.to_vec()));
            if driver == Driver::PinnedVisitor {
                MUTATOR.with(|m| m.borrow_mut().as_mut().map(|m| m.maybe_mutate()));
            }
            ControlFlow::Continue(())
        };
        match driver {
            Driver::PausePoints => t.scan(lower, upper, order, &mut visit),
            Driver::PinnedVisitor => t.scan_pinned(lower, upper, order, &mut visit),
        }
    }
    let m = MUTATOR.with(|m| m.borrow_mut().take()).expect("mutator");
    let ctx = format!(
        "seed {seed} {order:?} lower {lower:?} upper {upper:?} writes {}",
        60 - m.budget
    );
    for w in got.windows(2) {
        let ok = match order {
            Order::Ascending => w[0].0 < w[1].0,
            Order::Descending => w[0].0 > w[1].0,
        };
        assert!(
            ok,
            "{ctx}: out of order or repeated: {:?} then {:?}",
            w[0].0, w[1].0
        );
    }
    for (k, v) in &got {
        assert!(in_bounds(k, lower, upper), "{ctx}: {k:?} out of bounds");
        assert!(
            stable.contains(k) || m.ever.contains(k),
            "{ctx}: {k:?} was never written"
        );
        assert_eq!(v, &value_of(k), "{ctx}: {k:?} with another value");
    }
    let got_keys: BTreeSet<&Vec<u8>> = got.iter().map(|(k, _)| k).collect();
    let throughout = stable
        .iter()
        .chain(present.iter().filter(|k| !m.touched.contains(*k)));
    let missed: Vec<&Vec<u8>> = throughout
        .filter(|k| in_bounds(k, lower, upper) && !got_keys.contains(k))
        .collect();
    assert!(
        missed.is_empty(),
        "{ctx}: missed keys present throughout: {missed:?}"
    );
}

/// Seeds per config: 300, or `REV_MSCAN2_SEEDS` (a longer soak).
fn seeds() -> std::ops::Range<u64> {
    let n = std::env::var("REV_MSCAN2_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    0..n
}

/// A named way to make a fresh tree.
type MakeTree = (&'static str, Box<dyn Fn() -> Arc<dyn Index>>);

fn configs() -> Vec<MakeTree> {
    let narrow = |c: MasstreeConfig| -> Arc<dyn Index> { Arc::new(Masstree10x8::with_widths(c)) };
    vec![
        (
            "default",
            Box::new(|| Arc::new(Masstree::new()) as Arc<dyn Index>),
        ),
        ("10x8", Box::new(move || narrow(MasstreeConfig::default()))),
        (
            "10x8 no permuter",
            Box::new(move || {
                narrow(MasstreeConfig {
                    permuter: false,
                    ..Default::default()
                })
            }),
        ),
        (
            "10x8 layers",
            Box::new(move || {
                narrow(MasstreeConfig {
                    suffix: SuffixStorage::Layers,
                    ..Default::default()
                })
            }),
        ),
        (
            "default separate",
            Box::new(|| {
                Arc::new(Masstree::with_config(MasstreeConfig {
                    suffix: SuffixStorage::Separate,
                    ..Default::default()
                })) as Arc<dyn Index>
            }),
        ),
    ]
}

#[test]
fn pinned_scans_with_writes_between_slot_reads() {
    // Goal: a write between a node's permutation read and its next slot's read (and between
    // a layer-1 record and the resume of its layer-0 node) never makes a scan hand out a key
    // never present, a wrong value, a repeat, a misordered key, or miss a key present
    // throughout. Method: scan_pinned over random layered trees; after each record the
    // visitor waits while a writer thread applies a run of inserts or removes.
    for (name, make) in configs() {
        eprintln!("config {name}");
        run_scans(&*make, Driver::PinnedVisitor, seeds());
    }
}

#[cfg(feature = "pause-points")]
#[test]
fn scans_with_writes_at_every_scan_pause_point() {
    // Goal: as above for the batched scan, the writes placed at its pause points (before a
    // node's permutation read, between a layer slot's key read and its link read, after a
    // failed validation, after moving to a neighbour). Method: as above, the writes made by a
    // pause hook on the scanning thread.
    for (name, make) in configs() {
        eprintln!("config {name}");
        run_scans(&*make, Driver::PausePoints, seeds());
    }
}

#[test]
fn scans_of_deep_layers_with_bounds_inside_them() {
    // Goal: keys of up to 16 KiB (2,048 layers) that share long prefixes and are prefixes of
    // one another come back in order, within bounds of every kind that fall inside the deep
    // layers, in both orders, batched and pinned, with their own values. Method: 60 keys built
    // from a 16 KiB base cut at lengths around slice boundaries and varied in their last
    // bytes; every pair of keys (and a few cut points) as bounds, compared with a sorted model.
    let base: Vec<u8> = (0..forest_core::KEY_BYTES_MAX)
        .map(|i| b'a' + (i / 8 % 3) as u8)
        .collect();
    let mut keys = BTreeSet::new();
    for len in [
        0usize, 1, 7, 8, 9, 15, 16, 17, 800, 801, 807, 808, 809, 8000, 16_375, 16_376, 16_383,
        16_384,
    ] {
        let k = base[..len].to_vec();
        keys.insert(k.clone());
        if len > 0 {
            for last in [0u8, 0xff] {
                let mut v = k.clone();
                v[len - 1] = last;
                keys.insert(v);
            }
        }
    }
    let keys: Vec<Vec<u8>> = keys.into_iter().collect();
    for (name, make) in configs()
        .into_iter()
        .filter(|(n, _)| ["default", "10x8 layers"].contains(n))
    {
        let t = make();
        for k in &keys {
            t.upsert(k, &value_of(k)).expect("within limits");
        }
        let mut bounds: Vec<&[u8]> = keys.iter().map(|k| &k[..]).step_by(4).collect();
        bounds.push(&base[..812]);
        bounds.push(&base[..16_380]);
        for lo in &bounds {
            for hi in &bounds {
                for (lower, upper) in [
                    (Bound::Included(*lo), Bound::Excluded(*hi)),
                    (Bound::Excluded(*lo), Bound::Included(*hi)),
                ] {
                    let want: Vec<&Vec<u8>> =
                        keys.iter().filter(|k| in_bounds(k, lower, upper)).collect();
                    for order in [Order::Ascending, Order::Descending] {
                        for pinned in [false, true] {
                            let mut got = Vec::new();
                            let mut visit = |k: &[u8], v: &[u8]| {
                                assert_eq!(v, value_of(k));
                                got.push(k.to_vec());
                                ControlFlow::Continue(())
                            };
                            if pinned {
                                t.scan_pinned(lower, upper, order, &mut visit);
                            } else {
                                t.scan(lower, upper, order, &mut visit);
                            }
                            if order == Order::Descending {
                                got.reverse();
                            }
                            let got: Vec<&Vec<u8>> = got.iter().collect();
                            assert!(
                                got == want,
                                "{name} {order:?} pinned {pinned}: bounds of {} and {} bytes",
                                lo.len(),
                                hi.len()
                            );
                        }
                    }
                }
            }
        }
    }
}
