"""The values requests carry and replies bring back, as in docs/API.md:
payloads are bytes here (base64 on the wire), times are ms since the Unix
epoch by the queue's clock. Reply fields this client does not know are
ignored (the server may add some)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

#: A payload or result: bytes, or text (sent as UTF-8).
Bytes = Union[bytes, bytearray, memoryview, str]


def to_bytes(value: Bytes) -> bytes:
    """``value`` as bytes (text as UTF-8)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def b64(value: Bytes) -> str:
    """Standard base64 with padding, as the wire wants."""
    return base64.b64encode(to_bytes(value)).decode("ascii")


def unb64(text: Optional[str]) -> bytes:
    """The bytes of a base64 field (``None``: empty)."""
    return base64.b64decode(text) if text else b""


@dataclass(frozen=True)
class Receipt:
    """What a claim gives back to finish the item with (ack, retry, touch,
    dead_letter): send back the one you got."""

    id: int
    delivery: int
    lease: int

    def to_wire(self) -> Dict[str, int]:
        """The JSON object of the receipt."""
        return {"id": self.id, "delivery": self.delivery, "lease": self.lease}

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Receipt":
        """A receipt from its JSON object."""
        return cls(id=d["id"], delivery=d["delivery"], lease=d["lease"])


@dataclass(frozen=True)
class Item:
    """A queued item."""

    id: int
    flow: str
    payload: bytes
    enqueued_at_ms: int
    not_before_ms: Optional[int]
    deliveries: int
    priority: int = 0
    cost: int = 1

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Item":
        """An item from its JSON object."""
        return cls(
            id=d["id"],
            flow=d.get("flow", ""),
            payload=unb64(d.get("payload")),
            enqueued_at_ms=d.get("enqueued_at_ms", 0),
            not_before_ms=d.get("not_before_ms"),
            deliveries=d.get("deliveries", 0),
            priority=d.get("priority", 0),
            cost=d.get("cost", 1),
        )


@dataclass(frozen=True)
class Claimed:
    """A claimed item: the item, the lane it came from (``"backlog"``,
    ``"due"`` or ``"parked"``), when it was claimed, and its receipt."""

    item: Item
    lane: str
    claimed_at_ms: int
    receipt: Receipt

    @property
    def id(self) -> int:
        """The item's id."""
        return self.item.id

    @property
    def payload(self) -> bytes:
        """The item's payload."""
        return self.item.payload

    @property
    def flow(self) -> str:
        """The item's flow."""
        return self.item.flow

    @property
    def deliveries(self) -> int:
        """How many times the item was handed out, this claim included."""
        return self.item.deliveries

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Claimed":
        """A claimed item from its JSON object."""
        return cls(
            item=Item.from_wire(d["item"]),
            lane=d.get("lane", "backlog"),
            claimed_at_ms=d.get("claimed_at_ms", 0),
            receipt=Receipt.from_wire(d["receipt"]),
        )


@dataclass(frozen=True)
class NewItem:
    """An item to add with :meth:`Client.add_many`."""

    payload: Bytes
    flow: str = ""
    priority: int = 0
    dedup_key: Optional[str] = None
    cost: int = 1

    def to_wire(self) -> Dict[str, Any]:
        """The JSON object of the item."""
        d: Dict[str, Any] = {"payload": b64(self.payload)}
        if self.flow:
            d["flow"] = self.flow
        if self.priority:
            d["priority"] = self.priority
        if self.dedup_key is not None:
            d["dedup_key"] = self.dedup_key
        if self.cost != 1:
            d["cost"] = self.cost
        return d


@dataclass(frozen=True)
class Added:
    """What an add did: the item's id, and whether it was a duplicate (an
    item with its dedup key was added within the dedup window: ``id`` is
    that first item's)."""

    id: int
    duplicate: bool

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Added":
        """An add's result from its JSON object."""
        return cls(id=d["id"], duplicate=bool(d.get("duplicate", False)))


@dataclass(frozen=True)
class Outcome:
    """How an item finished: ``kind`` ``"done"`` (acked; ``result`` holds
    what the ack carried, empty for a plain ack), ``"dead_lettered"``
    (``reason`` says why) or ``"cancelled"``; ``at_ms`` when."""

    id: int
    kind: str
    result: Optional[bytes]
    reason: Optional[str]
    at_ms: int

    @property
    def done(self) -> bool:
        """Whether the item was acked (not dead-lettered)."""
        return self.kind == "done"

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Outcome":
        """An outcome from its JSON object."""
        kind = d["kind"]
        return cls(
            id=d["id"],
            kind=kind,
            result=unb64(d.get("result")) if kind == "done" else None,
            reason=d.get("reason"),
            at_ms=d.get("at_ms", 0),
        )


@dataclass(frozen=True)
class Stats:
    """Exact counts of every state (SPEC section 3, Looking). ``backlog``
    counts the due lane too (``due`` of them); ages are ms, ``None`` when
    nothing is pending."""

    backlog: int
    due: int
    pending: int
    delayed: int
    parked: int
    dead_letters: int
    dead_letters_dropped: int = 0
    oldest_pending_age_ms: Optional[int] = None
    oldest_touch_age_ms: Optional[int] = None
    durable: bool = True
    limited: int = 0

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Stats":
        """Stats from their JSON object."""
        return cls(
            backlog=d.get("backlog", 0),
            due=d.get("due", 0),
            pending=d.get("pending", 0),
            delayed=d.get("delayed", 0),
            parked=d.get("parked", 0),
            dead_letters=d.get("dead_letters", 0),
            dead_letters_dropped=d.get("dead_letters_dropped", 0),
            oldest_pending_age_ms=d.get("oldest_pending_age_ms"),
            oldest_touch_age_ms=d.get("oldest_touch_age_ms"),
            durable=d.get("durable", True),
            limited=d.get("limited", 0),
        )


@dataclass(frozen=True)
class Reclaimed:
    """What :meth:`Client.reclaim` took over: the stale claims now this
    caller's (``claimed``), and the receipts of those it dead-lettered
    instead, past ``max_deliveries`` (``dead_lettered``), or ended because
    they had been cancelled (``cancelled``)."""

    claimed: "list[Claimed]"
    dead_lettered: "list[Receipt]"
    cancelled: "list[Receipt]"

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Reclaimed":
        """A reclaim's result from its JSON object."""
        return cls(
            claimed=[Claimed.from_wire(c) for c in d.get("claimed", [])],
            dead_lettered=[Receipt.from_wire(r) for r in d.get("dead_lettered", [])],
            cancelled=[Receipt.from_wire(r) for r in d.get("cancelled", [])],
        )
