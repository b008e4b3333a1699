"""The client against a real `workjournal serve`: adding, claiming with a
long poll, finishing, looking and waiting, on the Unix socket."""

from __future__ import annotations

import os
import signal
import threading
import time
import unittest

from support import Server

import workjournal
import workjournal.client
from workjournal import (
    BadRequestError,
    CancelledError,
    Client,
    DeadLetteredError,
    InvalidInputError,
    LeaseLostError,
    NewItem,
    NotFoundError,
    OutcomeUnknownError,
    UnreachableError,
    WaitTimeoutError,
    WorkjournalError,
)


class ServedTest(unittest.TestCase):
    """Each test on a server and queue file of its own."""

    def setUp(self) -> None:
        self.server = Server()
        self.addCleanup(self.server.close)
        self.q = Client(self.server.db)
        self.addCleanup(self.q.close)


class Adding(ServedTest):
    def test_add_claim_ack_round_trip_with_binary_payload(self) -> None:
        added = self.q.add(b"\x00binary\xff")
        self.assertFalse(added.duplicate)
        [claimed] = self.q.claim(1, wait=5)
        self.assertEqual(claimed.id, added.id)
        self.assertEqual(claimed.payload, b"\x00binary\xff")
        self.assertEqual(claimed.deliveries, 1)
        self.assertEqual(claimed.lane, "backlog")
        self.q.ack(claimed)
        stats = self.q.stats()
        self.assertEqual((stats.backlog, stats.pending, stats.dead_letters), (0, 0, 0))
        outcome = self.q.outcome(added.id)
        self.assertIsNotNone(outcome)
        assert outcome is not None
        self.assertTrue(outcome.done)
        self.assertEqual(outcome.result, b"")

    def test_text_payloads_are_utf8(self) -> None:
        self.q.add("grüße")
        [claimed] = self.q.claim(1, wait=5)
        self.assertEqual(claimed.payload.decode("utf-8"), "grüße")

    def test_flow_priority_and_cost_reach_the_item(self) -> None:
        low = self.q.add(b"low", flow="mail")
        high = self.q.add(b"high", flow="mail", priority=9, cost=2)
        first, second = self.q.claim(2, wait=5)
        self.assertEqual((first.id, second.id), (high.id, low.id), "higher tier first")
        self.assertEqual((first.flow, first.item.priority, first.item.cost), ("mail", 9, 2))
        self.assertEqual((second.item.priority, second.item.cost), (0, 1))

    def test_delay_holds_an_item_back(self) -> None:
        far = self.q.add(b"later", delay=3600)
        soon = self.q.add(b"soon", delay=0.2)
        stats = self.q.stats()
        self.assertEqual((stats.delayed, stats.backlog), (2, 0))
        [claimed] = self.q.claim(5, wait=10)
        self.assertEqual(claimed.id, soon.id)
        self.assertEqual(claimed.lane, "due")
        self.assertIsNotNone(claimed.item.not_before_ms)
        self.assertEqual(self.q.claim(5), [])
        self.assertEqual(self.q.stats().delayed, 1)
        self.assertNotEqual(far.id, soon.id)

    def test_not_before_ms_is_the_queue_clock(self) -> None:
        self.q.add(b"past", not_before_ms=self.q.now_ms() - 1000)
        [claimed] = self.q.claim(1, wait=5)
        self.assertEqual(claimed.payload, b"past")

    def test_dedup_key_returns_the_first_id(self) -> None:
        first = self.q.add(b"one", dedup_key="order-17")
        again = self.q.add(b"two", dedup_key="order-17")
        self.assertEqual(again.id, first.id)
        self.assertTrue(again.duplicate)
        self.assertEqual(self.q.stats().backlog, 1)

    def test_add_many_is_all_or_none(self) -> None:
        added = self.q.add_many(
            [b"a", "b", NewItem(b"c", flow="reports", priority=3, dedup_key="c")]
        )
        self.assertEqual(len({a.id for a in added}), 3)
        claimed = self.q.claim(10, wait=5)
        self.assertEqual(sorted(c.payload for c in claimed), [b"a", b"b", b"c"])
        self.assertEqual(claimed[0].flow, "reports", "priority 3 runs first")
        with self.assertRaises(BadRequestError):
            self.q.add_many([b"fine", NewItem(b"tier 256", priority=256)])
        self.assertEqual(self.q.stats().backlog, 0, "nothing of the refused batch")


class Claiming(ServedTest):
    def test_a_waiting_claim_wakes_when_an_item_arrives(self) -> None:
        got: list = []
        waiter = threading.Thread(target=lambda: got.extend(self.q.claim(1, wait=30)))
        waiter.start()
        time.sleep(0.2)
        with Client(self.server.db) as other:
            added = other.add(b"wake up")
        waiter.join(60)
        self.assertFalse(waiter.is_alive())
        self.assertEqual([c.id for c in got], [added.id])

    def test_a_long_wait_is_asked_for_in_pieces(self) -> None:
        old = workjournal.client.LONG_POLL
        workjournal.client.LONG_POLL = 0.1
        self.addCleanup(setattr, workjournal.client, "LONG_POLL", old)
        got: list = []
        waiter = threading.Thread(target=lambda: got.extend(self.q.claim(1, wait=30)))
        waiter.start()
        time.sleep(0.5)  # several pieces have run out by now
        with Client(self.server.db) as other:
            added = other.add(b"late")
        waiter.join(60)
        self.assertEqual([c.id for c in got], [added.id])

    def test_an_empty_queue_claims_nothing(self) -> None:
        self.assertEqual(self.q.claim(3), [])
        self.assertEqual(self.q.claim(3, wait=0.2), [])

    def test_count_zero_is_invalid_input(self) -> None:
        with self.assertRaises(InvalidInputError) as e:
            self.q.claim(0)
        self.assertEqual(e.exception.status, 400)


class Finishing(ServedTest):
    def test_a_second_ack_is_lease_lost(self) -> None:
        self.q.add(b"x")
        [claimed] = self.q.claim(1, wait=5)
        self.q.ack(claimed)
        with self.assertRaises(LeaseLostError) as e:
            self.q.ack(claimed.receipt)
        err = e.exception
        self.assertIsInstance(err, WorkjournalError)
        self.assertEqual((err.status, err.kind), (409, "lease_lost"))
        self.assertEqual((err.id, err.delivery, err.lease), (claimed.id, 1, claimed.receipt.lease))

    def test_retry_until_max_deliveries_dead_letters(self) -> None:
        self.assertEqual(self.q.max_deliveries(), 3)
        added = self.q.add(b"flaky")
        outcomes = []
        for delivery in (1, 2, 3):
            [claimed] = self.q.claim(1, wait=10)
            self.assertEqual(claimed.deliveries, delivery)
            outcomes.append(self.q.retry(claimed, delay=0.05))
        self.assertEqual(outcomes, ["delayed", "delayed", "dead_lettered"])
        self.assertEqual(self.q.stats().dead_letters, 1)
        outcome = self.q.outcome(added.id)
        assert outcome is not None
        self.assertEqual(outcome.kind, "dead_lettered")
        self.assertIn("max deliveries", outcome.reason or "")

    def test_cancel_ends_a_waiting_item_and_marks_a_running_one(self) -> None:
        waiting = self.q.add(b"waiting")
        self.assertEqual(self.q.cancel(waiting.id), "ended")
        with self.assertRaises(CancelledError):
            self.q.wait_result(waiting.id, timeout=5)
        self.assertEqual(self.q.cancel(waiting.id), "not_found")
        running = self.q.add(b"running")
        [claimed] = self.q.claim(1, wait=5)
        self.assertEqual(claimed.id, running.id)
        self.assertEqual(self.q.cancel(running.id), "marked")
        with self.assertRaises(CancelledError) as e:
            self.q.ack(claimed)
        err = e.exception
        self.assertEqual((err.status, err.kind), (409, "cancelled"))
        self.assertEqual((err.id, err.delivery, err.lease), (claimed.id, 1, claimed.receipt.lease))
        outcome = self.q.outcome(running.id)
        assert outcome is not None
        self.assertEqual(outcome.kind, "cancelled")
        self.assertEqual(self.q.stats().pending, 0)

    def test_update_reranks_delays_and_changes_the_payload(self) -> None:
        first = self.q.add(b"first")
        second = self.q.add(b"second")
        self.assertTrue(self.q.update(second.id, priority=2, payload=b"second, changed"))
        later = self.q.add(b"later")
        self.assertTrue(self.q.update(later.id, delay=3600))
        self.assertEqual(self.q.stats().delayed, 1)
        got = self.q.claim(3, wait=1)
        self.assertEqual([c.id for c in got], [second.id, first.id])
        self.assertEqual(got[0].payload, b"second, changed")
        with self.assertRaises(InvalidInputError):
            self.q.update(first.id, priority=1)
        with self.assertRaises(InvalidInputError):
            self.q.update(later.id)
        self.assertFalse(self.q.update(999999, priority=1))
        self.assertTrue(self.q.update(later.id, delay=0))
        [due] = self.q.claim(1, wait=5)
        self.assertEqual(due.id, later.id)

    def test_release_does_not_spend_a_delivery(self) -> None:
        self.q.add(b"x")
        [claimed] = self.q.claim(1, wait=5)
        self.q.release(claimed)
        [again] = self.q.claim(1, wait=5)
        self.assertEqual(again.deliveries, 1)

    def test_dead_letter_keeps_the_reason(self) -> None:
        added = self.q.add(b"x")
        [claimed] = self.q.claim(1, wait=5)
        self.q.dead_letter(claimed, "bounced")
        with self.assertRaises(DeadLetteredError) as e:
            self.q.wait_result(added.id, timeout=5)
        self.assertEqual(e.exception.reason, "bounced")

    def test_touch_extends_a_current_claim_only(self) -> None:
        self.q.add(b"x")
        [claimed] = self.q.claim(1, wait=5)
        self.q.touch(claimed)
        self.q.touch([claimed.receipt])
        self.q.ack(claimed)
        with self.assertRaises(LeaseLostError):
            self.q.touch(claimed)

    def test_reclaim_takes_a_stale_claim_over(self) -> None:
        self.q.add(b"x")
        [claimed] = self.q.claim(1, wait=5)
        reclaimed = self.q.reclaim(min_idle=0, count=10)
        self.assertEqual([c.id for c in reclaimed.claimed], [claimed.id])
        self.assertEqual(reclaimed.claimed[0].deliveries, 2)
        with self.assertRaises(LeaseLostError):
            self.q.ack(claimed)
        self.q.ack(reclaimed.claimed[0])
        self.assertEqual(self.q.ack_many([]), 0)


class Waiting(ServedTest):
    def test_wait_result_returns_what_the_ack_carried(self) -> None:
        added = self.q.add(b"2+2")

        def work() -> None:
            with Client(self.server.db) as worker:
                [claimed] = worker.claim(1, wait=10)
                time.sleep(0.1)
                worker.ack(claimed, result=b"4")

        t = threading.Thread(target=work)
        t.start()
        self.assertEqual(self.q.wait_result(added.id, timeout=30), b"4")
        t.join()

    def test_a_wait_that_runs_out(self) -> None:
        added = self.q.add(b"nobody works")
        with self.assertRaises(WaitTimeoutError) as e:
            self.q.wait_result(added.id, timeout=0.2)
        self.assertIsInstance(e.exception, TimeoutError)
        self.assertIsNone(self.q.wait_outcome(added.id, timeout=0))


class Connecting(ServedTest):
    def test_every_target_form_reaches_the_same_queue(self) -> None:
        self.q.add(b"x")
        for target in (self.server.db, "unix:" + self.server.socket, self.server.socket):
            with Client(target) as c:
                self.assertEqual(c.stats().backlog, 1, target)
        with self.assertRaises(ValueError):
            Client("https://localhost:7070")
        with self.assertRaises(ValueError):
            Client("http://localhost:7070/v1")

    def test_a_missing_socket_is_unreachable(self) -> None:
        c = Client(os.path.join(self.server.dir, "nothing.redb"))
        with self.assertRaises(UnreachableError) as e:
            c.stats()
        self.assertIsInstance(e.exception, ConnectionError)
        self.assertIn("nothing was sent", str(e.exception))

    def test_unknown_routes_and_bad_bodies_are_typed(self) -> None:
        with self.assertRaises(NotFoundError) as e:
            self.q.call("no_such_operation")
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(BadRequestError):
            self.q.call("add", {"payload": "not base64!"})
        with self.assertRaises(BadRequestError):
            self.q.call("add", {"payload": "aGk=", "unknown": 1})
        with self.assertRaises(InvalidInputError):
            self.q.add(b"x", flow="f" * 300)

    def test_a_restarted_server_is_found_by_the_next_call(self) -> None:
        self.q.add(b"before")  # leaves a kept-alive connection in the pool
        self.server.stop()
        self.server.start()
        self.assertEqual(self.q.stats().backlog, 1)
        self.q.add(b"after")
        self.assertEqual(self.q.stats().backlog, 2)

    def test_a_server_killed_mid_call_leaves_the_outcome_unknown(self) -> None:
        errors: list = []

        def wait() -> None:
            try:
                self.q.claim(1, wait=30)
            except WorkjournalError as e:
                errors.append(e)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        self.server.stop(signal.SIGKILL)
        waiter.join(60)
        self.assertEqual(len(errors), 1, errors)
        self.assertIsInstance(errors[0], OutcomeUnknownError)
        self.assertIn("may or may not have happened", str(errors[0]))


if __name__ == "__main__":
    unittest.main()
