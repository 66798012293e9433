"""The HTTP/1.1 framing the web adapter pays per request: h11 (the adapter before) against llhttp
through httptools (arenad/web/server.py), without the network and without the answer itself.

Run:  .venv/bin/python -m bench.web_framing [--requests 3000] [--json]

Per request: parse one GET head (a player lookup with three headers, and a batch of 256 ids in its
query string) and frame one answer with the adapter's own headers (1.2 KB and 40 KB bodies). h11
on one keep-alive connection (``start_next_cycle`` between requests), as the old adapter used it;
httptools fed the same bytes, its callbacks collecting the target and headers as the adapter's do,
the answer framed as ``_HttpConnection._write`` frames it. Best of five runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import h11
import httptools

from bench.core import loadavg, machine
from bench.web import commit

PLAYER = b"GET /api/v1/players/somebody123 HTTP/1.1\r\nHost: bench\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n"
BATCH = (
    b"GET /api/v1/players?ids="
    + b",".join(b"player%06d" % i for i in range(256))
    + b" HTTP/1.1\r\nHost: bench\r\n\r\n"
)
HEADERS = [
    ("Content-Type", "application/json"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
    ("ETag", '"0123456789abcdef01234567"'),
    ("Cache-Control", "public, max-age=5"),
    ("Server", "arenad"),
]


def with_h11() -> Callable[[bytes, bytes], bytes]:
    conn = h11.Connection(h11.SERVER)

    def one(req: bytes, body: bytes) -> bytes:
        if conn.our_state is h11.DONE:
            conn.start_next_cycle()
        conn.receive_data(req)
        event = conn.next_event()
        assert isinstance(event, h11.Request)
        conn.next_event()  # EndOfMessage
        head = conn.send(
            h11.Response(status_code=200, headers=[*HEADERS, ("Content-Length", str(len(body)))])
        )
        return (
            (head or b"") + (conn.send(h11.Data(data=body)) or b"") + (conn.send(h11.EndOfMessage()) or b"")
        )

    return one


class _Collect:
    def __init__(self) -> None:
        self.url = b""
        self.headers: dict[str, str] = {}

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")


def with_llhttp() -> Callable[[bytes, bytes], bytes]:
    seen = _Collect()
    parser = httptools.HttpRequestParser(seen)

    def one(req: bytes, body: bytes) -> bytes:
        seen.url, seen.headers = b"", {}
        parser.feed_data(req)
        head = ["HTTP/1.1 200 OK\r\n"]
        head.extend(f"{name}: {value}\r\n" for name, value in HEADERS)
        head.append(f"Content-Length: {len(body)}\r\n\r\n")
        return "".join(head).encode("latin-1") + body

    return one


def best_us(one: Callable[[bytes, bytes], bytes], req: bytes, body: bytes, n: int) -> float:
    one(req, body)
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            one(req, body)
        runs.append((time.perf_counter() - t0) / n)
    return round(min(runs) * 1e6, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.web_framing", description=__doc__)
    ap.add_argument("--requests", type=int, default=3000, help="requests per run (best of five)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    load = loadavg()
    cases = {
        "player lookup, 1.2 KB answer": (PLAYER, b"x" * 1200),
        "batch of 256 ids, 40 KB answer": (BATCH, b"x" * 40_000),
    }
    out = {
        case: {
            name: best_us(make(), req, body, args.requests)
            for name, make in (("h11", with_h11), ("llhttp", with_llhttp))
        }
        for case, (req, body) in cases.items()
    }
    sys.stdout.write(f"bench.web_framing at {commit()}, load {load} → {loadavg()}\n\n")
    sys.stdout.write("| request | h11 µs | llhttp µs |\n|---|---:|---:|\n")
    for case, r in out.items():
        sys.stdout.write(f"| {case} | {r['h11']} | {r['llhttp']} |\n")
    if args.json:
        sys.stdout.write(
            json.dumps({"commit": commit(), "machine": machine(), "loadavg_start": load, "us": out}) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
