"""A real ``workjournal serve`` for the tests, on a queue file in a temp
dir of its own, with its own socket (and, when asked, TCP on a free
loopback port with a token file). The binary is ``$WORKJOURNAL_BIN``
(.ci/run sets it to the command it built); without it every test fails,
saying so."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def binary() -> str:
    """The ``workjournal`` command the tests run, or an error saying how to
    get one."""
    path = os.environ.get("WORKJOURNAL_BIN")
    if not path:
        raise RuntimeError(
            "WORKJOURNAL_BIN is not set: these tests run a real `workjournal serve`. "
            "Build it (cargo build -p workjournal-cli) and run them with "
            "WORKJOURNAL_BIN=target/debug/workjournal"
        )
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise RuntimeError(
            f"WORKJOURNAL_BIN={path!r} is not an executable file: build the command "
            "(cargo build -p workjournal-cli) or point WORKJOURNAL_BIN at it"
        )
    return os.path.abspath(path)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``workjournal --db DIR/q.redb serve [--listen 127.0.0.1:PORT
    --token-file DIR/token]``, up and answering when the constructor
    returns."""

    def __init__(self, *, tcp: bool = False, db: Optional[str] = None) -> None:
        self._dir = None if db else tempfile.TemporaryDirectory(prefix="wj-py-")
        self.dir = os.path.dirname(db) if db else self._dir.name  # type: ignore[union-attr]
        self.db = db or os.path.join(self.dir, "q.redb")
        self.socket = self.db + ".sock"
        self.port: Optional[int] = None
        self.token_file = os.path.join(self.dir, "token")
        self.proc: Optional[subprocess.Popen] = None
        self._tcp = tcp
        self.start()

    def start(self) -> None:
        """Start the server (again) on the same file and socket."""
        args: List[str] = [binary(), "--db", self.db, "serve"]
        if self._tcp:
            if self.port is None:
                self.port = free_port()
            args += ["--listen", f"127.0.0.1:{self.port}", "--token-file", self.token_file]
        self._log = open(os.path.join(self.dir, "serve.log"), "ab")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, cwd=self.dir
        )
        deadline = time.monotonic() + 30
        while not self._answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"workjournal serve exited {self.proc.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"workjournal serve did not come up in 30 s: {self.log()}")
            time.sleep(0.01)

    def _answers(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(self.socket)
            if self._tcp:
                assert self.port is not None
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            return True
        except OSError:
            return False

    def log(self) -> str:
        """What the server printed."""
        with open(os.path.join(self.dir, "serve.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (TCP servers)."""
        return f"http://127.0.0.1:{self.port}"

    def token(self) -> str:
        """The token ``serve`` wrote (TCP servers)."""
        with open(self.token_file, encoding="utf-8") as f:
            return f.read().strip()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop it with ``sig`` and wait for it to go."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def close(self) -> None:
        """Stop it and delete its directory."""
        self.stop()
        if self._dir is not None:
            self._dir.cleanup()
