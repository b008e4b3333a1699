"""Typed exceptions: one class per error ``kind`` of docs/API.md's error
table, all subclasses of :class:`WorkjournalError`, plus the client's own
(the server could not be reached, its answer never came, a waited-for item
was dead-lettered or the wait ran out).

The server answers an error with its HTTP status and
``{"error": {"kind", "message", ...}}`` (SPEC section 10, Errors); the
variant's fields (``limit``, ``id``, ``delivery``, ``lease``, ``what``,
``detail``) become attributes of the exception.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type


class WorkjournalError(Exception):
    """Any error of this client. ``kind`` is the server's error kind
    (``None`` for the client's own errors), ``status`` the HTTP status
    (``None`` when there was no answer), ``fields`` the error object as the
    server sent it."""

    kind: Optional[str] = None
    status: Optional[int] = None

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        fields: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.fields: Dict[str, Any] = dict(fields or {})
        if "kind" in self.fields and type(self).kind is None:
            self.kind = self.fields["kind"]


class BadRequestError(WorkjournalError):
    """400 ``bad_request``: the server could not read the request (malformed
    JSON, unknown field, wrong type, number out of range, bad base64).
    Nothing changed."""

    kind = "bad_request"
    status = 400


class InvalidInputError(WorkjournalError):
    """400 ``invalid_input``: the queue refused the input (``count`` 0, an
    empty flow name, a payload over ``max_payload_bytes``, removing a
    pending item). Nothing changed."""

    kind = "invalid_input"
    status = 400


class UnauthorizedError(WorkjournalError):
    """401 ``unauthorized``: over TCP without the right bearer token."""

    kind = "unauthorized"
    status = 401


class ForbiddenError(WorkjournalError):
    """403 ``forbidden``: this uid may not use the socket, or the read-only
    token asked for an operation that changes the queue."""

    kind = "forbidden"
    status = 403


class NotFoundError(WorkjournalError):
    """404 ``not_found``: no such operation (a server older than the
    route)."""

    kind = "not_found"
    status = 404


class RequestTimeoutError(WorkjournalError):
    """408 ``timeout``: the request body did not reach the server within its
    body timeout (30 s)."""

    kind = "timeout"
    status = 408


class LeaseLostError(WorkjournalError):
    """409 ``lease_lost``: the receipt's claim is no longer current (acked
    already, or reclaimed by another consumer after its lease ran out).
    Nothing changed. ``id``, ``delivery`` and ``lease`` name the receipt."""

    kind = "lease_lost"
    status = 409

    @property
    def id(self) -> Optional[int]:
        """The item's id."""
        return self.fields.get("id")

    @property
    def delivery(self) -> Optional[int]:
        """The receipt's delivery number."""
        return self.fields.get("delivery")

    @property
    def lease(self) -> Optional[int]:
        """The receipt's lease number."""
        return self.fields.get("lease")


class CancelledError(WorkjournalError):
    """409 ``cancelled``: the receipt's item was cancelled while it ran,
    and this call ended it as cancelled (SPEC 3, Cancelling): stop working
    on it. Also raised by :meth:`Client.wait_result` for a cancelled item.
    ``id``, ``delivery`` and ``lease`` name the receipt."""

    kind = "cancelled"
    status = 409

    @property
    def id(self) -> Optional[int]:
        """The item's id."""
        return self.fields.get("id")

    @property
    def delivery(self) -> Optional[int]:
        """The receipt's delivery number."""
        return self.fields.get("delivery")

    @property
    def lease(self) -> Optional[int]:
        """The receipt's lease number."""
        return self.fields.get("lease")


class PayloadTooLargeError(WorkjournalError):
    """413 ``payload_too_large``: the body is over ``max_payload_bytes`` in
    base64 plus 64 KiB; split a batch."""

    kind = "payload_too_large"
    status = 413


class LockedError(WorkjournalError):
    """423 ``locked``: the server's queue file is held by another process."""

    kind = "locked"
    status = 423


class FullError(WorkjournalError):
    """429 ``full``: the queue's ``max_backlog`` is reached (``limit``)."""

    kind = "full"
    status = 429

    @property
    def limit(self) -> Optional[int]:
        """The configured ``max_backlog``, in items."""
        return self.fields.get("limit")


class IoError(WorkjournalError):
    """500 ``io``: the server's storage failed with an I/O error (the
    server's, not an :class:`OSError` of this process)."""

    kind = "io"
    status = 500


class StorageError(WorkjournalError):
    """500 ``storage``: the server's storage engine failed."""

    kind = "storage"
    status = 500


class CorruptError(WorkjournalError):
    """500 ``corrupt``: the server's queue file is damaged."""

    kind = "corrupt"
    status = 500


class DecodeError(WorkjournalError):
    """500 ``decode``: the server read a record it cannot decode
    (``what``)."""

    kind = "decode"
    status = 500

    @property
    def what(self) -> Optional[str]:
        """Which record."""
        return self.fields.get("what")


class BackendError(WorkjournalError):
    """502 ``backend``: the server's Redis failed."""

    kind = "backend"
    status = 502


class ClosedError(WorkjournalError):
    """503 ``closed``: the server is shutting down and did nothing; try
    again (a restarted server answers on the same socket)."""

    kind = "closed"
    status = 503


#: Every server error kind and its class.
ERRORS_BY_KIND: Dict[str, Type[WorkjournalError]] = {
    cls.kind: cls
    for cls in (
        BadRequestError,
        InvalidInputError,
        UnauthorizedError,
        ForbiddenError,
        NotFoundError,
        RequestTimeoutError,
        LeaseLostError,
        CancelledError,
        PayloadTooLargeError,
        LockedError,
        FullError,
        IoError,
        StorageError,
        CorruptError,
        DecodeError,
        BackendError,
        ClosedError,
    )
    if cls.kind is not None
}


class UnreachableError(WorkjournalError, ConnectionError):
    """The server could not be reached: the socket is missing, the
    connection was refused or did not open in time. Nothing was sent, so
    nothing happened."""


class OutcomeUnknownError(WorkjournalError, ConnectionError):
    """The request went out but no answer came (the connection was lost, or
    the reply did not arrive in time): the call may or may not have
    happened. Make side effects idempotent by item id (SPEC section 5)."""


class DeadLetteredError(WorkjournalError):
    """:meth:`Client.wait_result`: the item was dead-lettered; ``reason``
    says why."""

    def __init__(self, item_id: int, reason: str) -> None:
        super().__init__(f"item {item_id} was dead-lettered: {reason}")
        self.id = item_id
        self.reason = reason


class WaitTimeoutError(WorkjournalError, TimeoutError):
    """:meth:`Client.wait_result`: the wait ran out before the item
    finished."""


def error_from_reply(status: int, body: bytes) -> WorkjournalError:
    """The exception for an error reply: the class of its ``kind``, or
    :class:`WorkjournalError` for a kind this client does not know (or a
    reply that is not the error object)."""
    try:
        fields = json.loads(body)["error"]
        kind = fields["kind"]
        message = fields.get("message", kind)
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode("utf-8", "replace")
        return WorkjournalError(f"HTTP {status}: {text}", status=status)
    cls = ERRORS_BY_KIND.get(kind, WorkjournalError)
    return cls(f"{kind}: {message}", status=status, fields=fields)
