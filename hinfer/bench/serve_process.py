"""`hinfer serve` as a child process for the serving benchmarks: started on a port the OS picks (read back
from its log), waited for on /health, stopped with SIGTERM (the server's graceful drain) and killed if it
overstays. Its log goes to a file beside the results."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from hinfer.bench.stream_load import get_json

log = logging.getLogger("hinfer.bench")

_LISTENING = re.compile(r"listening on (http://\S+?)\s")
_PLAN_DEVICE = re.compile(r"memory plan \((.+?)\):")


class ServeProcess:
    def __init__(self, model: str, flags: list[str], log_path: Path,
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        repo = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        full_env = {**os.environ, "PYTHONPATH": repo + (os.pathsep + path if path else ""), **(env or {})}
        cmd = [sys.executable, "-m", "hinfer", "serve", model, "--host", "127.0.0.1", "--port", "0", *flags]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_file = log_path.open("w")
        self.log_file.write(" ".join(cmd) + "\n")
        self.url: str | None = None
        self.device: str | None = None
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=full_env)  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log_file.write(line)
            self.log_file.flush()
            if self.url is None and (m := _LISTENING.search(line)):
                self.url = m.group(1)
            if self.device is None and (m := _PLAN_DEVICE.search(line)):
                self.device = m.group(1)

    def wait_ready(self, timeout_s: float) -> float:
        """Blocks until /health answers ok; -> seconds since the start. Raises if the server exits or is
        late."""
        deadline = self.started + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                raise RuntimeError(f"hinfer serve exited with {rc}; log: {self.log_file.name}")
            if self.url is not None:
                try:
                    if get_json(self.url + "/health", timeout_s=5).get("status") == "ok":
                        return time.monotonic() - self.started
                except OSError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"hinfer serve not healthy after {timeout_s:.0f} s; log: {self.log_file.name}")

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (requests still running get the server's drain time), then a kill past `timeout_s`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("hinfer serve still running %.0f s after SIGTERM: killed", timeout_s)
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)
        self.log_file.close()
        return self.proc.returncode
