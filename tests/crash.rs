//! Crash safety of the embedded backend, checked by killing real processes
//! (SPEC section 4: after any crash every acknowledged add is still there,
//! every acknowledged ack stays acked, no item is in two places).

use std::time::Duration;

use workjournal::{ClaimFrom, Config, EmbeddedQueue, Location, NewItem, WorkQueue};

#[tokio::test]
async fn locations_names_every_item_once() {
    let dir = tempfile::tempdir().unwrap();
    let q = EmbeddedQueue::open(dir.path().join("q.redb"), Config::default())
        .await
        .unwrap();
    let a = q.add(NewItem::new(b"a".to_vec())).await.unwrap().id;
    let b = q
        .add(NewItem::new(b"b".to_vec()).flow("f"))
        .await
        .unwrap()
        .id;
    let c = q
        .add_delayed(NewItem::new(b"c".to_vec()), u64::MAX / 2)
        .await
        .unwrap()
        .id;
    let d = q.add(NewItem::new(b"d".to_vec())).await.unwrap().id;
    let claimed = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.dead_letter(claimed[1].receipt, "test").await.unwrap();
    let e = q.add(NewItem::new(b"e".to_vec())).await.unwrap().id;
    let got = q.locations().await.unwrap();
    let want = [
        (a, vec![Location::Pending]),
        (b, vec![Location::DeadLetter]),
        (c, vec![Location::Delayed]),
        (d, vec![Location::Backlog]),
        (e, vec![Location::Backlog]),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    q.ack(claimed[0].receipt).await.unwrap();
    assert!(!q.locations().await.unwrap().contains_key(&a));
}
