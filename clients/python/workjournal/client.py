"""The client: HTTP/1.1 + JSON to a ``workjournal serve`` (or ``work``, or
``forward``) over its Unix socket, or over TCP with the bearer token
(docs/API.md, SPEC section 10). Standard library only.

One :class:`Client` may be shared by threads: each call takes an idle
kept-alive connection or opens one. A connection idle for
``POOL_IDLE`` seconds (under the server's 10 s) is dropped, one the server
closed meanwhile is noticed before use, and a request that could not be
written to a reused connection is sent once more on a new one (nothing
reached the server). Any other lost connection after the request went out
is :class:`~workjournal.errors.OutcomeUnknownError`: the call may or may
not have happened.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import stat
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from .errors import (
    CancelledError,
    DeadLetteredError,
    OutcomeUnknownError,
    UnreachableError,
    WaitTimeoutError,
    WorkjournalError,
    error_from_reply,
)
from .items import (
    Added,
    Bytes,
    Claimed,
    NewItem,
    Outcome,
    Receipt,
    Reclaimed,
    Stats,
    b64,
)

#: The longest wait one long-poll request asks for, in seconds: under the
#: server's ``max_wait`` (20 s), as the Rust client's ``claim_poll``. A
#: longer wait is asked for in pieces.
LONG_POLL = 15.0

#: Seconds a kept-alive connection may idle before it is dropped (the
#: server closes one idle for 10 s).
POOL_IDLE = 5.0

#: What :meth:`Client.claim` and friends accept as a receipt.
ReceiptLike = Union[Receipt, Claimed]


def _receipt(r: ReceiptLike) -> Receipt:
    return r.receipt if isinstance(r, Claimed) else r


def _ms(seconds: float) -> int:
    """Seconds as whole ms (never below 0)."""
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {seconds}")
    return int(round(seconds * 1000))


class _UnixConnection(http.client.HTTPConnection):
    """``http.client`` over a Unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _closed_while_idle(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection has been closed by the server:
    such a connection has nothing to read, so readable means end of file
    (or bytes nobody asked for: unusable either way)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Client:
    """A queue served by ``workjournal serve`` (docs/API.md).

    ``target`` is, as the command's ``--db`` takes it:

    - a queue file's path (``/var/lib/workjournal/jobs.redb``): the socket
      ``PATH.sock`` beside it, where ``serve`` and ``work`` listen (a path
      that is itself a socket is used as it is);
    - ``unix:SOCKET``: that socket;
    - ``http://HOST:PORT``: TCP (``serve --listen``), with the bearer token
      ``token``, else the first line of ``token_file``, else the
      ``WORKJOURNAL_TOKEN`` environment variable.

    ``timeout`` bounds each reply, in seconds (plus the wait of a long
    poll); ``connect_timeout`` bounds opening a connection. Durations given
    to methods are seconds (floats); times are ms since the Unix epoch by
    the queue's clock (:meth:`now_ms`).

    Errors are :class:`~workjournal.errors.WorkjournalError` subclasses:
    one per error kind of docs/API.md (``LeaseLostError``, ``FullError``,
    ...), :class:`~workjournal.errors.UnreachableError` when nothing could
    be sent, :class:`~workjournal.errors.OutcomeUnknownError` when the
    answer was lost.
    """

    def __init__(
        self,
        target: Union[str, "os.PathLike[str]"] = "./workjournal.redb",
        *,
        token: Optional[str] = None,
        token_file: Union[str, "os.PathLike[str]", None] = None,
        timeout: float = 10.0,
        connect_timeout: float = 2.0,
    ) -> None:
        text = os.fspath(target)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._socket: Optional[str] = None
        self._address: Optional[Tuple[str, int]] = None
        if text.startswith("unix:"):
            self._socket = text[len("unix:") :]
            self.where = text
        elif text.startswith("http://"):
            url = urllib.parse.urlsplit(text)
            if url.path not in ("", "/") or url.query or not url.hostname:
                raise ValueError(f"{text!r}: expected http://HOST:PORT")
            self._address = (url.hostname, url.port or 80)
            self.where = f"http://{url.hostname}:{url.port or 80}"
        elif "://" in text:
            raise ValueError(
                f"{text!r}: expected a queue file's path, unix:SOCKET or "
                "http://HOST:PORT (for https, put a TLS proxy in front)"
            )
        else:
            try:
                is_socket = stat.S_ISSOCK(os.stat(text).st_mode)
            except OSError:
                is_socket = False
            self._socket = text if is_socket else text + ".sock"
            self.where = f"unix:{self._socket}"
        if token is None and token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        if token is None and self._address is not None:
            token = os.environ.get("WORKJOURNAL_TOKEN") or None
        self._token = token
        self._lock = threading.Lock()
        self._idle: List[Tuple[http.client.HTTPConnection, float]] = []

    # -- transport ---------------------------------------------------------

    def _connect(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self._socket is not None:
            conn = _UnixConnection(self._socket, self.connect_timeout)
        else:
            assert self._address is not None
            host, port = self._address
            conn = http.client.HTTPConnection(host, port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise UnreachableError(
                f"cannot connect to {self.where}: {e}; nothing was sent"
            ) from e
        return conn

    def _take(self) -> Optional[http.client.HTTPConnection]:
        """An idle connection the server has not closed, if any."""
        now = time.monotonic()
        with self._lock:
            while self._idle:
                conn, since = self._idle.pop()
                if now - since < POOL_IDLE and not _closed_while_idle(conn):
                    return conn
                conn.close()
        return None

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.append((conn, time.monotonic()))

    def _send(
        self, conn: http.client.HTTPConnection, op: str, data: bytes, read_timeout: float
    ) -> None:
        headers = {"content-type": "application/json"}
        if self._token is not None:
            headers["authorization"] = f"Bearer {self._token}"
        assert conn.sock is not None
        conn.sock.settimeout(read_timeout)
        conn.request("POST", "/v1/" + op, body=data, headers=headers)

    def call(self, op: str, body: Optional[Dict[str, Any]] = None, *, wait: float = 0.0) -> Dict[str, Any]:
        """``POST /v1/OP`` with ``body`` (a JSON object; ``None`` is ``{}``)
        and return the reply's JSON object: every route of docs/API.md,
        including those without a method here. ``wait`` is how long the
        server may hold the request (a long poll), in seconds, on top of
        ``timeout``."""
        data = json.dumps(body if body is not None else {}).encode("utf-8")
        read_timeout = self.timeout + wait
        conn = self._take()
        reused = conn is not None
        if conn is None:
            conn = self._connect()
        try:
            self._send(conn, op, data, read_timeout)
        except OSError as e:
            conn.close()
            if not reused:
                raise OutcomeUnknownError(
                    f"{op}: sending to {self.where} failed: {e}; the call may or may not have happened"
                ) from e
            # The server closed the kept-alive connection before reading
            # anything: send once more on a new one.
            conn = self._connect()
            try:
                self._send(conn, op, data, read_timeout)
            except OSError as e2:
                conn.close()
                raise OutcomeUnknownError(
                    f"{op}: sending to {self.where} failed: {e2}; the call may or may not have happened"
                ) from e2
        try:
            reply = conn.getresponse()
            raw = reply.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise OutcomeUnknownError(
                f"{op}: no answer from {self.where}: {e or type(e).__name__}; "
                "the call may or may not have happened"
            ) from e
        if reply.will_close:
            conn.close()
        else:
            self._give_back(conn)
        if reply.status != 200:
            raise error_from_reply(reply.status, raw)
        try:
            value = json.loads(raw) if raw else {}
        except ValueError as e:
            raise WorkjournalError(f"{op}: the reply is not JSON: {e}", status=200) from e
        if not isinstance(value, dict):
            raise WorkjournalError(f"{op}: the reply is not a JSON object", status=200)
        return value

    def close(self) -> None:
        """Close the idle connections. The client stays usable: the next
        call opens a new one."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.where!r})"

    # -- adding ------------------------------------------------------------

    def add(
        self,
        payload: Bytes,
        *,
        flow: str = "",
        delay: Optional[float] = None,
        not_before_ms: Optional[int] = None,
        priority: int = 0,
        dedup_key: Optional[str] = None,
        cost: int = 1,
    ) -> Added:
        """Queue one item (routes ``add``, ``add_delayed``). ``delay``
        (seconds) or ``not_before_ms`` (queue clock) hold it back until
        then; ``priority`` is the tier, 0 to 255, higher runs earlier;
        ``dedup_key`` skips the add when an item with that key was added
        within the dedup window (``Added.duplicate``, and ``id`` is the
        first item's); ``cost`` is the rate-limit permits its claim takes.
        Raises :class:`~workjournal.errors.FullError` at ``max_backlog``,
        :class:`~workjournal.errors.InvalidInputError` for a payload over
        ``max_payload_bytes``."""
        item = NewItem(payload, flow, priority, dedup_key, cost).to_wire()
        if delay is None and not_before_ms is None:
            return Added.from_wire(self.call("add", item))
        if not_before_ms is None:
            assert delay is not None
            not_before_ms = self.now_ms() + _ms(delay)
        item["not_before_ms"] = not_before_ms
        return Added.from_wire(self.call("add_delayed", item))

    def add_many(self, items: Iterable[Union[NewItem, Bytes]]) -> List[Added]:
        """Queue several items at once, all or none (route ``add_batch``):
        each a :class:`~workjournal.items.NewItem` or a bare payload. One
        result per item, in order."""
        wire = [(i if isinstance(i, NewItem) else NewItem(i)).to_wire() for i in items]
        reply = self.call("add_batch", {"items": wire})
        return [Added.from_wire(a) for a in reply.get("added", [])]

    # -- claiming and finishing --------------------------------------------

    def claim(self, count: int = 1, *, wait: float = 0.0, due_only: bool = False) -> List[Claimed]:
        """Take up to ``count`` items (route ``claim``); while there are
        none, wait up to ``wait`` seconds for one to arrive or come due (a
        long poll, asked for in pieces of at most ``LONG_POLL``). Empty when
        the wait runs out (or the server is shutting down). ``due_only``
        takes only due timers and retries, not the backlog."""
        deadline = time.monotonic() + wait
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            piece = min(remaining, LONG_POLL)
            body: Dict[str, Any] = {"count": count, "wait_ms": _ms(piece)}
            if due_only:
                body["from"] = "due_only"
            reply = self.call("claim", body, wait=piece)
            claimed = [Claimed.from_wire(c) for c in reply.get("claimed", [])]
            if claimed or remaining <= piece:
                return claimed

    def ack(self, receipt: ReceiptLike, result: Optional[Bytes] = None) -> None:
        """The item is done (route ``ack``, or ``ack_with_result`` with a
        ``result`` that :meth:`wait_result` hands to whoever waits).
        :class:`~workjournal.errors.LeaseLostError` when the claim is no
        longer current (acked already, or reclaimed)."""
        r = _receipt(receipt).to_wire()
        if result is None:
            self.call("ack", {"receipt": r})
        else:
            self.call("ack_with_result", {"receipt": r, "result": b64(result)})

    def ack_many(self, receipts: Iterable[ReceiptLike]) -> int:
        """Ack several (route ``ack_batch``); lost claims are skipped.
        Returns how many were acked."""
        wire = [_receipt(r).to_wire() for r in receipts]
        return int(self.call("ack_batch", {"receipts": wire}).get("count", 0))

    def retry(self, receipt: ReceiptLike, delay: float = 0.0, *, not_before_ms: Optional[int] = None) -> str:
        """A failed attempt (route ``retry``): the item is due again after
        ``delay`` seconds (or at ``not_before_ms``), keeping its id and
        deliveries, unless it has had ``max_deliveries`` deliveries: then it
        is dead-lettered. Returns ``"delayed"`` or ``"dead_lettered"``."""
        if not_before_ms is None:
            not_before_ms = self.now_ms() + _ms(delay)
        reply = self.call(
            "retry", {"receipt": _receipt(receipt).to_wire(), "not_before_ms": not_before_ms}
        )
        return str(reply.get("outcome", "delayed"))

    def release(self, receipt: ReceiptLike, delay: float = 0.0) -> None:
        """Give a claim back without counting it as an attempt (route
        ``release``): due again after ``delay`` seconds, its delivery not
        spent; it never dead-letters. For a worker that could not start the
        item, or stops before it."""
        not_before_ms = self.now_ms() + _ms(delay)
        self.call("release", {"receipt": _receipt(receipt).to_wire(), "not_before_ms": not_before_ms})

    def dead_letter(self, receipt: ReceiptLike, reason: str) -> None:
        """Give up on the item now (route ``dead_letter``), with ``reason``."""
        self.call("dead_letter", {"receipt": _receipt(receipt).to_wire(), "reason": reason})

    def touch(self, receipts: Union[ReceiptLike, Iterable[ReceiptLike]]) -> None:
        """Extend the claims' leases (route ``touch``), all or none: one
        lost claim is :class:`~workjournal.errors.LeaseLostError` and no
        lease is extended. A worker touches its items more often than the
        lease others reclaim after."""
        if isinstance(receipts, (Receipt, Claimed)):
            receipts = [receipts]
        wire = [_receipt(r).to_wire() for r in receipts]
        self.call("touch", {"receipts": wire})

    def reclaim(self, min_idle: float, count: int = 1) -> Reclaimed:
        """Take over up to ``count`` claims not touched for ``min_idle``
        seconds (their holder died), each a new delivery (route
        ``reclaim``); those past ``max_deliveries`` are dead-lettered
        instead."""
        reply = self.call("reclaim", {"min_idle_ms": _ms(min_idle), "count": count})
        return Reclaimed.from_wire(reply)

    def cancel(self, item_id: int) -> str:
        """Cancel item ``item_id`` (route ``cancel``, SPEC 3, Cancelling):
        ``"ended"`` (it was waiting and ended as cancelled), ``"marked"`` (it
        runs: its holder's next call ends it, and a worker stops it at once)
        or ``"not_found"``. A dead letter raises
        :class:`~workjournal.errors.InvalidInputError`."""
        return str(self.call("cancel", {"id": item_id})["cancel"])

    def update(
        self,
        item_id: int,
        *,
        priority: Optional[int] = None,
        delay: Optional[float] = None,
        not_before_ms: Optional[int] = None,
        payload: Optional[Bytes] = None,
    ) -> bool:
        """Change waiting item ``item_id`` (route ``update``, SPEC 3,
        Updating): its ``priority`` tier (re-ranked where it waits, keeping
        its place among equals), when it may run (``delay`` seconds from
        the queue's now, or ``not_before_ms``; a time that has passed makes
        it due now) and its ``payload``; at least one. ``False`` when the
        queue holds no item ``item_id``. A running, dead-lettered or
        finished item, a time for a parked one and an empty update raise
        :class:`~workjournal.errors.InvalidInputError`."""
        body: Dict[str, Any] = {"id": item_id}
        if priority is not None:
            body["priority"] = priority
        if delay is not None and not_before_ms is None:
            not_before_ms = self.now_ms() + _ms(delay)
        if not_before_ms is not None:
            body["not_before_ms"] = not_before_ms
        if payload is not None:
            body["payload"] = b64(payload)
        return bool(self.call("update", body)["value"])

    # -- looking and waiting -------------------------------------------------

    def stats(self) -> Stats:
        """How many items are in each state (route ``stats``)."""
        return Stats.from_wire(self.call("stats"))

    def now_ms(self) -> int:
        """The queue's clock, ms since the Unix epoch (route ``now``)."""
        return int(self.call("now")["now_ms"])

    def max_deliveries(self) -> int:
        """The served queue's ``max_deliveries`` (route
        ``max_deliveries``)."""
        return int(self.call("max_deliveries")["count"])

    def outcome(self, item_id: int) -> Optional[Outcome]:
        """How item ``item_id`` finished, or ``None``: not finished, never
        handed out, or finished longer ago than ``result_ttl`` (route
        ``outcome``)."""
        o = self.call("outcome", {"id": item_id}).get("outcome")
        return Outcome.from_wire(o) if o else None

    def wait_outcome(self, item_id: int, timeout: Optional[float] = None) -> Optional[Outcome]:
        """As :meth:`outcome`, but while there is none wait up to
        ``timeout`` seconds (``None``: without end) for the item to finish
        (route ``wait_outcome``, a long poll in pieces of at most
        ``LONG_POLL``). ``None`` when the wait ran out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is None:
                piece = LONG_POLL
            else:
                piece = min(max(0.0, deadline - time.monotonic()), LONG_POLL)
            o = self.call("wait_outcome", {"id": item_id, "wait_ms": _ms(piece)}, wait=piece).get(
                "outcome"
            )
            if o:
                return Outcome.from_wire(o)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def wait_result(self, item_id: int, timeout: Optional[float] = None) -> bytes:
        """Wait up to ``timeout`` seconds (``None``: without end) for item
        ``item_id`` to finish and return its result (empty for a plain
        ack). Raises :class:`~workjournal.errors.DeadLetteredError` (with
        the ``reason``) if it was dead-lettered,
        :class:`~workjournal.errors.CancelledError` if it was cancelled,
        :class:`~workjournal.errors.WaitTimeoutError` if the wait ran out."""
        o = self.wait_outcome(item_id, timeout)
        if o is None:
            raise WaitTimeoutError(f"item {item_id} did not finish within {timeout} s")
        if o.kind == "cancelled":
            raise CancelledError(f"item {item_id} was cancelled", fields={"id": item_id})
        if not o.done:
            raise DeadLetteredError(item_id, o.reason or "")
        return o.result or b""


__all__ = ["Client", "LONG_POLL", "POOL_IDLE", "ReceiptLike"]
