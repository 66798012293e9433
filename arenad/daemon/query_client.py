"""``arenad query``: send one request to a running daemon and print its JSON response.

::

    arenad query [--connect HOST:PORT | --unix PATH] [--timeout S] [--compact] OP ...
        get PLAYER | top N [--offset K] | around PLAYER N | tiers | predict A B | stats | raw JSON

Exit status: 0 when the daemon answered ``"ok": true``, 1 when it answered ``"ok": false`` (the
error is in the printed response), 2 when there was no usable answer (cannot connect, timed
out, connection closed, not JSON) or the command line was wrong. A plain blocking socket: one
request, one line back, then the connection is closed.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import Sequence
from typing import Any

from arenad.daemon.config import QuerySettings, parse_hostport
from arenad.errors import ArenadError

DEFAULT_CONNECT = QuerySettings().listen
DEFAULT_TIMEOUT = 5.0
#: The longest response line accepted; far above any reply (top 1000 is about 150 kB).
MAX_RESPONSE = 16 * 1024 * 1024
_TCP_DEFAULT_PORT = parse_hostport(DEFAULT_CONNECT)[1]


class QueryClientError(ArenadError):
    """No usable answer from the daemon; the message says why (printed on stderr, exit 2)."""


def add_query_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``query`` subcommand to the ``arenad`` command line."""
    qp = subparsers.add_parser(
        "query",
        help="ask a running daemon: get, top, around, tiers, predict, stats",
        description="Send one request to a running arenad and print the JSON response.",
    )
    where = qp.add_mutually_exclusive_group()
    where.add_argument(
        "--connect",
        metavar="HOST:PORT",
        default=None,
        help=f"TCP address of the query server (default {DEFAULT_CONNECT})",
    )
    where.add_argument("--unix", metavar="PATH", default=None, help="Unix socket of the query server")
    qp.add_argument(
        "--timeout", metavar="S", type=_positive, default=DEFAULT_TIMEOUT, help="seconds to wait (default 5)"
    )
    qp.add_argument("--compact", action="store_true", help="print the response line as received")
    qp.add_argument(
        "--scope",
        metavar="SCOPE",
        default=None,
        help="leaderboard: global (default), server:ID, season, season:NAME, event:NAME",
    )
    ops = qp.add_subparsers(dest="query_op", metavar="OP", required=True)
    op = ops.add_parser("get", help="one player's rating, tier, placement, rank and percentile")
    op.add_argument("player")
    op = ops.add_parser("top", help="the best N players")
    op.add_argument("n", type=int)
    op.add_argument("--offset", type=int, default=0, help="skip this many players first")
    op.add_argument("--active-only", action="store_true", help="hide players outside the active set")
    op = ops.add_parser("around", help="N players above and below PLAYER")
    op.add_argument("player")
    op.add_argument("n", type=int)
    ops.add_parser("tiers", help="tier boundaries and counts")
    op = ops.add_parser("predict", help="§3.1 probability that A kills B")
    op.add_argument("a")
    op.add_argument("b")
    ops.add_parser("stats", help="engine and daemon figures")
    ops.add_parser("scopes", help="the leaderboards this daemon keeps")
    op = ops.add_parser("raw", help="send JSON text as the request, unchanged")
    op.add_argument("json")


def request_of(args: argparse.Namespace) -> bytes:
    """The request line for parsed ``arenad query`` arguments."""
    op = args.query_op
    if op == "raw":
        text: str = args.json.strip()
        if "\n" in text or "\r" in text:
            raise QueryClientError("raw request must be a single line")
        return text.encode("utf-8", "surrogateescape") + b"\n"
    request: dict[str, Any] = {"op": op}
    if op == "get":
        request["player"] = args.player
    elif op == "top":
        request["n"] = args.n
        request["offset"] = args.offset
    elif op == "around":
        request["player"] = args.player
        request["n"] = args.n
    elif op == "predict":
        request["a"] = args.a
        request["b"] = args.b
    if op == "top" and args.active_only:
        request["active_only"] = True
    if args.scope is not None and op != "scopes":
        request["scope"] = args.scope
    return json.dumps(request).encode("ascii") + b"\n"


def run_query(args: argparse.Namespace) -> int:
    """Send the request, print the response; 0 ok, 1 the daemon refused it, 2 no usable answer."""
    try:
        line = request_of(args)
        raw = _exchange(args, line)
        try:
            response = json.loads(raw)
        except ValueError as e:
            raise QueryClientError(f"the server's response is not JSON: {_cut(raw)}") from e
        if not isinstance(response, dict) or not isinstance(response.get("ok"), bool):
            raise QueryClientError(f'the server\'s response has no "ok" field: {_cut(raw)}')
    except QueryClientError as e:
        print(f"arenad query: {e}", file=sys.stderr)
        return 2
    if args.compact:
        sys.stdout.write(raw.decode("utf-8", "replace").rstrip("\r\n") + "\n")
    else:
        print(json.dumps(response, indent=2, ensure_ascii=False))
    return 0 if response["ok"] else 1


def _exchange(args: argparse.Namespace, line: bytes) -> bytes:
    timeout: float = args.timeout
    where = args.unix if args.unix is not None else args.connect or DEFAULT_CONNECT
    try:
        if args.unix is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(args.unix)
            except BaseException:
                sock.close()
                raise
        else:
            try:
                host, port = parse_hostport(where, default_port=_TCP_DEFAULT_PORT)
            except ValueError as e:
                raise QueryClientError(f"--connect: {e}") from e
            sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError as e:
        raise QueryClientError(f"cannot connect to {where}: timed out after {timeout:g} s") from e
    except OSError as e:
        raise QueryClientError(f"cannot connect to {where}: {e.strerror or e}") from e
    with sock:
        try:
            sock.sendall(line)
            return _read_line(sock)
        except TimeoutError as e:
            raise QueryClientError(f"no response from {where} within {timeout:g} s") from e
        except OSError as e:
            raise QueryClientError(f"connection to {where} failed: {e.strerror or e}") from e


def _read_line(sock: socket.socket) -> bytes:
    buf = bytearray()
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise QueryClientError("the server closed the connection without a response")
        nl = chunk.find(b"\n")
        if nl >= 0:
            buf += chunk[:nl]
            return bytes(buf)
        buf += chunk
        if len(buf) > MAX_RESPONSE:
            raise QueryClientError(f"response longer than {MAX_RESPONSE} bytes")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _cut(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    return text if len(text) <= 200 else text[:197] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m arenad.daemon.query_client ...``: the query command on its own."""
    parser = argparse.ArgumentParser(prog="arenad")
    add_query_parser(parser.add_subparsers(dest="command", required=True))
    return run_query(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
