//! The allocator's freed-by tag (heap.rs, forest-pmwcas `Recycle::free_by`): a release stopped
//! between its policies and its durable `Free` status (pause point `pmwcas:policies-applied`)
//! while another thread allocates, links and installs the chunks it freed; a power loss then
//! (the `sim` persister) makes recovery repeat the policies of that descriptor. The repeat
//! must skip the reused chunks: the recovered tree audits clean (a chunk both linked and free
//! fails the audit).
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::Index;
use forest_pmwcas::{NoPersist, Region, Sim};

fn config() -> BzTreeConfig {
    BzTreeConfig {
        heap_bytes: 8 << 20,
        descriptor_count: 256,
        ..BzTreeConfig::with_node_size(256)
    }
}

/// The first thread at the point waits there until `open` (once per round).
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, bool)>,
    wake: Condvar,
}

// Goal: a power loss while a release sits between its policies and its durable Free status,
// after another thread reused the chunks it freed, recovers a sound tree and heap.
// Method: 8 rounds; two writers split leaves; the first release that freed memory pauses;
// the other writer goes on (reusing freed chunks) for a while; crash image; recover; audit.
#[test]
fn repeated_policy_frees_skip_reused_chunks() {
    // The pause hook is process-wide: no other test's hook meanwhile.
    let _turn = forest_core::conformance::pause::take_turn();
    let mut skipped = Vec::new();
    for round in 0..8u64 {
        let gate = Arc::new(Gate::default());
        let armed = Arc::new(AtomicBool::new(true));
        let region = Region::heap(BzTree::<Sim>::region_bytes(&config()).unwrap());
        let sim = Sim::new(&region);
        let tree = Arc::new(BzTree::create_in(region, config(), sim).unwrap());
        {
            let (gate, armed) = (Arc::clone(&gate), Arc::clone(&armed));
            let tree = Arc::downgrade(&tree);
            let before = AtomicU64::new(0);
            forest_core::pause::set_pause_hook(Some(Arc::new(move |name| {
                // Pause the first release whose policies freed memory: the heap shrank since
                // the point before.
                let Some(tree) = tree.upgrade() else { return };
                let now = tree.memory_in_use();
                let shrank = now < before.swap(now, Ordering::Relaxed);
                if name == "pmwcas:policies-applied"
                    && shrank
                    && armed.swap(false, Ordering::SeqCst)
                {
                    let mut s = gate.state.lock().unwrap();
                    s.0 = true;
                    gate.wake.notify_all();
                    while !s.1 {
                        s = gate.wake.wait(s).unwrap();
                    }
                }
            })));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let (tree, stop, done) = (Arc::clone(&tree), Arc::clone(&stop), Arc::clone(&done));
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let k = (i * 2 + t) ^ (round << 32);
                        tree.upsert(&k.to_be_bytes(), &[7u8; 24]).unwrap();
                        if i % 3 == 2 {
                            tree.remove(&(k - 4).to_be_bytes());
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        {
            let mut s = gate.state.lock().unwrap();
            while !s.0 {
                s = gate
                    .wake
                    .wait_timeout(s, Duration::from_secs(20))
                    .unwrap()
                    .0;
            }
        }
        let at_pause = done.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(30));
        let image = tree.crash_image(round);
        let after = done.load(Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        {
            let mut s = gate.state.lock().unwrap();
            s.1 = true;
            gate.wake.notify_all();
        }
        for w in writers {
            w.join().unwrap();
        }
        forest_core::pause::set_pause_hook(None);
        drop(tree);
        let recovered = BzTree::open_in(
            Region::from_image(&image),
            config(),
            NoPersist,
            Path::new("<image>"),
        )
        .unwrap_or_else(|e| panic!("round {round}: recovery: {e}"));
        recovered
            .audit()
            .unwrap_or_else(|e| panic!("round {round}: audit after recovery: {e}"));
        let report = recovered.open_report();
        assert!(
            report.pool.descriptors_in_flight > 0,
            "round {round}: the paused release's descriptor is recovered"
        );
        // The repeats happen when what recovery left is finished (the audit finishes it).
        skipped.push((at_pause, after, recovered.repeat_frees_skipped()));
    }
    eprintln!(
        "reuse race: (operations at the pause, at the crash, repeat frees skipped) {skipped:?}"
    );
    assert!(
        skipped.iter().filter(|&&(_, _, s)| s > 0).count() >= 4,
        "most rounds repeated a free done before the crash"
    );
}
