//! Conformance cases of SPEC 3, dead letters: order, redrive, the cap and
//! purge.

use std::time::Duration;

use super::{Factory, T0, add, claim, claim_one, env, env_with, lease_lost, payloads};
use crate::config::Config;
use crate::item::{DeadLetter, RetryOutcome};
use crate::queue::WorkQueue;

/// dead_letters lists newest first, at most count.
pub async fn dead_letters_are_newest_first(f: &dyn Factory) {
    let e = env(f).await;
    for p in ["a", "b", "c"] {
        add(&e.q, p).await;
    }
    for c in claim(&e.q, 3).await {
        e.clock.advance(Duration::from_millis(1));
        e.q.dead_letter(c.receipt, "no").await.unwrap();
    }
    let dl = e.q.dead_letters(2).await.unwrap();
    assert_eq!(
        dl.iter()
            .map(|d| d.item.payload.clone())
            .collect::<Vec<_>>(),
        vec![b"c".to_vec(), b"b".to_vec()]
    );
}

/// redrive moves a dead letter back to the backlog tail with deliveries 0;
/// an old receipt stays void.
pub async fn redrive_resets_deliveries(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.q.dead_letter(c.receipt, "oops").await.unwrap();
    add(&e.q, "y").await;
    assert!(e.q.redrive(id).await.unwrap());
    assert!(!e.q.redrive(id).await.unwrap());
    assert!(!e.q.redrive(999).await.unwrap());
    assert_eq!(e.q.stats().await.unwrap().dead_letters, 0);
    let again = claim(&e.q, 2).await;
    assert_eq!(payloads(&again), vec!["y", "x"]);
    assert_eq!(again[1].item.id, id);
    assert_eq!(again[1].item.deliveries, 1);
    // The receipt from before the dead-lettering names delivery 1 as well,
    // but it is not this claim.
    lease_lost(e.q.ack(c.receipt).await, c.receipt);
    e.q.ack(again[1].receipt).await.unwrap();
}

/// Past dead_letter_cap the oldest dead letters are dropped.
pub async fn dead_letter_cap_drops_the_oldest(f: &dyn Factory) {
    let e = env_with(f, Config::default().dead_letter_cap(2)).await;
    for p in ["a", "b", "c"] {
        add(&e.q, p).await;
    }
    for c in claim(&e.q, 3).await {
        e.q.dead_letter(c.receipt, "no").await.unwrap();
    }
    let dl = e.q.dead_letters(10).await.unwrap();
    assert_eq!(dl.len(), 2);
    assert_eq!(dl[1].item.payload, b"b");
    assert!(!e.q.redrive(1).await.unwrap());
    assert_eq!(e.q.stats().await.unwrap().dead_letters, 2);
}

/// Dead letters dropped past dead_letter_cap are counted in
/// `Stats::dead_letters_dropped`, by every way an item is dead-lettered
/// (dead_letter, retry and reclaim past max_deliveries), and the count
/// survives a purge: a drop is never silent.
pub async fn dead_letter_cap_counts_what_it_drops(f: &dyn Factory) {
    let e = env_with(f, Config::default().dead_letter_cap(1).max_deliveries(1)).await;
    assert_eq!(e.q.stats().await.unwrap().dead_letters_dropped, 0);
    for p in ["a", "b", "c", "d"] {
        add(&e.q, p).await;
    }
    let mut held = claim(&e.q, 4).await;
    let last = held.pop().unwrap();
    for c in &held[..2] {
        e.q.dead_letter(c.receipt, "no").await.unwrap();
    }
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.dead_letters, s.dead_letters_dropped), (1, 1));
    // retry past max_deliveries dead-letters, and drops the older one.
    assert_eq!(
        e.q.retry(held[2].receipt, T0).await.unwrap(),
        RetryOutcome::DeadLettered
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.dead_letters, s.dead_letters_dropped), (1, 2));
    // reclaim past max_deliveries too.
    e.clock.advance(Duration::from_secs(60));
    assert!(
        e.q.reclaim(Duration::from_secs(1), 4)
            .await
            .map(|r| r.claimed)
            .unwrap()
            .is_empty()
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.dead_letters, s.dead_letters_dropped), (1, 3));
    let kept = e.q.dead_letters(10).await.unwrap();
    assert_eq!(ids_of_dead(&kept), vec![last.item.id]);
    // A purge deletes what was kept; the drops stay counted.
    assert_eq!(e.q.purge_dead_letters().await.unwrap(), 1);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.dead_letters, s.dead_letters_dropped), (0, 3));
}

fn ids_of_dead(dead: &[DeadLetter]) -> Vec<u64> {
    dead.iter().map(|d| d.item.id).collect()
}

/// purge_dead_letters deletes them all and says how many.
pub async fn purge_dead_letters_deletes_all(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "a").await;
    add(&e.q, "b").await;
    for c in claim(&e.q, 2).await {
        e.q.dead_letter(c.receipt, "no").await.unwrap();
    }
    assert_eq!(e.q.purge_dead_letters().await.unwrap(), 2);
    assert_eq!(e.q.purge_dead_letters().await.unwrap(), 0);
    assert!(e.q.dead_letters(10).await.unwrap().is_empty());
    assert!(!e.q.redrive(1).await.unwrap());
}
