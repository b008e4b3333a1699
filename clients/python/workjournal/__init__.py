"""A Python client for a workjournal queue served by ``workjournal serve``
(or ``work``, or ``forward``): HTTP/1.1 + JSON over the queue file's Unix
socket, or over TCP with a bearer token. Standard library only.

    from workjournal import Client, Worker

    q = Client("/var/lib/workjournal/jobs.redb")   # its socket: jobs.redb.sock
    q.add(b"resize photo-1.jpg", flow="photos", priority=5)
    for claimed in q.claim(10, wait=5):
        print(claimed.id, claimed.payload)
        q.ack(claimed)

The routes, bodies and errors are docs/API.md; the rules SPEC section 10.
"""

from .client import LONG_POLL, POOL_IDLE, Client
from .errors import (
    ERRORS_BY_KIND,
    BackendError,
    BadRequestError,
    CancelledError,
    ClosedError,
    CorruptError,
    DeadLetteredError,
    DecodeError,
    ForbiddenError,
    FullError,
    InvalidInputError,
    IoError,
    LeaseLostError,
    LockedError,
    NotFoundError,
    OutcomeUnknownError,
    PayloadTooLargeError,
    RequestTimeoutError,
    StorageError,
    UnauthorizedError,
    UnreachableError,
    WaitTimeoutError,
    WorkjournalError,
)
from .items import Added, Claimed, Item, NewItem, Outcome, Receipt, Reclaimed, Stats
from .worker import Report, Worker, work

__version__ = "0.1.0"

__all__ = [
    "Added",
    "BackendError",
    "BadRequestError",
    "CancelledError",
    "Claimed",
    "Client",
    "ClosedError",
    "CorruptError",
    "DeadLetteredError",
    "DecodeError",
    "ERRORS_BY_KIND",
    "ForbiddenError",
    "FullError",
    "InvalidInputError",
    "IoError",
    "Item",
    "LONG_POLL",
    "LeaseLostError",
    "LockedError",
    "NewItem",
    "NotFoundError",
    "Outcome",
    "OutcomeUnknownError",
    "POOL_IDLE",
    "PayloadTooLargeError",
    "Receipt",
    "Reclaimed",
    "Report",
    "RequestTimeoutError",
    "Stats",
    "StorageError",
    "UnauthorizedError",
    "UnreachableError",
    "WaitTimeoutError",
    "Worker",
    "WorkjournalError",
    "work",
]
