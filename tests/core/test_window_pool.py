"""The §2.2 window rings as a block pool (docs/performance.md "Memory"): a player gets its ring at
its second counted event, states of the old layout (one ring per player) still load, and an
inconsistent pool in a state file is refused."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from arenad.core.engine import Engine
from arenad.core.params import ADRParams


def played(seed: int = 3, players: int = 60, kills: int = 400) -> Engine:
    rng = random.Random(seed)
    eng = Engine(ADRParams(window_len=4, n_min=2, n_active=2, p_min=3, recalibrate_interval=30.0))
    t = 1_000.0
    for _ in range(kills):
        t += rng.choice([0.5, 3.0, 70.0])
        eng.feed(f"p{rng.randrange(players)}", f"p{rng.randrange(players)}", t)
    for k in range(players, players + 25):  # one-off visitors: one event each
        t += 70.0
        eng.feed(f"p{k}", "p0", t)
    return eng


def full_rings(state: dict[str, Any]) -> dict[str, Any]:
    """The version-2 layout of a state: one window_len ring per player, empty ones included."""
    wlen = state["params"]["window_len"]
    cols = dict(state["columns"])
    slots = np.frombuffer(cols.pop("wslot"), dtype=np.uint32)
    pool = np.frombuffer(cols["wring"], dtype=np.float64).reshape(-1, wlen)
    rings = np.zeros((len(slots), wlen))
    rings[:, 0] = np.frombuffer(cols["wsum"], dtype=np.float64)
    rings[slots > 0] = pool[slots[slots > 0].astype(np.int64) - 1]
    cols["wring"] = rings.tobytes()
    return {**state, "version": 2, "columns": cols}


def test_a_ring_only_from_the_second_counted_event() -> None:
    eng = played()
    counts = np.frombuffer(eng._n, dtype=np.int64)
    slots = np.frombuffer(eng._wslot, dtype=np.uint32)
    assert ((slots > 0) == (counts >= 2)).all()
    assert (counts == 1).sum() >= 20  # the visitors
    assert len(eng._wring) == 4 * int((slots > 0).sum())
    del counts, slots


def test_the_pool_holds_what_full_rings_would() -> None:
    """Every player's ring, read through the pool, is the §2.2 window of its last changes: wsum
    equals the exact sum of its ring."""
    eng = played()
    wlen = eng.params.window_len
    for i in range(len(eng)):
        base = eng._wslot[i]
        ring = (
            [eng._wsum[i], *[0.0] * (wlen - 1)] if not base else eng._wring[(base - 1) * wlen : base * wlen]
        )
        assert eng._wsum[i] == pytest.approx(sum(ring), abs=1e-9)


@pytest.mark.parametrize("native", [True, False])
def test_a_version_2_state_loads_and_continues_identically(native: bool) -> None:
    eng = played()
    old = full_rings(eng.export_state())
    assert len(old["columns"]["wring"]) == 8 * 4 * len(eng)
    loaded = Engine.from_state(old, native=native)
    # Blocks are given out in player order on import, in event order while playing: the same rings.
    assert full_rings(loaded.export_state()) == full_rings(eng.export_state())
    rng = random.Random(9)
    t = eng.clock
    for _ in range(300):
        t += rng.choice([1.0, 80.0])
        a, b = f"p{rng.randrange(90)}", f"p{rng.randrange(90)}"
        assert eng.feed(a, b, t) is loaded.feed(a, b, t)
    assert full_rings(loaded.export_state()) == full_rings(eng.export_state())
    assert loaded.export_state()["columns"]["r"] == eng.export_state()["columns"]["r"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda s: s["columns"].update(wring=s["columns"]["wring"][:-8]),  # a torn pool
        lambda s: s["columns"].update(wslot=np.zeros(len(s["names"]), dtype=np.uint32).tobytes()),  # orphans
        lambda s: s["columns"].update(  # two players on one block
            wslot=np.where(np.frombuffer(s["columns"]["wslot"], np.uint32) > 0, 1, 0)
            .astype(np.uint32)
            .tobytes()
        ),
    ],
    ids=["torn-pool", "orphan-blocks", "shared-block"],
)
def test_an_inconsistent_pool_is_refused(damage: Any) -> None:
    state = played().export_state()
    state["columns"] = dict(state["columns"])
    damage(state)
    with pytest.raises(ValueError, match="window pool"):
        Engine.from_state(state)
