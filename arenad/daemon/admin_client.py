"""Admin commands: ``arenad season``, ``exclude``, ``hide``, ``merge``, ``suspects``, ``recompute``,
``admin``.

Each sends one request to the running daemon's admin socket (``[admin] unix`` inside the state
directory, found through ``--config``; or ``--socket PATH``; or ``--connect HOST:PORT`` with
``--token-file``) and prints the JSON answer. Exit 0 when the daemon answered ``ok``, 1 when it
refused, 2 when there was no answer. ``arenad recompute --offline`` works on a stopped daemon's
state directory instead: it rebuilds every scope from the archive and writes a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from arenad.daemon.config import _off, parse_hostport
from arenad.errors import ArenadError
from arenad.settings import load_settings

DEFAULT_TIMEOUT = 30.0


def _when(text: str) -> float:
    """Unix seconds, or an ISO 8601 date-time with a zone (``2026-12-01T18:00:00Z``)."""
    try:
        value = float(text)
    except ValueError:
        try:
            d = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"not unix seconds or an ISO date-time: {text!r}") from e
        if d.tzinfo is None:
            raise argparse.ArgumentTypeError(f"give a time zone (e.g. Z) in {text!r}") from None
        return d.timestamp()
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite time: {text!r}")
    return value


def _connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="the daemon's settings file (finds the admin socket)")
    p.add_argument("--socket", metavar="PATH", help="admin Unix socket (default: from --config)")
    p.add_argument("--connect", metavar="HOST:PORT", help="admin TCP address (needs --token-file)")
    p.add_argument("--token-file", type=Path, help="file holding the admin token")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait (default 30)")


def add_admin_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("season", help="start a season (admin)")
    sp.add_argument("action", choices=("start",))
    sp.add_argument("name")
    sp.add_argument("--reset", choices=("continuous", "softer", "soft", "hard", "custom"), default=None)
    sp.add_argument("--alpha", type=float, default=None, help="with --reset custom")
    sp.add_argument("--lambda", dest="lam", type=float, default=None, help="with --reset custom")
    _connection_args(sp)

    ep = sub.add_parser("exclude", help="exclude a player's or a server's events and recompute (admin)")
    who = ep.add_mutually_exclusive_group(required=True)
    who.add_argument("--player")
    who.add_argument("--server")
    who.add_argument("--list", action="store_true", help="list the rules in force")
    who.add_argument("--remove", type=int, metavar="RULE", help="remove a rule (its events count again)")
    ep.add_argument("--from", dest="start", type=_when, help="with --server: unix seconds or ISO time")
    ep.add_argument("--to", dest="end", type=_when, help="with --server: unix seconds or ISO time")
    ep.add_argument("--reason", default="")
    _connection_args(ep)

    rp = sub.add_parser("recompute", help="replay history into fresh state and swap it in (admin)")
    rp.add_argument("--scope", help="one scope (default: all)")
    rp.add_argument(
        "--from", dest="start", type=_when, help="replay from the newest snapshot before this time"
    )
    rp.add_argument("--wait", action="store_true", help="wait until the result is swapped in")
    rp.add_argument("--status", action="store_true", help="show the last or running recompute")
    rp.add_argument("--offline", action="store_true", help="on a stopped daemon's state directory")
    _connection_args(rp)

    hp = sub.add_parser("hide", help="leave a player out of public lists; their rating still counts (admin)")
    hp.add_argument("player", nargs="?")
    hp.add_argument("--undo", action="store_true", help="show the player again")
    hp.add_argument("--list", action="store_true", help="list the hidden players")
    hp.add_argument("--reason", default="")
    _connection_args(hp)

    mp = sub.add_parser("merge", help="rate PLAYER as INTO, re-rating PLAYER's history as INTO's (admin)")
    mp.add_argument("into", nargs="?", help="the player who stays")
    mp.add_argument("player", nargs="?", help="the player merged into INTO")
    mp.add_argument("--list", action="store_true", help="list the merges (aliases)")
    mp.add_argument("--remove", type=int, metavar="RULE", help="undo a merge (its rule id) and recompute")
    mp.add_argument(
        "--steam-ids",
        action="store_true",
        help="merge players of old Steam ID spellings into [U:1:Z] (upgrade)",
    )
    mp.add_argument("--reason", default="")
    _connection_args(mp)

    sp = sub.add_parser("suspects", help="the boosting report: pairs far above chance (admin)")
    sp.add_argument("--limit", type=int, default=50)
    _connection_args(sp)

    ap = sub.add_parser("admin", help="send one raw admin request (JSON) to the daemon")
    ap.add_argument("json", help='e.g. \'{"op": "scopes"}\'')
    _connection_args(ap)


def run_admin(args: argparse.Namespace) -> int:
    try:
        if args.command == "recompute" and args.offline:
            return _offline_recompute(args)
        request = _request(args)
        response = _exchange(args, request)
        if args.command == "recompute" and args.wait and response.get("ok"):
            # Done when a run or a failure was counted after this request (a request queued
            # behind a running recompute waits for that one and then its own).
            before = response["recompute"]
            queued = bool(before.get("running"))
            runs, failures = int(before["runs"]), int(before["failures"])
            deadline = time.monotonic() + args.timeout
            while True:
                status = _exchange(args, {"op": "recompute_status"})
                rc = status.get("recompute", {})
                finished = int(rc.get("runs", 0)) - runs + int(rc.get("failures", 0)) - failures
                if not rc.get("running") and finished >= (2 if queued else 1):
                    response = status
                    if int(rc.get("failures", 0)) > failures:
                        response["ok"] = False  # the daemon answered, but the recompute failed
                    break
                if time.monotonic() > deadline:
                    raise ArenadError(f"the recompute did not finish within {args.timeout:g} s")
                time.sleep(0.1)
    except ArenadError as e:
        print(f"arenad {args.command}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(response, indent=2, ensure_ascii=False))
    return 0 if response.get("ok") else 1


def _request(args: argparse.Namespace) -> dict[str, Any]:
    if args.command == "season":
        req: dict[str, Any] = {"op": "season_start", "name": args.name}
        if args.reset is not None:
            req["reset"] = args.reset
        if args.alpha is not None:
            req["alpha"] = args.alpha
        if args.lam is not None:
            req["lambda"] = args.lam
        return req
    if args.command == "exclude":
        if args.list:
            return {"op": "exclusions"}
        if args.remove is not None:
            return {"op": "include", "rule": args.remove}
        req = {"op": "exclude", "reason": args.reason}
        if args.player is not None:
            req["player"] = args.player
        else:
            req["server"] = args.server
            if args.start is not None:
                req["from"] = args.start
            if args.end is not None:
                req["to"] = args.end
        return req
    if args.command == "hide":
        if args.list:
            return {"op": "hidden"}
        if not args.player:
            raise ArenadError("give a player (or --list)")
        if args.undo:
            return {"op": "unhide", "player": args.player}
        return {"op": "hide", "player": args.player, "reason": args.reason}
    if args.command == "merge":
        if args.list:
            return {"op": "aliases"}
        if args.remove is not None:
            return {"op": "include", "rule": args.remove}
        if args.steam_ids:
            return {"op": "merge_steam_ids"}
        if not args.into or not args.player:
            raise ArenadError("give INTO and PLAYER (or --list, or --remove RULE)")
        return {"op": "merge", "into": args.into, "player": args.player, "reason": args.reason}
    if args.command == "suspects":
        return {"op": "suspects", "limit": args.limit}
    if args.command == "recompute":
        if args.status:
            return {"op": "recompute_status"}
        req = {"op": "recompute"}
        if args.scope is not None:
            req["scope"] = args.scope
        if args.start is not None:
            req["from"] = args.start
        return req
    try:
        raw = json.loads(args.json)
    except ValueError as e:
        raise ArenadError(f"not JSON: {e}") from e
    if not isinstance(raw, dict):
        raise ArenadError("the request must be a JSON object")
    return raw


def _socket_path(args: argparse.Namespace) -> str:
    if args.socket:
        return str(args.socket)
    settings = load_settings(args.config)
    if _off(settings.admin.unix):
        raise ArenadError("[admin] unix is off in this config: use --connect with --token-file")
    path = Path(settings.admin.unix)
    if not path.is_absolute():
        path = Path(settings.daemon.state_dir) / path
    return str(path)


def _exchange(args: argparse.Namespace, req: dict[str, Any]) -> dict[str, Any]:
    if args.connect:
        if args.token_file is None:
            raise ArenadError("--connect needs --token-file")
        try:
            req = {**req, "token": Path(args.token_file).read_text().strip()}
        except OSError as e:
            raise ArenadError(f"cannot read {args.token_file}: {e.strerror or e}") from e
        host, port = parse_hostport(args.connect)
        where = args.connect
        try:
            sock = socket.create_connection((host, port), timeout=args.timeout)
        except OSError as e:
            raise ArenadError(f"cannot connect to {where}: {e.strerror or e}") from e
    else:
        where = _socket_path(args)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(args.timeout)
        try:
            sock.connect(where)
        except OSError as e:
            sock.close()
            raise ArenadError(f"cannot connect to {where}: {e.strerror or e} (is the daemon running?)") from e
    with sock:
        try:
            sock.sendall(json.dumps(req).encode() + b"\n")
            buf = bytearray()
            while not buf.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise ArenadError(f"{where} closed the connection without an answer")
                buf += chunk
        except TimeoutError as e:
            raise ArenadError(f"no answer from {where} within {args.timeout:g} s") from e
        except OSError as e:
            raise ArenadError(f"connection to {where} failed: {e.strerror or e}") from e
    try:
        out = json.loads(buf)
    except ValueError as e:
        raise ArenadError(f"the answer is not JSON: {bytes(buf[:200])!r}") from e
    if not isinstance(out, dict):
        raise ArenadError("the answer is not a JSON object")
    return out


def _offline_recompute(args: argparse.Namespace) -> int:
    """Rebuild a stopped daemon's state from its history and write it as the newest checkpoint."""
    from arenad.daemon.recovery import offline_recompute  # noqa: PLC0415 - the daemon's imports

    settings = load_settings(args.config)
    report = offline_recompute(settings, scope=args.scope, from_t=args.start)
    print(json.dumps({"ok": True, **report}, indent=2))
    return 0
