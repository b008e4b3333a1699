"""A small worker loop: claim an item, run a function on it, ack it (with
its return value as the result), retry it with exponential back-off when
the function raises, dead-letter it on its last delivery. One item at a
time; run more workers (threads or processes) for more at once.

While the function runs, a heartbeat thread touches the claim every
``lease / 3`` seconds, so no other consumer takes it over; every
``lease / 2`` the loop takes over one claim that went stale (its holder
died) before claiming anew. These are the rules of the Rust ``Worker``
(SPEC section 9), for one slot.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from .client import Client
from .errors import (
    BackendError,
    ClosedError,
    IoError,
    LeaseLostError,
    OutcomeUnknownError,
    StorageError,
    UnreachableError,
    WorkjournalError,
)
from .items import Bytes, Claimed

log = logging.getLogger("workjournal")

#: What a handler gets and may return: the claimed item; ``None`` to ack,
#: bytes or text to ack with that result.
Handler = Callable[[Claimed], Optional[Bytes]]

#: Errors that may pass (the server restarting, its storage or Redis
#: failing for a while): the worker tries again instead of giving up.
TRANSIENT = (UnreachableError, OutcomeUnknownError, ClosedError, BackendError, IoError, StorageError)


@dataclass
class Report:
    """What a :meth:`Worker.run` did, in items."""

    #: Acked after the handler returned.
    done: int = 0
    #: Failed attempts given back for a later delivery.
    retried: int = 0
    #: Dead-lettered: failed on their last delivery (or found stale past
    #: it by a reclaim).
    dead_lettered: int = 0
    #: Finished too late: another consumer had taken the claim over.
    lease_lost: int = 0
    #: Given back unstarted or interrupted, their delivery not spent.
    released: int = 0
    #: Not finished because the server could not be reached for a whole
    #: lease: left to their lease, another delivery comes.
    unfinished: int = 0


class Worker:
    """Run ``handler`` for every item of ``client``'s queue until
    :meth:`stop` (or, with ``until_empty``, until nothing is left).

    ``handler(claimed)`` returns ``None`` (ack) or bytes / text (ack with
    that result, which :meth:`Client.wait_result` returns); raising an
    ``Exception`` is a failed attempt: retried after ``backoff *
    backoff_factor ** (delivery - 1)`` seconds, at most ``max_backoff``,
    shortened by a random fraction of up to ``jitter``; on the item's
    delivery ``max_deliveries`` (the served queue's) it is dead-lettered
    with the exception as the reason. ``KeyboardInterrupt`` and other
    ``BaseException`` give the item back (its delivery not spent) and end
    the run.

    ``lease`` (seconds) is how long a silent claim lasts before another
    consumer may take it over: the heartbeat touches every ``lease / 3``.
    ``claim_wait`` bounds each long-poll claim, and so how long
    :meth:`stop` may take to be noticed while idle.
    """

    def __init__(
        self,
        client: Client,
        handler: Handler,
        *,
        lease: float = 30.0,
        claim_wait: float = 2.0,
        backoff: float = 1.0,
        backoff_factor: float = 2.0,
        max_backoff: float = 300.0,
        jitter: float = 0.2,
        until_empty: bool = False,
    ) -> None:
        if lease <= 0:
            raise ValueError("lease must be above 0 seconds")
        self.client = client
        self.handler = handler
        self.lease = lease
        self.claim_wait = claim_wait
        self.backoff = backoff
        self.backoff_factor = backoff_factor
        self.max_backoff = max_backoff
        self.jitter = jitter
        self.until_empty = until_empty
        self.report = Report()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Stop after the running item (safe from a signal handler or
        another thread)."""
        self._stop.set()

    def run(self) -> Report:
        """Work until stopped; returns what was done. Errors that may pass
        (see ``TRANSIENT``) are waited out; others (a refused token, a
        server without a route) are raised."""
        max_deliveries = self._patiently(self.client.max_deliveries)
        last_reclaim = float("-inf")
        pause = 0.1
        while not self._stop.is_set():
            try:
                batch: List[Claimed] = []
                if time.monotonic() - last_reclaim >= self.lease / 2:
                    last_reclaim = time.monotonic()
                    reclaimed = self.client.reclaim(self.lease, 1)
                    self.report.dead_lettered += len(reclaimed.dead_lettered)
                    batch = reclaimed.claimed
                if not batch:
                    batch = self.client.claim(1, wait=min(self.claim_wait, self.lease / 2))
                if not batch and self.until_empty and self._empty():
                    break
            except TRANSIENT as e:
                log.warning("workjournal worker: %s; trying again in %.1f s", e, pause)
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
                continue
            pause = 0.1
            for claimed in batch:
                if self._stop.is_set():
                    self._finish(lambda c=claimed: self.client.release(c))
                    self.report.released += 1
                    continue
                self._run_one(claimed, max_deliveries)
        return self.report

    def _empty(self) -> bool:
        s = self.client.stats()
        return s.backlog + s.delayed + s.pending == 0

    def _patiently(self, call: Callable[[], int]) -> int:
        pause = 0.1
        while True:
            try:
                return call()
            except TRANSIENT as e:
                log.warning("workjournal worker: %s; trying again in %.1f s", e, pause)
                time.sleep(pause)
                pause = min(pause * 2, 5.0)

    def _wait_after(self, delivery: int) -> float:
        wait = min(self.backoff * self.backoff_factor ** max(delivery - 1, 0), self.max_backoff)
        return wait * (1 - random.uniform(0, self.jitter))

    def _run_one(self, claimed: Claimed, max_deliveries: int) -> None:
        finished = threading.Event()

        def beat() -> None:
            while not finished.wait(self.lease / 3):
                try:
                    self.client.touch(claimed)
                except LeaseLostError:
                    return
                except WorkjournalError as e:
                    log.warning("workjournal worker: touch of item %d: %s", claimed.id, e)

        heart = threading.Thread(target=beat, name=f"workjournal-heartbeat-{claimed.id}", daemon=True)
        heart.start()
        failure: Optional[Exception] = None
        result: Optional[Bytes] = None
        try:
            result = self.handler(claimed)
        except Exception as e:  # a failed attempt, whatever it was
            failure = e
        except BaseException:
            finished.set()
            heart.join()
            self._finish(lambda: self.client.release(claimed))
            self.report.released += 1
            raise
        finally:
            finished.set()
            heart.join()
        if failure is None:
            if self._finish(lambda: self.client.ack(claimed, result)):
                self.report.done += 1
            return
        reason = f"{type(failure).__name__}: {failure}"
        if claimed.deliveries >= max_deliveries:
            if self._finish(lambda: self.client.dead_letter(claimed, reason)):
                self.report.dead_lettered += 1
            return
        outcome: List[str] = []
        wait = self._wait_after(claimed.deliveries)
        if self._finish(lambda: outcome.append(self.client.retry(claimed, wait))):
            if outcome and outcome[0] == "dead_lettered":
                self.report.dead_lettered += 1
            else:
                self.report.retried += 1

    def _finish(self, call: Callable[[], object]) -> bool:
        """Run a finishing call, trying again for up to one lease while the
        server cannot be reached. False when the claim was lost or the
        tries ran out (both counted)."""
        deadline = time.monotonic() + self.lease
        pause = 0.05
        while True:
            try:
                call()
                return True
            except LeaseLostError:
                self.report.lease_lost += 1
                return False
            except TRANSIENT as e:
                if time.monotonic() + pause >= deadline:
                    log.warning("workjournal worker: gave up finishing an item: %s", e)
                    self.report.unfinished += 1
                    return False
                time.sleep(pause)
                pause = min(pause * 2, self.lease / 4)


def work(client: Client, handler: Handler, **options: object) -> Report:
    """``Worker(client, handler, **options).run()``."""
    return Worker(client, handler, **options).run()  # type: ignore[arg-type]
