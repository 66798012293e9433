"""The batched ADR walk-forward (arenad.evaluation.fast) against the harness it replaces.

``walk_forward_adr`` must return what ``walk_forward({"adr": ADRModel(params)}, ...)`` returns:
the same predictions bit for bit, the same event, pair and held-out columns, on streams with
newcomers, cooldown repeats, self-kills, late and too-late events, recalibrations, sweeps,
returns and match placements, on the default configuration, the paper's and the kernel-less one.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.events import PlacementEvent
from arenad.core.params import ADRParams
from arenad.evaluation.fast import columns, walk_forward_adr
from arenad.evaluation.walkforward import StreamEvent, walk_forward
from arenad.models.adr import ADRModel

DAY = 86400.0
SMALL: dict[str, Any] = {"n_min": 2, "n_active": 2, "p_min": 3, "recalibrate_interval": 40.0,
                         "t_return": 0.01, "idle_after": 0.005, "sweep_interval": 50.0,
                         "decay_grace": 0.001, "sigma_place": 400.0}  # fmt: skip
CONFIGS = {
    "default": ADRParams(),
    "small": ADRParams(**SMALL),
    "paper-small": ADRParams.paper(**SMALL),
    "repeats": ADRParams(**SMALL, repeat_weight=0.5, link="arctan"),
}


def reference(params: ADRParams, stream: list[StreamEvent], block: int, test_every: int, native: bool) -> Any:
    model = ADRModel(params)
    if not native:
        from arenad.core.engine import Engine

        model.engine = Engine(params, native=False)
    return walk_forward({"adr": model}, stream, test_every=test_every, block=block)


def assert_same(got: Any, want: Any) -> None:
    assert got.events == want.events and got.kills == want.kills and got.placements == want.placements
    assert np.array_equal(got.event, want.event)
    assert np.array_equal(got.pair, want.pair)
    assert np.array_equal(got.held_out, want.held_out)
    assert got.p["adr"].tobytes() == want.p["adr"].tobytes()


ops = st.lists(
    st.tuples(
        st.sampled_from(["kill"] * 10 + ["match"]),
        st.integers(0, 7),
        st.integers(0, 7),
        st.sampled_from([0.0, 1.0, 5.0, 61.0, 200.0, -2.0, -40.0, 0.02 * DAY, 3 * DAY]),
    ),
    min_size=1,
    max_size=150,
)


def build(spec: list[tuple[str, int, int, float]]) -> list[StreamEvent]:
    t = 1_700_000_000.0
    out: list[StreamEvent] = []
    for op, a, b, dt in spec:
        t += dt
        if op == "match":
            others = (f"p{(a + 1 + b % 3) % 8}", f"p{(a + 5) % 8}")
            out.append(PlacementEvent(t, ((f"p{a}",), others, (f"p{(a + 7) % 8}",))))
        else:
            out.append((f"p{a}", f"p{b}", t))
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
@settings(max_examples=60, deadline=None)
@given(spec=ops, block=st.integers(1, 12), test_every=st.integers(2, 4))
def test_batched_equals_the_harness(
    name: str, spec: list[tuple[str, int, int, float]], block: int, test_every: int
) -> None:
    stream = build(spec)
    params = CONFIGS[name]
    assert_same(
        walk_forward_adr(params, stream, block=block, test_every=test_every),
        reference(params, stream, block, test_every, native=True),
    )


def test_pure_python_engine_gives_the_same_predictions() -> None:
    """The kernel's batch against the engine without the kernel, on a long stream."""
    rng = random.Random(3)
    t = 1_700_000_000.0
    stream: list[StreamEvent] = []
    for k in range(6000):
        t += rng.choice([0.5, 2.0, 30.0, 90.0]) if k % 1500 else 9 * DAY
        if k % 97 == 0:
            stream.append(PlacementEvent(t, tuple((f"p{i}",) for i in rng.sample(range(40), 5))))
        else:
            a, b = rng.sample(range(40), 2)
            stream.append((f"p{a}", f"p{b}", t))
    params = ADRParams(placement_weight=1.0)
    cols = columns(stream)
    got = walk_forward_adr(params, cols, block=200, test_every=4)
    assert_same(got, reference(params, stream, 200, 4, native=False))
    assert got.held_out.any() and got.pair.any()
