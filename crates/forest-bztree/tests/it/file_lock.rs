//! The file's lock and the store words (`file` module doc): one opener at a time, the
//! second told the file and the holder's pid; the store LSN and pending words persist.

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::{Error, Index};
use forest_pmwcas::{Clwb, Msync};

fn config() -> BzTreeConfig {
    BzTreeConfig {
        heap_bytes: 16 << 20,
        descriptor_count: 256,
        ..BzTreeConfig::with_node_size(256)
    }
}

// Goal: a second open of a locked file fails at once, naming the file and the holder's pid,
// in this process too; after the holder drops, it opens. Method: open twice, drop, reopen.
#[test]
fn second_open_names_the_file_and_the_holder() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("tree.pool");
    let tree = BzTree::open(&path, config(), Clwb::detect()).expect("open");
    tree.upsert(b"k", b"v").expect("upsert");
    let err = BzTree::open(&path, config(), Msync).expect_err("locked");
    match &err {
        Error::Io {
            path: p,
            op,
            source,
        } => {
            assert_eq!(p, &path);
            assert_eq!(*op, "lock");
            assert_eq!(source.kind(), std::io::ErrorKind::WouldBlock);
        }
        other => panic!("expected a lock error, got {other}"),
    }
    let text = err.to_string();
    assert!(text.contains("tree.pool"), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    drop(tree);
    let tree = BzTree::open(&path, config(), Msync).expect("reopen after drop");
    let mut out = Vec::new();
    assert!(tree.get(b"k", &mut out) && out == b"v");
}

// Goal: the store words start at 0 and keep what was set across a reopen. Method: set,
// drop, reopen, read.
#[test]
fn store_words_persist() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("tree.pool");
    let tree = BzTree::open(&path, config(), Msync).expect("open");
    assert_eq!((tree.store_lsn(), tree.store_pending()), (0, 0));
    tree.set_store_lsn(41);
    tree.set_store_pending(42);
    drop(tree);
    let tree = BzTree::open(&path, config(), Msync).expect("reopen");
    assert_eq!((tree.store_lsn(), tree.store_pending()), (41, 42));
}

// Goal: `peek_header` reads the header words with no open (no lock, no stamping): a missing
// file is None, a zeroed one has no magic, a tree's shows its persist mode, this boot and
// the store words, and reading it changes nothing. Method: peek at each state, also while
// the tree is open (its lock does not stop a plain read).
#[test]
fn peek_header_reads_the_words_without_opening() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("tree.pool");
    assert_eq!(forest_bztree::peek_header(&path).expect("peek"), None);
    std::fs::write(&path, vec![0u8; 4096]).expect("zeros");
    let zeroed = forest_bztree::peek_header(&path)
        .expect("peek")
        .expect("a file");
    assert!(!zeroed.magic && !zeroed.same_boot, "{zeroed:?}");
    std::fs::remove_file(&path).expect("remove");
    let tree = BzTree::open(&path, config(), Msync).expect("open");
    tree.set_store_lsn(7);
    tree.set_store_pending(9);
    let open = forest_bztree::peek_header(&path)
        .expect("peek")
        .expect("a file");
    assert!(open.magic, "{open:?}");
    assert_eq!(open.persist, "msync");
    assert_eq!((open.store_lsn, open.store_pending), (7, 9));
    let on_linux = std::path::Path::new("/proc/sys/kernel/random/boot_id").exists();
    assert_eq!(open.same_boot, on_linux);
    drop(tree);
    let again = forest_bztree::peek_header(&path)
        .expect("peek")
        .expect("a file");
    assert_eq!(again, open);
}
