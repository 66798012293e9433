"""The walk-forward harness for one ADR configuration, in batches through the C kernel.

``walk_forward_adr(params, stream)`` returns exactly what
``walk_forward({"adr": ADRModel(params)}, stream)`` returns (tests/evaluation/test_fast.py checks
it prediction for prediction, bit for bit), at the kernel's speed: the stream is split once into
parallel lists (``Columns``), runs of kills go through ``Engine.score_many`` (predict, then learn
unless held out, in C while no recalibration is due) and only placements and the events the
kernel hands back take the Python path. ``arenad tune`` scores each configuration with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arenad.core.engine import Engine
from arenad.core.events import PlacementEvent
from arenad.core.params import ADRParams
from arenad.evaluation.walkforward import Predictions, StreamEvent, as_event
from arenad.models.base import placement_pairs


@dataclass(frozen=True, slots=True)
class Columns:
    """A stream split once for any number of configurations: kills as parallel lists, placement
    events by position (``placements[k]`` is the event at position k, kills are None there)."""

    attackers: list[str]
    victims: list[str]
    times: list[float]
    placements: dict[int, PlacementEvent]

    @property
    def events(self) -> int:
        return len(self.times)


def columns(events: Sequence[StreamEvent]) -> Columns:
    """Split a stream (kills as tuples or ``KillEvent``, and placements) into ``Columns``."""
    attackers: list[str] = []
    victims: list[str] = []
    times: list[float] = []
    placements: dict[int, PlacementEvent] = {}
    for k, raw in enumerate(events):
        event = as_event(raw)
        if isinstance(event, PlacementEvent):
            placements[k] = event
            attackers.append("")
            victims.append("")
            times.append(event.t)
        else:
            a, b, t = event
            attackers.append(a)
            victims.append(b)
            times.append(t)
    return Columns(attackers, victims, times, placements)


def walk_forward_adr(
    params: ADRParams,
    stream: Sequence[StreamEvent] | Columns,
    *,
    test_every: int = 10,
    block: int = 1000,
    name: str = "adr",
) -> Predictions:
    """``walk_forward({name: ADRModel(params)}, stream, ...)``, batched (see the module docstring)."""
    if test_every < 2:
        raise ValueError(f"test_every must be at least 2 so that some blocks train, got {test_every!r}")
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block!r}")
    cols = stream if isinstance(stream, Columns) else columns(stream)
    n = cols.events
    engine = Engine(params)
    engine.defer_ladder()  # predictions read ratings, never ranks
    index = np.arange(n, dtype=np.int64)
    held = (index // block) % test_every == test_every - 1
    learn = (~held).astype(np.uint8).tobytes()
    kill_p = np.zeros(n, dtype=np.float64)
    pair_p: dict[int, list[float]] = {}
    stops = [*sorted(cols.placements), n]
    k = 0
    for stop in stops:
        engine.score_many(cols.attackers, cols.victims, cols.times, learn, kill_p, start=k, stop=stop)
        if stop == n:
            break
        event = cols.placements[stop]
        pairs = placement_pairs(event.placements)
        ids = engine.ids
        out: list[float] = []
        for a, b in pairs:
            i = ids.get(a)
            j = ids.get(b)
            out.append(0.5 if i is None or j is None else engine.predict_placement(i, j))
        pair_p[stop] = out
        if learn[stop]:
            engine.apply_placement(event.placements, event.t)
        k = stop + 1
    if not cols.placements:
        return Predictions(
            p={name: kill_p},
            event=index,
            pair=np.zeros(n, dtype=bool),
            held_out=held,
            events=n,
            kills=n,
            placements=0,
        )
    p: list[float] = []
    event_of: list[int] = []
    is_pair: list[bool] = []
    held_of: list[bool] = []
    for k in range(n):
        if k in pair_p:
            ps = pair_p[k]
            p.extend(ps)
            event_of.extend([k] * len(ps))
            is_pair.extend([True] * len(ps))
            held_of.extend([bool(held[k])] * len(ps))
        else:
            p.append(float(kill_p[k]))
            event_of.append(k)
            is_pair.append(False)
            held_of.append(bool(held[k]))
    return Predictions(
        p={name: np.asarray(p, dtype=np.float64)},
        event=np.asarray(event_of, dtype=np.int64),
        pair=np.asarray(is_pair, dtype=bool),
        held_out=np.asarray(held_of, dtype=bool),
        events=n,
        kills=n - len(cols.placements),
        placements=len(cols.placements),
    )
