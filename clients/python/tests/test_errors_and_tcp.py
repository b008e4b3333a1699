"""The typed exceptions against docs/API.md's error table, and the client
over TCP with the bearer token (a wrong one refused)."""

from __future__ import annotations

import os
import re
import unittest
from unittest import mock

from support import REPO, Server

import workjournal
from workjournal import (
    ERRORS_BY_KIND,
    Client,
    UnauthorizedError,
    WorkjournalError,
)
from workjournal.errors import error_from_reply


class ErrorTable(unittest.TestCase):
    def test_every_kind_of_the_api_table_has_its_own_class(self) -> None:
        with open(os.path.join(REPO, "docs", "API.md"), encoding="utf-8") as f:
            doc = f.read()
        table = doc[doc.index("| status | kind | meaning |") :]
        table = table[: table.index("\n\n")]
        kinds = {}
        for row in table.splitlines()[2:]:
            status, kind_cell = row.split("|")[1:3]
            for kind in re.findall(r"`([a-z_]+)`", kind_cell):
                kinds[kind] = int(status)
        self.assertGreaterEqual(len(kinds), 15, kinds)
        classes = set()
        for kind, status in kinds.items():
            cls = ERRORS_BY_KIND.get(kind)
            self.assertIsNotNone(cls, f"no exception class for kind {kind}")
            assert cls is not None
            self.assertTrue(issubclass(cls, WorkjournalError))
            self.assertEqual((cls.kind, cls.status), (kind, status), kind)
            self.assertIn(cls.__name__, workjournal.__all__)
            classes.add(cls)
        self.assertEqual(len(classes), len(kinds), "one class per kind")

    def test_a_reply_becomes_its_class_with_its_fields(self) -> None:
        e = error_from_reply(
            429, b'{"error": {"kind": "full", "message": "queue is full (1000 items)", "limit": 1000}}'
        )
        self.assertIsInstance(e, workjournal.FullError)
        self.assertEqual((e.limit, e.status), (1000, 429))  # type: ignore[attr-defined]
        unknown = error_from_reply(418, b'{"error": {"kind": "teapot", "message": "short"}}')
        self.assertIs(type(unknown), WorkjournalError)
        self.assertEqual(unknown.kind, "teapot")
        garbled = error_from_reply(502, b"<html>bad gateway</html>")
        self.assertIs(type(garbled), WorkjournalError)
        self.assertEqual(garbled.status, 502)


class OverTcp(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server(tcp=True)
        self.addCleanup(self.server.close)

    def test_the_token_file_opens_every_route(self) -> None:
        with Client(self.server.url, token_file=self.server.token_file) as q:
            added = q.add(b"over tcp", flow="net")
            [claimed] = q.claim(1, wait=5)
            self.assertEqual((claimed.id, claimed.payload), (added.id, b"over tcp"))
            q.ack(claimed, result="ok")
            self.assertEqual(q.wait_result(added.id, timeout=5), b"ok")

    def test_the_token_from_the_environment(self) -> None:
        with mock.patch.dict(os.environ, {"WORKJOURNAL_TOKEN": self.server.token()}):
            with Client(self.server.url) as q:
                self.assertEqual(q.stats().backlog, 0)

    def test_a_wrong_token_is_refused_and_changes_nothing(self) -> None:
        for q in (Client(self.server.url, token="x" * 64), Client(self.server.url)):
            with mock.patch.dict(os.environ, {"WORKJOURNAL_TOKEN": ""}), q:
                with self.assertRaises(UnauthorizedError) as e:
                    q.add(b"intruder")
            self.assertEqual((e.exception.status, e.exception.kind), (401, "unauthorized"))
        with Client(self.server.db) as local:
            self.assertEqual(local.stats().backlog, 0)


if __name__ == "__main__":
    unittest.main()
