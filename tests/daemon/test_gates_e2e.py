"""Anti-boosting gates, the boosting report and merges in a real daemon (issue 17).

The daemon's own checkpoint after a clean stop is compared, whole engine state against whole
engine state, with the same events applied offline by the applier under the rules in force.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
from daemon_harness import DaemonProcess
from waiting import wait_until

from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.daemon.state import Checkpoints, JournalRecord
from arenad.gates import GateConfig
from arenad.scopes import Rule, ScopeConfig, ScopeSet

GATES = GateConfig(min_players=4, window=300.0, bots="excluded", suspects=True, suspect_min_kills=8)
CONFIG = """
[gates]
min_players = 4
window = 300.0
bots = "excluded"
suspects = true
suspect_min_kills = 8
[history]
ratings = false
"""


def arenad(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arenad", *args], capture_output=True, text=True, timeout=60, check=False
    )


def stream(now: float) -> list[dict[str, Any]]:
    """A duo alone on eu-2 first (never rated), then a crowd on eu-1 with a farm in it, a bot,
    and "alt", the second account of p001."""
    rng = random.Random(17)
    out: list[dict[str, Any]] = []
    t = now - 4000.0
    for k in range(40):  # two friends on an empty server
        t += 5.0
        a, v = ("duo-a", "duo-b") if k % 2 else ("duo-b", "duo-a")
        out.append({"t": t, "attacker": a, "victim": v, "server": "eu-2"})
    crowd = [f"p{n:03d}" for n in range(12)]
    for k in range(1200):
        t += 2.5
        if k % 5 == 0:
            a, v = "booster", "feeder"
        elif k % 37 == 0:
            a, v = "bot:Sarge", rng.choice(crowd)
        elif k % 29 == 0:
            a, v = "alt", rng.choice(crowd[2:])
        else:
            a, v = rng.sample([*crowd, "booster", "feeder"], 2)
        out.append({"t": t, "attacker": a, "victim": v, "server": "eu-1"})
    return out


def offline(events: list[dict[str, Any]], merge: Rule) -> ScopeSet:
    scopes = ScopeSet(ADRParams(), ScopeConfig(gates=GATES))
    scopes.exclusions.add(merge)  # a recompute holds the rules in force over the whole history
    records: list[JournalRecord] = [
        (k + 1, e["t"], e["attacker"], e["victim"], e["server"], None) for k, e in enumerate(events)
    ]
    Applier(scopes, rules="fixed").apply_all(records)
    return scopes


def test_gates_report_and_merge_end_to_end(tmp_path: Path) -> None:
    config = tmp_path / "a.toml"
    config.write_text(CONFIG)
    events = stream(time.time())
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        d.send_events(events)
        d.wait_for(lambda s: s["journal_seq"] >= len(events) and s["queue_depth"] == 0, 60.0)

        def reported() -> bool:
            got = d.admin({"op": "suspects"})
            return bool(got["ok"]) and any(s["attacker"] == "booster" for s in got["suspects"])

        wait_until(reported, "the farm reported")
        report = d.admin({"op": "suspects", "limit": 5})
        top = report["suspects"][0]
        assert (top["attacker"], top["victim"]) == ("booster", "feeder")
        assert top["share"] > 0.3 and top["p_value"] < 1e-6 and top["gained"] > 0
        assert d.metric("arenad_boosting_suspects") >= 1
        assert d.metric("arenad_events_filtered_total", 'reason="min_players"') >= 40  # the duo
        assert d.metric("arenad_events_filtered_total", 'reason="bot"') > 0
        duo = d.query({"op": "get", "player": "duo-a"})
        assert duo["ok"] is False and "unknown player" in duo["error"]
        bad = d.admin({"op": "suspects", "limit": 0})
        assert bad["ok"] is False and "limit" in bad["error"]

        # Bad merges: refused, saying why; nothing journaled.
        seq = d.stats()["journal_seq"]
        for req, why in (
            ({"op": "merge", "into": "p001", "player": "p001"}, "into itself"),
            ({"op": "merge", "into": "nobody", "player": "alt"}, "no player 'nobody'"),
            ({"op": "merge", "into": "p001", "player": "ghost"}, "nothing to merge"),
            ({"op": "merge", "into": "p001"}, "missing field 'player'"),
            ({"op": "merge", "into": "p001", "player": "x" * 300}, "at most 256 bytes"),
        ):
            out = d.admin(req)
            assert out["ok"] is False and why in out["error"], (req, out)
        assert d.stats()["journal_seq"] == seq

        merged = d.admin({"op": "merge", "into": "p001", "player": "alt", "reason": "second account"})
        assert merged["ok"], merged
        assert merged["rule"]["into"] == "p001" and merged["recompute"] is not None
        d.wait_for(lambda s: s["recompute"]["runs"] >= 1 and not s["recompute"]["running"], 60.0)
        gone = d.query({"op": "get", "player": "alt"})
        assert gone["ok"] is False and "unknown player" in gone["error"]
        aliases = d.admin({"op": "aliases"})
        assert aliases["aliases"] == {"alt": "p001"}
        again = d.admin({"op": "merge", "into": "p002", "player": "alt"})
        assert again["ok"] is False and "merged into 'p001' already" in again["error"]
        onto = d.admin({"op": "merge", "into": "alt", "player": "p003"})
        assert onto["ok"] is False and "merge into that player" in onto["error"]
        assert d.admin({"op": "exclusions"})["rules"] == []  # merges are listed by op aliases
        assert d.metric("arenad_merges") == 1
        # The same through the command line.
        sock = str(d.addresses["admin"])
        cli = arenad("merge", "--list", "--socket", sock)
        assert cli.returncode == 0 and json.loads(cli.stdout)["aliases"] == {"alt": "p001"}, cli.stderr
        cli = arenad("suspects", "--limit", "1", "--socket", sock)
        assert cli.returncode == 0 and json.loads(cli.stdout)["suspects"][0]["attacker"] == "booster"
        cli = arenad("merge", "p001", "p001", "--socket", sock)
        assert cli.returncode == 1 and "into itself" in json.loads(cli.stdout)["error"]
        assert d.stop() == 0
    finally:
        d.kill()
    (_seq, path), *_ = Checkpoints(tmp_path / "state").list()
    saved = Checkpoints.read(path)["scopes"]
    ref = offline(events, Rule(1, player="alt", into="p001", reason="second account"))
    want = msgpack.unpackb(msgpack.packb(ref.export_state()), raw=False, strict_map_key=False)
    assert saved["engines"]["global"] == want["engines"]["global"]
    assert saved["gates"]["gated"] == want["gates"]["gated"]


def test_a_name_later_seen_with_a_guid_is_merged_from_the_log(tmp_path: Path) -> None:
    """The OpenArena feed's alias is journaled as a merge where the log says it; a recompute
    then re-rates the name's games as the guid's (issue 17)."""
    log = tmp_path / "games.log"
    config = tmp_path / "a.toml"
    config.write_text(
        f'[daemon]\nmax_event_age = 1e10\n[[tail]]\nformat = "openarena"\npath = "{log}"\nfrom_start = true\n'
    )

    def info(slot: int, name: str, at: int, guid: str = "") -> str:
        return f"  0:{at:02d} ClientUserinfoChanged: {slot} n\\{name}\\t\\0\\model\\sarge\\id\\{guid}\n"

    def kill(k: int, v: int, at: int) -> str:
        return f"  {at // 60}:{at % 60:02d} Kill: {k} {v} 10: x killed y by MOD_RAILGUN\n"

    lines = ["  0:00 InitGame: \\g_gametype\\0\\mapname\\dm\\g_timestamp\\2026-11-30 19:20:08\n"]
    lines += [info(0, "Alice", 1, "A1"), info(1, "Bob", 2), info(2, "Carol", 3, "C1")]
    lines += [kill(1, 0, 10), kill(1, 2, 20), kill(0, 1, 30)]  # Bob, without a guid yet
    lines += [info(1, "Bob", 40, "G1")]  # Bob's client now logs a guid
    lines += [kill(1, 0, 50 + 10 * k) for k in range(3)]
    log.write_text("".join(lines))
    d = DaemonProcess(tmp_path / "state", config=config).start(udp="off")
    try:
        d.wait_for(lambda s: s["journal_seq"] >= 7 and s["queue_depth"] == 0, 60.0)
        aliases = d.admin({"op": "aliases"})
        assert aliases["aliases"] == {"name:Bob": "guid:G1"}, aliases
        (rule,) = aliases["merges"]
        assert rule["id"] < 0 and rule["player"] == "name:Bob"  # a feed's merge: no admin id taken
        assert d.query({"op": "get", "player": "name:Bob"})["ok"]  # rated live until a recompute
        asked = d.admin({"op": "recompute"})
        assert asked["ok"], asked
        d.wait_for(lambda s: s["recompute"]["runs"] >= 1 and not s["recompute"]["running"], 60.0)
        gone = d.query({"op": "get", "player": "name:Bob"})
        assert gone["ok"] is False and "unknown player" in gone["error"]
        assert d.query({"op": "get", "player": "guid:G1"})["ok"]
        undone = d.admin({"op": "include", "rule": rule["id"]})
        assert undone["ok"] and undone["recompute"] is not None, undone
        d.wait_for(lambda s: s["recompute"]["runs"] >= 2 and not s["recompute"]["running"], 60.0)
        assert d.query({"op": "get", "player": "name:Bob"})["ok"]  # the merge undone, re-rated
        assert d.stop() == 0
    finally:
        d.kill()


def test_old_steam_id_spellings_are_merged_into_one(tmp_path: Path) -> None:
    """The upgrade path of canonical Steam IDs: players a daemon rated under STEAM_X:Y:Z become
    steam:[U:1:Z] by one admin op and one recompute; ids that are no account stay."""
    config = tmp_path / "a.toml"
    config.write_text("[history]\nratings = false\n")
    t0 = time.time() - 1000.0
    names = [
        "steam:STEAM_1:0:5",
        "steam:[U:1:10]",
        "steam:STEAM_0:1:7",
        "steam:STEAM_9:0:1",
        "steam:[U:1:99]",
    ]
    rng = random.Random(3)
    events = []
    for k in range(300):
        a, v = rng.sample(names, 2)
        events.append({"t": t0 + 3.0 * k, "attacker": a, "victim": v})
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        d.send_events(events)
        d.wait_for(lambda s: s["journal_seq"] >= len(events) and s["queue_depth"] == 0, 60.0)
        out = d.admin({"op": "merge_steam_ids"})
        assert out["ok"], out
        assert {(m["player"], m["into"]) for m in out["merges"]} == {
            ("steam:STEAM_1:0:5", "steam:[U:1:10]"),
            ("steam:STEAM_0:1:7", "steam:[U:1:15]"),
        }
        d.wait_for(lambda s: s["recompute"]["runs"] >= 1 and not s["recompute"]["running"], 60.0)
        ladder = {row["player"] for row in d.ladder()}
        assert ladder == {"steam:[U:1:10]", "steam:[U:1:15]", "steam:STEAM_9:0:1", "steam:[U:1:99]"}
        again = d.admin({"op": "merge_steam_ids"})
        assert again["ok"] and again["merges"] == [] and again["recompute"] is None
        assert d.stop() == 0
    finally:
        d.kill()
