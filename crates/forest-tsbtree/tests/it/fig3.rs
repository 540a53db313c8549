//! Fig. 3 of the TSBw-tree paper, record by record: a time split at T of the page with
//! k1 (t1, t3), k2 (t2), k3 (t3), k4 (t1, t2), where t1 < t2 < T < t3.

use forest_tsbtree::{split_versions, SplitOutcome, Version};

fn v(key: &str, ts: u64) -> Version {
    (
        key.as_bytes().to_vec(),
        ts,
        Some(format!("{key}@{ts}").into_bytes()),
    )
}

// Goal: the historical page holds <k1,t1>, <k2,t2>, <k4,t1>, <k4,t2> and the current page
// <k1,t1>, <k1,t3>, <k2,t2>, <k3,t3>, <k4,t2>, as §III-A3 lists. Method: split Fig. 3's six
// records at T with the engine's split function and compare both sides exactly.
#[test]
fn time_split_reproduces_fig3() {
    let (t1, t2, split, t3) = (10, 20, 30, 40);
    let page = vec![
        v("k1", t1),
        v("k1", t3),
        v("k2", t2),
        v("k3", t3),
        v("k4", t1),
        v("k4", t2),
    ];
    let outcome = split_versions(&page, split);
    assert_eq!(
        outcome,
        SplitOutcome {
            historical: vec![v("k1", t1), v("k2", t2), v("k4", t1), v("k4", t2)],
            current: vec![
                v("k1", t1),
                v("k1", t3),
                v("k2", t2),
                v("k3", t3),
                v("k4", t2)
            ],
        }
    );
}

// Goal: a tombstone before T ends a lifetime: it goes to the historical page only, and the
// key is not in the current page. Method: split a page with k1 written and deleted before T.
#[test]
fn tombstone_before_split_time_stays_historical() {
    let page = vec![v("k1", 1), (b"k1".to_vec(), 2, None), v("k2", 3)];
    let outcome = split_versions(&page, 5);
    assert_eq!(outcome.historical, page);
    assert_eq!(outcome.current, vec![v("k2", 3)]);
}
