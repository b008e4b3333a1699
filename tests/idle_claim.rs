//! A claim blocked on an empty embedded queue sleeps (alone in its test
//! binary, so that the process's CPU time is this test's alone).

use std::time::Duration;

use workjournal::{ClaimFrom, Config, EmbeddedQueue, WorkQueue};

/// User plus system CPU time of this process, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, the 12th and 13th after it.
    let after = stat.rsplit(')').next().unwrap();
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Regression: every empty claim counted as a write and woke every waiting
/// claim, itself included, so one blocked claim kept the writer thread and
/// a tokio worker busy for its whole wait (1.5 s of CPU in a 2 s wait).
#[tokio::test]
async fn a_blocked_claim_on_an_empty_queue_does_not_spin() {
    let dir = tempfile::tempdir().unwrap();
    let q = EmbeddedQueue::open(dir.path().join("q.redb"), Config::default())
        .await
        .unwrap();
    let before = cpu_ticks();
    let got = q
        .claim(1, Duration::from_secs(2), ClaimFrom::All)
        .await
        .unwrap();
    let used = cpu_ticks() - before;
    assert!(got.is_empty());
    // Clock ticks are 1/100 s on Linux: a spinning claim used about 150 of
    // them; a sleeping one uses a handful at most.
    assert!(used < 50, "a blocked claim used {used} ticks of CPU in 2 s");
    q.close().await.unwrap();
}
