"""adr.max_players in a real daemon: a flood of invented ids is refused, counted and exported,
and the shadow models stop at the same players as the ladder, also through a kill -9 recovery."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgpack
from daemon_harness import DaemonProcess

from arenad.daemon.state import Checkpoints
from arenad.models import BUILTIN_MODELS

CAP = 6


def shadow_players(state_dir: Path, name: str) -> set[str]:
    (_seq, path), *_ = Checkpoints(state_dir).list()
    entry = Checkpoints.read(path)["models"]["shadows"][name]
    model = BUILTIN_MODELS[name]()
    model.import_state(msgpack.unpackb(entry["state"], raw=False, strict_map_key=False))
    return set(model.players())


def flood(n: int) -> list[dict[str, Any]]:
    """Kills 1 s apart ending now, between a pool of 4 regulars and a new invented id each time."""
    t0 = time.time() - n
    out: list[dict[str, Any]] = []
    for k in range(n):
        regular = f"regular{k % 4}"
        invented = f"bot-{k:05d}"
        a, b = (regular, invented) if k % 2 else (invented, regular)
        out.append({"t": t0 + k, "attacker": a, "victim": b})
    return out


def test_flood_of_invented_ids_stops_at_the_cap_for_ladder_and_shadows(tmp_path: Path) -> None:
    config = tmp_path / "arenad.toml"
    config.write_text(
        f'[adr]\nmax_players = {CAP}\n[models]\nshadows = ["elo"]\nwindow = 100\n'
        "[daemon]\ncheckpoint_interval = 3600\n"
    )
    d = DaemonProcess(tmp_path / "state", config=config)
    try:
        d.start()
        events = flood(300)
        d.send_events(events[:200])
        stats = d.wait_for(lambda s: s["applied"] + s["rejected"].get("player_cap", 0) >= 200)
        # Kills 0-2 bring 3 regulars and 3 invented ids: the cap. Every later kill has a newcomer.
        assert stats["applied"] == 3
        assert d.metric("arenad_players_cap") == CAP
        assert d.metric("arenad_players_tracked") == CAP
        assert d.metric("arenad_events_rejected_total", 'reason="player_cap"') == 197
        # The shadow learnt (and was scored on) the applied kills only, the primary scored all.
        models = d.wait_for(lambda s: s["models"]["elo"]["scored"] == 3)["models"]
        assert models["elo"]["predictions"] == 3 and models["adr"]["predictions"] == 200
        ladder = {row["player"] for row in d.ladder()}
        assert len(ladder) == CAP

        # A crash, then recovery from the journal alone (no checkpoint was written yet).
        d.kill()
        d.start()
        d.send_events(events[200:])
        stats = d.wait_for(lambda s: s["applied"] + s["rejected"].get("player_cap", 0) >= 300)
        assert stats["applied"] == 3
        assert d.metric("arenad_events_rejected_total", 'reason="player_cap"') == 297
        assert d.wait_for(lambda s: s["models"]["elo"]["scored"] == 3)["models"]["elo"]["predictions"] == 3
        assert {row["player"] for row in d.ladder()} == ladder
        assert d.stop() == 0
        assert shadow_players(d.state_dir, "elo") == ladder
    finally:
        d.kill()
