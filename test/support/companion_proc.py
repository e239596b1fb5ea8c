"""Starts ramjet-companion processes for end-to-end tests (standard library only).

CompanionProc runs the binary beside one engine's KV-event endpoints (e.g. a SimProc's
kv_endpoint / kv_replay), writes the session and digest secret files (64 hex digits, mode 0600)
into a temporary directory unless paths are given, listens on a Unix socket in that directory
(and on /metrics at 127.0.0.1:0) unless told otherwise, waits for the
`ramjet-companion listening on <endpoints> [metrics=tcp://host:port]` line on stdout, and stops
it with SIGTERM at teardown.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional, Sequence

from support.ramjet_proc import SANITIZER_MARKERS, http_request

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_COMPANION = str(ROOT / "build/dev/src/companion/ramjet-companion")
LINE_RE = re.compile(r"ramjet-companion listening on (\S+)(?: metrics=tcp://[^\s]*:(\d+))?")


def companion_bin() -> str:
    return os.environ.get("COMPANION_BIN", DEFAULT_COMPANION)


def write_secret(path: str | os.PathLike, secret: Optional[bytes] = None, mode: int = 0o600) -> bytes:
    """Writes a 32-byte secret as 64 hex digits and a newline (`openssl rand -hex 32`), created with
    `mode` (never briefly wider). Returns the secret's bytes."""
    secret = secrets.token_bytes(32) if secret is None else secret
    assert len(secret) == 32
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have narrowed it; a test may want it wider on purpose
        os.write(fd, (secret.hex() + "\n").encode())
    finally:
        os.close(fd)
    return secret


class CompanionProc:
    def __init__(self, kv_live: str, *args: str, kv_replay: Optional[str] = None,
                 listen: Optional[Sequence[str]] = None, secret: Optional[bytes] = None,
                 digest_secret: Optional[bytes] = None, secret_file: Optional[str] = None,
                 digest_secret_file: Optional[str] = None, metrics: bool = True,
                 binary: Optional[str] = None, wait: bool = True, timeout: float = 15.0):
        """`args` are extra flags. The secrets are written to files only when no file path is given
        (self.secret / self.digest_secret hold the bytes then, else None)."""
        self.dir = tempfile.mkdtemp(prefix="rj-companion-")
        self.secret = self.digest_secret = None
        if secret_file is None:
            secret_file = os.path.join(self.dir, "session.key")
            self.secret = write_secret(secret_file, secret)
        if digest_secret_file is None:
            digest_secret_file = os.path.join(self.dir, "digest.key")
            self.digest_secret = write_secret(digest_secret_file, digest_secret)
        self.listen = list(listen) if listen is not None else [f"unix:{self.dir}/companion.sock"]
        self.args = ["--kv-live", kv_live]
        if kv_replay:
            self.args += ["--kv-replay", kv_replay]
        for e in self.listen:
            self.args += ["--listen", e]
        self.args += ["--secret-file", secret_file, "--digest-secret-file", digest_secret_file]
        if metrics:
            self.args += ["--metrics", "tcp://127.0.0.1:0"]
        self.args += list(args)
        self.proc = subprocess.Popen([binary or companion_bin(), *self.args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines: list[str] = []
        self.endpoints: list[str] = []
        self.metrics_port = 0
        self._ready = threading.Event()
        self._done = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = LINE_RE.search(line)
                if m and not self._ready.is_set():
                    self.endpoints = m.group(1).split(",")
                    self.metrics_port = int(m.group(2) or 0)
                    self._ready.set()
            self._done.set()

        threading.Thread(target=pump, daemon=True).start()
        if wait and not self.wait_ready(timeout):
            self.stop()
            raise RuntimeError("ramjet-companion did not start: " + self.output()[-2000:])

    def wait_ready(self, timeout: float = 15.0) -> bool:
        """True once the listening line was printed; False if the process exited or time ran out."""
        for _ in range(int(timeout * 20)):
            if self._ready.wait(0.05):
                return True
            if self.proc.poll() is not None and self._done.wait(1):
                return self._ready.is_set()
        return self._ready.is_set()

    @property
    def socket_path(self) -> Optional[str]:
        """The first Unix endpoint's path (as listening), or None."""
        for e in self.endpoints or self.listen:
            if e.startswith("unix:"):
                return e[len("unix:"):]
        return None

    def request(self, path: str, timeout: float = 5.0):
        assert self.metrics_port, "started without --metrics"
        return http_request(self.metrics_port, "GET", path, timeout=timeout)

    def health(self) -> dict:
        r = self.request("/health")
        assert r.status == 200, r.body
        return r.json()

    def metrics_text(self) -> str:
        r = self.request("/metrics")
        assert r.status == 200, r.body
        return r.body.decode()

    def output(self) -> str:
        return "".join(self.lines)

    def sanitizer_report(self) -> Optional[str]:
        out = self.output()
        return out if any(m in out for m in SANITIZER_MARKERS) else None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        """Stops the process (SIGTERM: Disconnect(shutdown) to every client), removes the temporary
        directory and returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._done.wait(2)
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode

    def __enter__(self) -> "CompanionProc":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
