"""The worker loop against a real `workjournal serve`: results, retries
with back-off, dead letters, the heartbeat, taking over a dead consumer's
claim, stopping."""

from __future__ import annotations

import threading
import time
import unittest

from support import Server

from workjournal import Claimed, Client, Worker, work


class WorkerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server()
        self.addCleanup(self.server.close)
        self.q = Client(self.server.db)
        self.addCleanup(self.q.close)

    def test_until_empty_runs_every_item_and_keeps_its_result(self) -> None:
        ids = [self.q.add(f"item {n}").id for n in range(5)]
        report = work(self.q, lambda c: c.payload.upper(), until_empty=True)
        self.assertEqual((report.done, report.retried, report.dead_lettered), (5, 0, 0))
        for n, item_id in enumerate(ids):
            self.assertEqual(self.q.wait_result(item_id, timeout=5), f"ITEM {n}".encode())
        stats = self.q.stats()
        self.assertEqual((stats.backlog, stats.pending, stats.delayed), (0, 0, 0))

    def test_a_failing_handler_is_retried_then_succeeds(self) -> None:
        added = self.q.add(b"flaky")
        seen = []

        def handler(c: Claimed) -> None:
            seen.append(c.deliveries)
            if c.deliveries < 3:
                raise RuntimeError("not yet")

        report = Worker(self.q, handler, backoff=0.01, until_empty=True).run()
        self.assertEqual(seen, [1, 2, 3])
        self.assertEqual((report.done, report.retried), (1, 2))
        self.assertEqual(self.q.wait_result(added.id, timeout=5), b"")

    def test_the_last_delivery_dead_letters_with_the_error(self) -> None:
        added = self.q.add(b"poison")

        def handler(c: Claimed) -> None:
            raise ValueError("cannot parse")

        report = Worker(self.q, handler, backoff=0.01, until_empty=True).run()
        self.assertEqual((report.dead_lettered, report.retried, report.done), (1, 2, 0))
        outcome = self.q.outcome(added.id)
        assert outcome is not None
        self.assertEqual((outcome.kind, outcome.reason), ("dead_lettered", "ValueError: cannot parse"))

    def test_the_heartbeat_keeps_a_long_item_from_being_taken_over(self) -> None:
        self.q.add(b"slow")
        stolen = []

        def handler(c: Claimed) -> None:
            # Past the lease: only the heartbeat keeps the claim fresh.
            time.sleep(1.5)
            with Client(self.server.db) as other:
                stolen.extend(other.reclaim(min_idle=1.0, count=10).claimed)
            time.sleep(1.0)

        report = Worker(self.q, handler, lease=1.0, until_empty=True).run()
        self.assertEqual(stolen, [])
        self.assertEqual((report.done, report.lease_lost), (1, 0))

    def test_a_dead_consumers_claim_is_taken_over(self) -> None:
        added = self.q.add(b"orphan")
        with Client(self.server.db) as other:
            [abandoned] = other.claim(1, wait=5)
        ran = []
        report = Worker(self.q, lambda c: ran.append(c.deliveries), lease=0.3, until_empty=True).run()
        self.assertEqual(ran, [2])
        self.assertEqual(report.done, 1)
        self.assertEqual(abandoned.id, added.id)

    def test_stop_ends_an_idle_run(self) -> None:
        worker = Worker(self.q, lambda c: None, claim_wait=0.2)
        reports = []
        t = threading.Thread(target=lambda: reports.append(worker.run()))
        t.start()
        time.sleep(0.3)
        worker.stop()
        t.join(30)
        self.assertFalse(t.is_alive())
        self.assertEqual(reports[0].done, 0)


if __name__ == "__main__":
    unittest.main()
