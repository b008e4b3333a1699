//! Replays every committed fuzz input on stable Rust: the seed corpus in
//! `fuzz/corpus/<target>/` and every past finding in
//! `fuzz/regressions/<target>/`, through the same library functions the
//! cargo-fuzz targets call (`workjournal::testing::fuzz`). How to run the
//! fuzzers themselves: `fuzz/README.md`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use workjournal::testing::fuzz;

/// Run `body` on every file of the target's corpus and regressions; fail
/// naming the file that panics. The seed corpus must not be empty.
fn replay(target: &str, body: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut seeds = 0;
    for dir in ["corpus", "regressions"] {
        let dir = root.join(dir).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for file in files {
            if file.file_name().unwrap().to_string_lossy().starts_with('.') {
                continue;
            }
            let bytes = std::fs::read(&file).unwrap();
            if catch_unwind(AssertUnwindSafe(|| body(&bytes))).is_err() {
                panic!("fuzz input {} fails again", file.display());
            }
            seeds += 1;
        }
    }
    assert!(seeds > 0, "no committed inputs for fuzz target {target}");
}

#[test]
fn decode_record_inputs_replay_cleanly() {
    replay("decode_record", fuzz::decode_record);
}

#[test]
fn ops_vs_model_inputs_replay_cleanly() {
    replay("ops_vs_model", fuzz::ops_vs_model);
}

/// Inputs committed before the item and flow controls were drawn, as they
/// were found (every input is replayed both ways).
#[test]
fn ops_vs_model_inputs_replay_cleanly_as_first_decoded() {
    replay("ops_vs_model", fuzz::ops_vs_model_legacy);
}

/// Inputs committed after the item and flow controls and before
/// cancelling, updating and the schedules were drawn, as they were found.
#[test]
fn ops_vs_model_inputs_replay_cleanly_as_decoded_with_the_controls() {
    replay("ops_vs_model", fuzz::ops_vs_model_controls);
}

#[test]
fn open_damaged_file_inputs_replay_cleanly() {
    replay("open_damaged_file", fuzz::open_damaged_file);
}

#[test]
fn crash_recovery_inputs_replay_cleanly() {
    replay("crash_recovery", fuzz::crash_recovery);
}

/// As [`ops_vs_model_inputs_replay_cleanly_as_first_decoded`], for
/// `crash_recovery`.
#[test]
fn crash_recovery_inputs_replay_cleanly_as_first_decoded() {
    replay("crash_recovery", fuzz::crash_recovery_legacy);
}

/// As [`ops_vs_model_inputs_replay_cleanly_as_decoded_with_the_controls`],
/// for `crash_recovery`.
#[test]
fn crash_recovery_inputs_replay_cleanly_as_decoded_with_the_controls() {
    replay("crash_recovery", fuzz::crash_recovery_controls);
}

#[cfg(feature = "redis")]
#[test]
fn redis_reply_inputs_replay_cleanly() {
    replay("redis_reply", fuzz::redis_reply);
}

#[cfg(any(feature = "server", feature = "remote"))]
#[test]
fn decode_request_inputs_replay_cleanly() {
    replay("decode_request", fuzz::decode_request);
}

#[test]
fn power_cut_at_every_point_of_a_short_run_recovers_a_committed_state() {
    // Walks the crash_recovery body over every fault point of one fixed
    // sequence (the fuzzer picks them at random), with two cut patterns.
    use workjournal::testing::fuzz::{CrashInput, crash_recovery_with};
    use workjournal::testing::ops::{ItemSpec, Op, Setup};
    let item = |n: u8| ItemSpec {
        flow: n,
        len: 3,
        fill: n,
        dedup: None,
        tier: n,
    };
    let ops = vec![
        Op::Add(item(0)),
        Op::Add(item(1)),
        Op::AddDelayed(item(2), 40),
        Op::Claim {
            count: 2,
            due_only: false,
        },
        Op::Ack(0),
        Op::Pause(1),
        Op::Advance(100),
        Op::Claim {
            count: 3,
            due_only: false,
        },
        Op::Retry(0, 10),
        Op::MarkDone(0, 0),
        Op::Add(item(2)),
    ];
    for fail_after in 0..60 {
        for keep_seed in [0, u64::MAX] {
            crash_recovery_with(&CrashInput {
                setup: Setup::default(),
                ops: ops.clone(),
                fail_after: Some(fail_after),
                keep_seed,
            });
        }
    }
}
