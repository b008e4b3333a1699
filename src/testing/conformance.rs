//! The conformance suite: one async function per rule of SPEC sections 3 and
//! 4, each taking a [`Factory`] so that every backend runs the very same
//! scenario. `tests/conformance.rs` expands [`conformance_tests!`](crate::conformance_tests)
//! into one `#[tokio::test]` per case and backend.
//!
//! Every case drives time with a [`ManualClock`]; `wait` of a blocking claim
//! is real time, kept short.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use super::{Factory, Subject};
use crate::clock::ManualClock;
use crate::config::Config;
use crate::error::Error;
use crate::item::{ClaimFrom, Claimed, NewItem, Receipt};
use crate::outcome::{Outcome, OutcomeKind};
use crate::queue::{BoxQueue, WorkQueue};

/// The manual clock's starting time, ms since the Unix epoch.
pub const T0: u64 = 1_700_000_000_000;

const NOW: Duration = Duration::ZERO;

// One file per topic; the case list is `conformance_case_list!` below.
mod adding;
mod browse;
mod cancel;
mod claiming;
mod clock_steps;
mod control;
mod dead_letters;
mod delivery;
mod finishing;
mod flows;
mod history;
mod limits;
mod looking;
mod outcomes;
mod priority;
mod recovery;
mod schedules;
mod timers;
mod update;

pub use adding::*;
pub use browse::*;
pub use cancel::*;
pub use claiming::*;
pub use clock_steps::*;
pub use control::*;
pub use dead_letters::*;
pub use delivery::*;
pub use finishing::*;
pub use flows::*;
pub use history::*;
pub use limits::*;
pub use looking::*;
pub use outcomes::*;
pub use priority::*;
pub use recovery::*;
pub use schedules::*;
pub use timers::*;
pub use update::*;

struct Env {
    q: BoxQueue,
    clock: ManualClock,
    _subject: Subject,
}

async fn env_with(f: &dyn Factory, config: Config) -> Env {
    let clock = ManualClock::new(T0);
    let subject = f.make(config.clock(clock.clone())).await;
    Env {
        q: subject.queue.clone(),
        clock,
        _subject: subject,
    }
}

async fn env(f: &dyn Factory) -> Env {
    env_with(f, Config::default()).await
}

fn item(payload: &str) -> NewItem {
    NewItem::new(payload.as_bytes().to_vec())
}

fn in_flow(payload: &str, flow: &str) -> NewItem {
    item(payload).flow(flow)
}

async fn add(q: &BoxQueue, payload: &str) -> u64 {
    q.add(item(payload)).await.unwrap().id
}

async fn claim(q: &BoxQueue, n: usize) -> Vec<Claimed> {
    q.claim(n, NOW, ClaimFrom::All).await.unwrap()
}

async fn claim_one(q: &BoxQueue) -> Claimed {
    let mut v = claim(q, 1).await;
    assert_eq!(v.len(), 1, "expected one item to claim");
    v.remove(0)
}

fn ids(claimed: &[Claimed]) -> Vec<u64> {
    claimed.iter().map(|c| c.item.id).collect()
}

fn payloads(claimed: &[Claimed]) -> Vec<String> {
    claimed
        .iter()
        .map(|c| String::from_utf8_lossy(&c.item.payload).into_owned())
        .collect()
}

/// The payloads `peek(n)` shows, in its order.
async fn peek_payloads(q: &BoxQueue, n: usize) -> Vec<String> {
    q.peek(n)
        .await
        .unwrap()
        .iter()
        .map(|i| String::from_utf8_lossy(&i.payload).into_owned())
        .collect()
}

/// `r` is `LeaseLost` naming every field of `lost` (SPEC section 5): the
/// lease too, since a redrive repeats (id, delivery).
fn lease_lost<T: std::fmt::Debug>(r: Result<T, Error>, lost: Receipt) {
    match r {
        Err(Error::LeaseLost {
            id,
            delivery,
            lease,
        }) if (id, delivery, lease) == (lost.id, lost.delivery, lost.lease) => {}
        other => panic!("expected LeaseLost naming {lost:?}, got {other:?}"),
    }
}

fn invalid<T: std::fmt::Debug>(r: Result<T, Error>) {
    match r {
        Err(Error::InvalidInput(_)) => {}
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

/// An hour, the size of the clock steps (SPEC 3) the cases take.
const HOUR: Duration = Duration::from_secs(3600);

/// Set `clock` back by `by`, as an NTP step would.
fn step_back(clock: &ManualClock, by: Duration) {
    let now = crate::clock::Clock::now_ms(clock);
    clock.set(now.saturating_sub(crate::config::ms(by)));
}

/// The outcome of item `id` acked at `at_ms` with `result`.
fn done(id: u64, result: &[u8], at_ms: u64) -> Option<Outcome> {
    Some(Outcome {
        id,
        kind: OutcomeKind::Done {
            result: result.to_vec(),
        },
        at_ms,
    })
}

/// The outcome of item `id` dead-lettered at `at_ms` for `reason`.
fn dead(id: u64, reason: &str, at_ms: u64) -> Option<Outcome> {
    Some(Outcome {
        id,
        kind: OutcomeKind::DeadLettered {
            reason: reason.to_string(),
        },
        at_ms,
    })
}

/// Run every case against `factory`, in order: the same list
/// [`conformance_tests!`](crate::conformance_tests) expands.
pub async fn run_all(factory: &dyn Factory) {
    macro_rules! run {
        ($($case:ident),* $(,)?) => { $( $case(factory).await; )* };
    }
    crate::conformance_case_list!(run);
}

/// The list of cases, handed to a callback macro.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_case_list {
    ($($callback:ident)::+ $(, $arg:expr)?) => {
        $($callback)::+! {
            $($arg;)?
            add_assigns_increasing_ids,
            add_batch_returns_ids_in_order,
            add_batch_is_all_or_none,
            payload_over_limit_is_invalid_input,
            identical_payloads_stay_two_items,
            dedup_key_within_window_is_a_duplicate,
            dedup_window_expires,
            full_refuses_and_drops_nothing,
            add_delayed_waits_for_not_before,
            timers_never_fire_early_under_racing_promoters,
            add_delayed_in_the_past_is_due_at_once,
            next_due_is_the_soonest_timer,
            promote_orders_by_not_before_then_id,
            due_lane_before_backlog,
            claim_due_only_skips_backlog,
            claim_never_exceeds_count,
            claim_count_zero_is_invalid,
            claim_counts_delivery_and_sets_claimed_at,
            backlog_is_fifo,
            blocking_claim_is_woken_by_add,
            blocking_claim_is_woken_by_timer,
            blocking_claim_times_out_empty,
            claim_parks_items_of_paused_flows,
            waiting_claim_obeys_a_later_pause,
            concurrent_claims_never_share_an_item,
            ack_removes_for_good_and_second_ack_is_lease_lost,
            ack_batch_counts_only_current_receipts,
            ack_batch_acks_a_current_receipt_behind_a_lost_one,
            touch_extends_the_lease,
            claim_age_counts_from_the_claim_and_touch_age_from_the_heartbeat,
            touch_with_a_lost_receipt_changes_nothing,
            retry_moves_to_delayed_keeping_id,
            retry_past_max_deliveries_dead_letters,
            dead_letter_records_reason_and_time,
            stale_receipt_after_reclaim_is_lease_lost_everywhere,
            reclaim_takes_idle_claims_oldest_first,
            reclaim_counts_a_delivery_and_issues_a_new_receipt,
            reclaim_past_max_deliveries_dead_letters,
            repeated_reclaims_reach_stale_items_behind_fresh_ones,
            reclaim_parks_items_of_paused_flows,
            resume_requeues_parked_oldest_first,
            park_moves_a_pending_item_to_parked,
            flow_operations_refuse_the_default_flow,
            malformed_flow_names_are_invalid_input,
            step_runs_one_parked_item,
            clear_flow_deletes_parked_items_and_pause,
            paused_flows_are_listed_sorted,
            done_marker_lives_for_its_ttl,
            dead_letters_are_newest_first,
            redrive_resets_deliveries,
            dead_letter_cap_drops_the_oldest,
            dead_letter_cap_counts_what_it_drops,
            release_gives_the_delivery_back,
            clock_step_back_keeps_a_retry_delay,
            clock_step_back_keeps_a_claims_idle_time,
            clock_step_back_keeps_an_outcomes_ttl,
            clock_step_forward_makes_timers_due_early,
            purge_dead_letters_deletes_all,
            stats_count_every_state,
            peek_does_not_claim,
            backlog_by_flow_counts_the_sample,
            list_shows_each_state,
            list_pages_cover_the_state_once,
            list_orders_each_state,
            list_searches_payload_text,
            find_names_the_state,
            list_and_find_show_items_held_by_a_flow_limit,
            now_reads_the_queue_clock,
            item_is_handed_out_again_only_after_retry_or_reclaim,
            id_is_stable_through_every_move,
            claim_with_an_endless_wait_does_not_overflow,
            calls_after_close_are_closed,
            result_is_kept_for_result_ttl_then_expires,
            a_zero_result_ttl_keeps_no_progress_or_chunks,
            result_over_limit_is_invalid_input,
            wait_outcome_is_woken_by_an_ack,
            wait_outcome_times_out_empty,
            dead_lettered_outcome_holds_the_reason,
            plain_acks_keep_their_outcomes_in_any_id_order,
            progress_is_fenced_like_touch,
            chunks_arrive_in_order,
            dedup_then_await_gets_the_first_outcome,
            higher_priority_runs_first_fifo_within_a_tier,
            aging_lets_a_waiting_low_tier_overtake,
            tier_zero_stays_fifo_when_the_clock_steps_back,
            priority_orders_the_due_lane_and_survives_retry,
            backlog_by_flow_samples_in_priority_order,
            aging_counts_elapsed_time_across_a_clock_step,
            release_keeps_the_tier,
            close_wakes_claims_blocked_on_other_clones,
            concurrency_cap_holds_a_flow_and_exits_free_slots,
            concurrency_cap_counts_reclaimed_items,
            back_off_holds_a_flow_until_it_lifts_itself,
            rate_limit_hands_out_n_permits_per_period,
            blocking_claim_wakes_when_permits_or_slots_return,
            limits_and_pause_combine,
            large_batches_with_flow_limits_match_the_model,
            promote_makes_a_delayed_item_due_now,
            remove_deletes_any_item_that_is_not_pending,
            remove_takes_an_item_a_flow_limit_holds,
            cancel_ends_a_waiting_item_at_once,
            cancel_marks_a_pending_item_for_its_holder,
            touch_stops_at_the_first_cancelled_receipt,
            a_stale_cancelled_claim_ends_at_reclaim,
            wait_cancelled_wakes_on_a_mark,
            update_reranks_a_waiting_item_in_place,
            update_moves_an_item_by_its_not_before,
            update_refuses_an_item_that_does_not_wait,
            acked_items_are_kept_with_their_result_and_times,
            cancelled_items_are_kept_waiting_or_running,
            history_keeps_the_newest_count_within_the_age,
            no_retention_keeps_no_finished_item,
            history_shows_the_newest_count_through_many_finishes,
            back_off_keeps_the_longer_hold,
            schedule_fires_each_slot_exactly_once,
            concurrent_firers_make_one_item_per_slot,
            catch_up_latest_fires_the_latest_missed_slot,
            catch_up_skip_fires_only_on_time_slots,
            catch_up_all_fires_missed_slots_up_to_the_cap,
            overlap_skip_waits_for_the_previous_item,
            clock_steps_never_fire_a_slot_twice,
            concurrent_upserts_keep_the_slot_in_flight,
            schedule_operations_pause_resume_preview_remove,
            dst_changes_fire_each_daily_slot_once,
            dst_changes_fire_hourly_slots_once_per_wall_clock_hour,
        }
    };
}

/// Expand one `#[tokio::test]` per conformance case, each running the case
/// against the factory expression given (SPEC sections 3 and 4).
///
/// ```no_run
/// mod embedded {
///     workjournal::conformance_tests!(workjournal::testing::EmbeddedFactory);
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_case_list!($crate::__workjournal_conformance_tests, $factory);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __workjournal_conformance_tests {
    ($factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::testing::conformance::$case(&$factory).await;
            }
        )*
    };
}
