"""`hinfer serve` as a subprocess on the demo model (real engine, CPU), for tests that need signals, the real
sampler or startup behaviour. The port is chosen by the OS (--port 0) and read from the server's log."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

_LISTENING = re.compile(r"listening on (http://\S+?)\s")


class ServerProcess:
    def __init__(self, args: list[str], cache_dir: Path, env: dict[str, str] | None = None):
        repo = Path(__file__).resolve().parents[2]
        full_env = {**os.environ, "HINFER_CACHE": str(cache_dir), "PYTHONPATH": str(repo), **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "hinfer", "serve", "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=full_env)
        self.lines: list[str] = []
        self.url: str | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = _LISTENING.search(line)
            if m and self.url is None:
                self.url = m.group(1)

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def wait_ready(self, timeout: float = 300.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hinfer serve exited with {self.proc.returncode}:\n{self.log}")
            if self.url is not None:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                        return self.url
            time.sleep(0.1)
        raise RuntimeError(f"hinfer serve did not become ready in {timeout} s:\n{self.log}")

    def wait_exit(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)


@contextlib.contextmanager
def serve_process(args: list[str], cache_dir: Path, ready: bool = True) -> Iterator[ServerProcess]:
    """Start `hinfer serve --port 0 ARGS`; killed on exit whatever happened."""
    sp = ServerProcess(args, cache_dir)
    try:
        if ready:
            sp.wait_ready()
        yield sp
    finally:
        sp.kill()
