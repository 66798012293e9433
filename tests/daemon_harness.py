"""A real ``arenad run`` process for end-to-end tests: start, query, scrape, signal, kill."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
from prometheus_client.parser import text_string_to_metric_families

STARTUP_TIMEOUT = 30.0


class DaemonProcess:
    """One daemon subprocess on loopback ports chosen by the OS (read back from its log)."""

    def __init__(
        self,
        state_dir: Path,
        config: Path | None = None,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.config = config
        self.extra = extra or []
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.addresses: dict[str, Any] = {}
        self.log_lines: list[str] = []
        self._started = threading.Event()
        self._reader: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, udp: str = "127.0.0.1:0", mqtt: str | None = None) -> DaemonProcess:
        args = [sys.executable, "-m", "arenad", "run", "--state-dir", str(self.state_dir)]
        if self.config is not None:
            args += ["--config", str(self.config)]
        args += ["--udp", udp, "--query", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--log-format", "json"]
        if "--web" not in self.extra:  # the HTTP port on a free port too (its default is 8080)
            args += ["--web", "127.0.0.1:0"]
        if mqtt is not None:
            args += ["--mqtt", mqtt]
        args += self.extra
        self._started.clear()
        self.addresses = {}
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        self._reader = threading.Thread(target=self._read_log, args=(self.proc,), daemon=True)
        self._reader.start()
        if not self._started.wait(STARTUP_TIMEOUT) or not self.addresses:  # timed out, or exited
            self.kill()
            raise AssertionError("arenad did not start:\n" + "\n".join(self.log_lines[-40:]))
        return self

    def _read_log(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.log_lines.append(line.rstrip())
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "arenad_started":
                self.addresses = rec
                self._started.set()
        if proc is self.proc:  # it exited (its log says why): start() need not wait out the timeout
            self._started.set()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._join()
        return code

    def kill(self) -> None:
        """kill -9: no chance to flush or checkpoint."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._join()

    def _join(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ------------------------------------------------------------------ endpoints
    def addr(self, name: str) -> tuple[str, int]:
        host, port = self.addresses[name]
        return str(host), int(port)

    def query(self, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        with socket.create_connection(self.addr("query"), timeout=timeout) as s:
            s.sendall(json.dumps(request).encode() + b"\n")
            return dict(json.loads(_read_line(s)))

    def query_raw(self, line: bytes, timeout: float = 10.0) -> bytes:
        with socket.create_connection(self.addr("query"), timeout=timeout) as s:
            s.sendall(line)
            return _read_line(s)

    def metrics(self) -> str:
        host, port = self.addr("metrics")
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def metric(self, name: str, labels: str = "") -> float:
        """The value of one sample, e.g. metric("arenad_events_rejected_total", 'reason="oversize"')."""
        want = f"{name}{{{labels}}}" if labels else name
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key == want:
                return float(value)
        return 0.0

    def series(self, name: str, label: str, text: str | None = None) -> dict[str, float]:
        """Every sample of ``name`` by the value of one label, e.g. series("arenad_model_auc", "model")."""
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(self.metrics() if text is None else text):
            for sample in family.samples:
                if sample.name == name and label in sample.labels:
                    out[sample.labels[label]] = float(sample.value)
        return out

    def send_udp(self, payload: bytes, source: str = "127.0.0.1") -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((source, 0))
            s.sendto(payload, self.addr("udp"))

    def send_events(self, events: list[dict[str, Any]], batch: int = 50) -> None:
        for k in range(0, len(events), batch):
            self.send_udp(msgpack.packb(events[k : k + batch]))

    def stats(self) -> dict[str, Any]:
        out = self.query({"op": "stats"})
        assert out["ok"], out
        return out

    def wait_for(self, condition: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
        """Poll ``stats`` until ``condition`` holds (bounded)."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = self.stats()
            if condition(last):
                return last
            time.sleep(0.05)
        raise AssertionError(f"condition not met within {timeout} s; last stats: {last}")

    def admin(self, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """One request on the admin Unix socket."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.addresses["admin"]))
            s.sendall(json.dumps(request).encode() + b"\n")
            return dict(json.loads(_read_line(s)))

    def ladder(self, scope: str = "global") -> list[dict[str, Any]]:
        """Every player's row, best first (top with n = the number of players)."""
        players = int(self.query({"op": "stats", "scope": scope})["players"])
        rows: list[dict[str, Any]] = []
        while len(rows) < players:
            want = min(1000, players - len(rows))
            out = self.query({"op": "top", "n": want, "offset": len(rows), "scope": scope})
            assert out["ok"], out
            rows.extend(out["players"])
            if len(out["players"]) < want:  # hidden players count in stats but are not listed
                break
        return rows


def _read_line(s: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf
