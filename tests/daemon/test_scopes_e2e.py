"""Scopes, seasons, exclusions and recompute in a real daemon, checked against offline replays.

Every comparison is of whole engine states (``Engine.export_state``: every column byte for
byte, every counter), taken from the daemon's own checkpoint after a clean stop, against a
ScopeSet or plain Engine fed the same events offline.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
from daemon_harness import DaemonProcess
from waiting import wait_until

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from arenad.daemon.history import Snapshots, rebuild_from_history
from arenad.daemon.recompute import RECOMPUTE_FILE
from arenad.daemon.state import Checkpoints
from arenad.scopes import RESET_PRESETS, EventWindow, Exclusions, Rule, ScopeConfig, ScopeSet

SERVERS = ("eu-1", "eu-2", "us-1")


def canon(state: dict[str, Any]) -> Any:
    """An engine state as the checkpoint stores it (msgpack turns tuples into lists)."""
    return msgpack.unpackb(msgpack.packb(state, use_bin_type=True), raw=False, strict_map_key=False)


def checkpoint_scopes(state_dir: Path) -> dict[str, Any]:
    (_seq, path), *_ = Checkpoints(state_dir).list()
    return dict(Checkpoints.read(path)["scopes"])


def stream(
    n: int, players: int, seed: int, t0: float, *, servers: tuple[str | None, ...] = SERVERS
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        a, b = rng.sample(range(players), 2)
        ev: dict[str, Any] = {"t": t0 + k * 0.5, "attacker": f"p{a:03d}", "victim": f"p{b:03d}"}
        server = rng.choice(servers)
        if server is not None:
            ev["server"] = server
        out.append(ev)
    return out


def feed(target: ScopeSet | Engine, events: list[dict[str, Any]]) -> None:
    for ev in events:
        if isinstance(target, ScopeSet):
            target.feed(ev["attacker"], ev["victim"], ev["t"], ev.get("server"))
        else:
            target.feed(ev["attacker"], ev["victim"], ev["t"])


def write_config(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def wait_applied(d: DaemonProcess, seq: int, timeout: float = 60.0) -> dict[str, Any]:
    """Until every journaled record up to ``seq`` went through the engine (stats ``journal_seq``
    and the engine clock move together only once the step is applied: poll both)."""
    return d.wait_for(lambda s: s["journal_seq"] >= seq and s["queue_depth"] == 0, timeout)


def test_each_scope_equals_an_offline_replay_of_its_own_events(tmp_path: Path) -> None:
    now = time.time()
    events = stream(2400, 40, seed=3, t0=now - 2400, servers=(*SERVERS, None))
    cup_start, cup_end = events[600]["t"], events[1800]["t"]
    config = write_config(
        tmp_path / "a.toml",
        '[scopes]\nkinds = ["global", "server", "event"]\nservers = ["eu-1"]\n'
        f'[[scopes.event]]\nname = "cup"\nstart = {cup_start}\nend = {cup_end}\nservers = ["eu-1", "eu-2"]\n'
        "[daemon]\ncheckpoint_interval = 3600\n",
    )
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        d.send_events(events)
        wait_applied(d, len(events))
        # Journaled is not yet applied: an engine step yields to queries at its slice ends, so
        # the ladder read below waits for the engine's own count of every kill as well.
        d.wait_for(lambda s: s["applied"] + s["filtered"] >= len(events), 60.0)
        scopes = {row["scope"] for row in d.query({"op": "scopes"})["scopes"]}
        assert scopes == {"global", "server:eu-1", "server:eu-2", "server:us-1", "event:cup"}
        eu1 = d.ladder("server:eu-1")
        bad = d.query({"op": "top", "n": 3, "scope": "server:nowhere"})
        assert bad["ok"] is False and "no scope 'server:nowhere'" in bad["error"]
        # Per-scope series only for the configured server (bounded label set).
        players = d.series("arenad_scope_players", "scope")
        assert set(players) == {"global", "server:eu-1", "event:cup"}
        assert d.metric("arenad_scopes", 'kind="server"') == 3
        assert d.stop() == 0
    finally:
        d.kill()
    saved = checkpoint_scopes(tmp_path / "state")["engines"]
    plain = Engine(ADRParams())
    feed(plain, events)
    assert canon(plain.export_state()) == saved["global"]
    for server in SERVERS:
        own = Engine(ADRParams())
        feed(own, [e for e in events if e.get("server") == server])
        assert canon(own.export_state()) == saved[f"server:{server}"], server
    cup = Engine(ADRParams(decay=False, idle_after=0.0))
    feed(cup, [e for e in events if cup_start <= e["t"] < cup_end and e.get("server") in ("eu-1", "eu-2")])
    assert canon(cup.export_state()) == saved["event:cup"]
    # What the query port showed for server:eu-1 is that ladder, best first.
    ref = Engine(ADRParams())
    feed(ref, [e for e in events if e.get("server") == "eu-1"])
    assert [(r["player"], r["mu"]) for r in eu1] == [(ref.names[i], ref.mu(i)) for i in ref.ladder_ids()]
    # `arenad replay --scope server:eu-1` writes the same ladder from the event file.
    src = tmp_path / "events.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in events))
    out = tmp_path / "eu1.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "arenad", "replay", "--config", str(config), "--scope", "server:eu-1",
         "--out", str(out), str(src)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["player"], r["mu"]) for r in rows] == [(ref.names[i], ref.mu(i)) for i in ref.ladder_ids()]


def test_season_start_and_exclusion_survive_kill_9_and_equal_a_replay_without_them(tmp_path: Path) -> None:
    now = time.time()
    events = stream(3000, 30, seed=5, t0=now - 3000)
    first, second = events[:1800], events[1800:]
    config = write_config(
        tmp_path / "a.toml",
        '[scopes]\nkinds = ["global", "server", "season"]\n'
        "[daemon]\ncheckpoint_interval = 0.5\n[history]\nsnapshot_interval = 1.0\n",
    )
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        d.send_events(first)
        wait_applied(d, len(first))
        started = d.admin({"op": "season_start", "name": "s1", "reset": "soft"})
        assert started["ok"], started
        assert started["seq"] == len(first) + 1  # journaled as a control record
        again = d.admin({"op": "season_start", "name": "s1"})
        assert again["ok"] is False and "exists already" in again["error"]
        season_top = d.query({"op": "top", "n": 5, "scope": "season"})
        assert season_top["ok"] and all(r["provisional"] for r in season_top["players"])
        d.send_events(second)
        wait_applied(d, len(events) + 1)
        cheater = "p007"
        ex = d.admin({"op": "exclude", "player": cheater, "reason": "aimbot"})
        assert ex["ok"], ex
        assert ex["rule"] == {"id": 1, "reason": "aimbot", "player": cheater}
        d.wait_for(lambda s: s["recompute"]["runs"] >= 1 and not s["recompute"]["running"])
        gone = d.query({"op": "get", "player": cheater})
        assert gone["ok"] is False and "unknown player" in gone["error"]
        assert d.metric("arenad_recomputes_total") == 1
        # A crash once the recomputed state is checkpointed (the daemon then drops the request file):
        # the exclusion and its result survive.
        wait_until(lambda: not (tmp_path / "state" / RECOMPUTE_FILE).exists(), "the result checkpointed")
        d.kill()
        d = DaemonProcess(tmp_path / "state", config=config).start()
        d.wait_for(lambda s: not s["recompute"]["running"] and s["journal_seq"] == len(events) + 2)
        assert d.admin({"op": "exclusions"})["rules"] == [{"id": 1, "reason": "aimbot", "player": cheater}]
        assert d.stop() == 0
    finally:
        d.kill()
    ref = ScopeSet(ADRParams(), ScopeConfig(kinds=("global", "server", "season")))

    def clean(part: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e for e in part if cheater not in (e["attacker"], e["victim"])]

    feed(ref, clean(first))
    ref.start_season("s1", 0.0, RESET_PRESETS["soft"])
    feed(ref, clean(second))
    saved = checkpoint_scopes(tmp_path / "state")
    assert saved["season"] == "s1"
    assert set(saved["engines"]) == set(ref.engines)
    for key, eng in ref.engines.items():
        assert canon(eng.export_state()) == saved["engines"][key], key


def test_recompute_under_live_load_loses_and_repeats_nothing(tmp_path: Path) -> None:
    now = time.time()
    events = stream(30_000, 200, seed=11, t0=now - 30_000 * 0.5 - 60)
    preload, live = events[:24_000], events[24_000:]
    config = write_config(
        tmp_path / "a.toml",
        '[scopes]\nkinds = ["global", "server"]\n[daemon]\ncheckpoint_interval = 0.3\n'
        "[history]\nsnapshot_interval = 0.5\n",
    )
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        d.send_events(preload)
        wait_applied(d, len(preload))
        done = threading.Event()

        def send() -> None:
            for k in range(0, len(live), 50):
                d.send_udp(msgpack.packb(live[k : k + 50]))
                time.sleep(0.01)  # the pace of the live load, not a synchronisation
            done.set()

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        d.wait_for(lambda s: s["journal_seq"] > len(preload))  # the live load has begun
        runs: list[dict[str, Any]] = []
        while not done.is_set():  # recompute again and again while the live events come in
            asked = d.admin({"op": "recompute"})
            assert asked["ok"], asked
            before = len(runs)

            def finished(s: dict[str, Any], n: int = before) -> bool:
                return bool(s["recompute"]["runs"] > n and not s["recompute"]["running"])

            runs.append(d.wait_for(finished)["recompute"])
        sender.join(30)
        wait_applied(d, len(events))
        assert all(r["failures"] == 0 for r in runs)
        assert any(r["caught_up"] > 0 for r in runs), runs  # live events arrived during a rebuild
        stats = d.stats()
        assert d.stop() == 0
    finally:
        d.kill()
    ref = ScopeSet(ADRParams(), ScopeConfig(kinds=("global", "server")))
    feed(ref, events)
    assert stats["applied"] == ref.global_engine.applied  # each live kill counted once
    saved = checkpoint_scopes(tmp_path / "state")["engines"]
    for key, eng in ref.engines.items():
        assert canon(eng.export_state()) == saved[key], key


def test_history_rebuild_full_and_from_a_snapshot_are_bit_identical(tmp_path: Path) -> None:
    now = time.time()
    events = stream(6000, 50, seed=2, t0=now - 6000)
    config = write_config(
        tmp_path / "a.toml",
        '[scopes]\nkinds = ["global", "server"]\n[daemon]\ncheckpoint_interval = 0.2\n'
        f'state_dir = "{tmp_path / "state"}"\n'
        "[history]\nsnapshot_interval = 0.2\narchive_file_bytes = 8192\n",
    )
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        for k in range(0, len(events), 500):
            d.send_events(events[k : k + 500])
            wait_applied(d, k + 500)
            # A checkpoint in between (snapshots and archiving happen at checkpoints).
            covered = k + 500
            d.wait_for(lambda s: s["checkpoint_seq"] >= covered)  # noqa: B023 - used at once
        assert d.metric("arenad_archive_bytes") > 0
        assert d.stop() == 0
    finally:
        d.kill()
    state = tmp_path / "state"
    archive = json.loads((state / "archive" / "manifest.json").read_text())["files"]
    assert len(archive) >= 2 and archive[0]["first"] == 1  # several files, from the first event
    snaps = Snapshots(state / "snapshots", 48).list()
    assert len(snaps) >= 3
    params = ADRParams()
    cfg = ScopeConfig(kinds=("global", "server"))
    full = rebuild_from_history(state, params, cfg, Exclusions(), upto=len(events)).scopes
    mid_seq, mid_clock, _ = snaps[len(snaps) // 2]
    partial = rebuild_from_history(
        state,
        params,
        cfg,
        Exclusions(),
        upto=len(events),
        from_t=mid_clock + 1.0,
        snapshots=Snapshots(state / "snapshots", 48),
    )
    assert partial.base_seq == mid_seq > 0  # it did start from that snapshot
    fresh = ScopeSet(params, cfg)
    feed(fresh, events)
    for key in fresh.engines:
        want = canon(fresh.engines[key].export_state())
        assert canon(full.engines[key].export_state()) == want, key
        assert canon(partial.scopes.engines[key].export_state()) == want, key
    # `arenad recompute --offline` on the stopped daemon's directory writes that state.
    run = subprocess.run(
        [sys.executable, "-m", "arenad", "recompute", "--offline", "--config", str(config)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    saved = checkpoint_scopes(state)["engines"]
    for key in fresh.engines:
        assert saved[key] == canon(fresh.engines[key].export_state()), key


def test_admin_is_never_served_on_the_query_port_and_tcp_admin_needs_the_token(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-admin-token-0123456789\n")
    config = write_config(
        tmp_path / "a.toml",
        f'[scopes]\nkinds = ["global", "season"]\n[admin]\nlisten = "127.0.0.1:0"\ntoken_file = "{token}"\n',
    )
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        for op in ("season_start", "exclude", "recompute", "reload"):
            r = d.query({"op": op, "name": "x"})
            assert r["ok"] is False and r["error"].startswith(f"unknown op '{op}'"), r
        host, port = d.addr("admin_tcp")

        def tcp(req: dict[str, Any]) -> dict[str, Any]:
            with socket.create_connection((host, port), timeout=10) as s:
                s.sendall(json.dumps(req).encode() + b"\n")
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = s.recv(65536)
                    assert chunk
                    buf += chunk
                return dict(json.loads(buf))

        assert tcp({"op": "scopes"})["error"].startswith("forbidden")
        assert tcp({"op": "scopes", "token": "wrong-token-wrong-token"})["error"].startswith("forbidden")
        ok = tcp({"op": "season_start", "name": "opening", "token": token.read_text().strip()})
        assert ok["ok"], ok
        # The Unix socket is owner-only: the filesystem decides who is an admin.
        mode = Path(d.addresses["admin"]).stat().st_mode & 0o777
        assert mode == 0o600
        # At most 16 admin connections at once; the 17th is told so and closed.
        held = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(16)]
        try:
            for s in held:
                s.settimeout(10)
                s.connect(str(d.addresses["admin"]))
                s.sendall(b'{"op": "scopes"}\n')
                assert json.loads(s.recv(65536))["ok"] is True  # each one is being served
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as extra:
                extra.settimeout(10)
                extra.connect(str(d.addresses["admin"]))
                assert json.loads(extra.recv(65536))["error"] == "too many admin connections"
        finally:
            for s in held:
                s.close()
        assert d.query({"op": "scopes"})["season"] == "opening"
        assert d.stop() == 0
    finally:
        d.kill()


def arenad(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arenad", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_cli_season_exclude_server_window_recompute_and_reload(tmp_path: Path) -> None:
    now = time.time()
    events = stream(2000, 25, seed=9, t0=now - 2000)
    state = tmp_path / "state"
    base = (
        f'[daemon]\nstate_dir = "{state}"\ncheckpoint_interval = 3600\n'
        '[scopes]\nkinds = ["global", "server", "season", "event"]\n'
    )
    config = write_config(tmp_path / "a.toml", base)
    d = DaemonProcess(state, config=config).start()
    try:
        d.send_events(events)
        wait_applied(d, len(events))
        out = arenad("season", "start", "s1", "--reset", "hard", "--config", str(config))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["lambda"] == RESET_PRESETS["hard"].lam
        # eu-2's events in a window were broken: exclude them and wait for the recompute.
        lo, hi = events[500]["t"], events[1500]["t"]
        out = arenad(
            "exclude", "--server", "eu-2", "--from", str(lo), "--to", str(hi), "--config", str(config)
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["rule"]["server"] == "eu-2"
        out = arenad("recompute", "--wait", "--config", str(config))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["recompute"]["failures"] == 0
        out = arenad(
            "query", "--connect", "{}:{}".format(*d.addr("query")), "--scope", "server:eu-2", "top", "3"
        )
        assert out.returncode == 0, out.stderr
        assert len(json.loads(out.stdout)["players"]) == 3
        # Reload: a tournament that started in the past appears and is filled in by a recompute.
        write_config(
            config,
            base + f'[[scopes.event]]\nname = "cup"\nstart = {events[1000]["t"]}\nend = {now + 3600}\n',
        )
        out = arenad("admin", '{"op": "reload"}', "--config", str(config))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["changed"] == ["scopes.event"]
        d.wait_for(lambda s: s["recompute"]["runs"] >= 3 and not s["recompute"]["running"])
        cup = d.query({"op": "stats", "scope": "event:cup"})
        assert cup["ok"], cup
        # A key that needs a restart is refused by name, and nothing changes.
        write_config(config, base.replace("checkpoint_interval = 3600", "checkpoint_interval = 5"))
        out = arenad("admin", '{"op": "reload"}', "--config", str(config))
        assert out.returncode == 1
        assert "daemon.checkpoint_interval" in json.loads(out.stdout)["error"]
        assert d.stop() == 0
    finally:
        d.kill()
    rule = Exclusions()
    rule.add(Rule(1, server="eu-2", start=lo, end=hi))
    cfg = ScopeConfig(
        kinds=("global", "server", "season", "event"),
        events=(EventWindow("cup", events[1000]["t"], now + 3600),),
    )
    ref = ScopeSet(ADRParams(), cfg)
    ref.exclusions = rule
    feed(ref, events)
    ref.start_season("s1", 0.0, RESET_PRESETS["hard"])
    saved = checkpoint_scopes(state)["engines"]
    assert set(saved) == set(ref.engines)
    for key, eng in ref.engines.items():
        assert canon(eng.export_state()) == saved[key], key


def test_reload_gives_new_query_connections_the_new_rate_limit(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = write_config(
        tmp_path / "a.toml", f'[daemon]\nstate_dir = "{state}"\n[query]\nrate_limit = 0.5\nburst = 2\n'
    )
    d = DaemonProcess(state, config=config).start()

    def burst(n: int) -> list[bool]:
        with socket.create_connection(d.addr("query"), timeout=10) as s:
            s.sendall(b'{"op": "stats"}\n' * n)
            buf = b""
            while buf.count(b"\n") < n:
                chunk = s.recv(65536)
                assert chunk
                buf += chunk
        return [bool(json.loads(line)["ok"]) for line in buf.splitlines()]

    try:
        assert burst(4) == [True, True, False, False]
        write_config(config, f'[daemon]\nstate_dir = "{state}"\n[query]\nrate_limit = 0.0\nburst = 2\n')
        out = arenad("admin", '{"op": "reload"}', "--config", str(config))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["changed"] == ["query.rate_limit"]
        assert burst(6) == [True] * 6
        assert d.stop() == 0
    finally:
        d.kill()
