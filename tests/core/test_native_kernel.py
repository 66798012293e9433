"""The C update kernel (arenad/core/_kernel.c) against the Python engine (``Engine._apply_py``): the
same events give the same outcomes and bit-identical engine states (docs/performance.md).

Both engines run the same stream through ``feed`` (recalibrations included), with season resets,
inactivity sweeps and exports/imports in between, under parameter sets chosen so that every
rare step the kernel hands back to Python (expiry, activation, pooling for returning players,
placement, accumulators, the window's exact re-sum) happens within a few dozen events.
"""

from __future__ import annotations

import random
import shutil
import struct
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import KERNEL, Engine, Outcome, kernel_constants
from arenad.core.params import PAPER, ADRParams

# Only where no C compiler exists; test_the_kernel_is_built_where_it_can_be fails where one does.
needs_kernel = pytest.mark.skipif(not KERNEL, reason="the C update kernel could not be built here")

DAY = 86400.0

#: Parameter sets that make the rare paths common (small n_min/n_active/window, short T_return).
PARAM_SETS: list[dict[str, Any]] = [
    {},
    {"n_min": 2, "n_active": 2, "window_len": 3, "p_min": 3, "t_return": 0.01, "return_events": 2,
     "recalibrate_interval": 50.0, "t_active": 0.02, "h_req": 5.0, "sigma_place": 400.0},
    {"n_min": 3, "n_active": 1, "window_len": 1, "p_min": 2, "t_return": 0.005, "pool_release": "literal",
     "loser_rule": "printed", "pool_losses": False, "recalibrate_interval": 20.0, "h_req": 1.0,
     "sigma_place": 400.0, "t_cooldown": 5.0},
    {"decay": False, "n_min": 1, "n_active": 3, "window_len": 2, "p_min": 2, "h_req": 20.0,
     "sigma_place": 400.0, "anchor": False, "delta_max": 5.0, "mu_max": 1100.0, "mu_min": 900.0},
    {"n_min": 2, "n_active": 2, "p_min": 2, "idle_after": 0.01, "sweep_interval": 30.0,
     "recalibrate_interval": 30.0, "sigma_place": 400.0, "h_req": 3.0, "t_return": 0.02, "tau": 0.05,
     "late_tolerance": 0.0},
]  # fmt: skip
#: The same sets on the paper's §9 configuration, and the issue-14 mechanisms one at a time and
#: together (arctan with calibration, grace and the cap over decay, repeats and placements learnt,
#: the calibration's warm-up and start).
PAPER_SETS: list[dict[str, Any]] = [{**PAPER, **s} for s in PARAM_SETS]
MECHANISM_SETS: list[dict[str, Any]] = [
    {**PARAM_SETS[1], "link": "arctan", "calibration_memory": 20.0},
    {**PARAM_SETS[4], "decay_grace": 0.005, "cap_decay": True, "delta_max": 3.0, "sweep_sigma": True},
    {**PARAM_SETS[4], "decay_grace": 0.01, "sweep_sigma": False, "calibration_memory": 3.0},
    {**PARAM_SETS[2], "repeat_weight": 0.7, "placement_weight": 0.5, "calibration_memory": 0.0},
    {
        **PARAM_SETS[3],
        "link": "logistic",
        "placement_weight": 1.0,
        "repeat_weight": 1.0,
        "cap_decay": False,
        "display_cap": False,
    },
    {**PARAM_SETS[1], "display_cap": True, "delta_max": 2.0, "sweep_sigma": True, "idle_after": 0.01},
    {**PARAM_SETS[4], "recalibrate_min_events": 7},
    # the calibration's warm-up ending inside the stream, and its floor of 20 above the memory
    {**PARAM_SETS[1], "calibration_memory": 60.0, "calibration_warmup": 0.5, "calibration_start": 2.0},
    {**PARAM_SETS[2], "link": "arctan", "calibration_memory": 30.0, "calibration_warmup": 3.0},
    {**PARAM_SETS[4], "calibration_memory": 8.0, "calibration_start": 0.5},
    # a memory of one kill: nothing kept (1 - 1/1 = 0), and still a step at every kill
    {**PARAM_SETS[3], "calibration_memory": 1.0, "calibration_warmup": 0.0},
    # farming past the cooldown: strong damping, off, and damping under the paper's rules
    {**PARAM_SETS[1], "farm_damping": 0.5},
    {**PARAM_SETS[2], "farm_damping": 0.0},
    {**PARAM_SETS[3], "link": "arctan", "farm_damping": 1e-3, "rho_s": 0.15, "gamma_phi": 0.3},
    # tiers that lean toward their targets: a strong pull, and a pull under the paper's rules
    {**PARAM_SETS[1], "tier_pull": 0.99},
    {**PAPER_SETS[4], "tier_pull": 0.5},
]
ALL_SETS = PARAM_SETS + PAPER_SETS + MECHANISM_SETS
ALL_IDS = (
    [f"params{i}" for i in range(len(PARAM_SETS))]
    + [f"paper{i}" for i in range(len(PAPER_SETS))]
    + [f"mechanism{i}" for i in range(len(MECHANISM_SETS))]
)


def canonical(value: Any) -> Any:
    """A state with every float as its bit pattern, so -0.0 != 0.0 and NaNs compare."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    return value


def assert_same(native: Engine, py: Engine) -> None:
    assert canonical(native.export_state()) == canonical(py.export_state())
    got, count = native.recent_predictions()
    want, count_py = py.recent_predictions()
    assert count == count_py
    assert canonical(got.tolist()) == canonical(want.tolist())
    assert native.tier_changes == py.tier_changes
    assert native._tier_counts == py._tier_counts
    assert native._tier_active == py._tier_active
    assert native._tier_active == active_tier_counts(native)
    assert native.ladder_is_consistent()


def active_tier_counts(eng: Engine) -> list[int]:
    """Active placed players per tier, counted from the columns (what _tier_active keeps), and
    their total at index 0."""
    counts = [0] * 16
    for k, on in zip(eng._tier, eng._active, strict=True):
        if k and on:
            counts[k] += 1
    counts[0] = sum(counts)
    return counts


def test_the_kernel_is_built_where_it_can_be() -> None:
    """With a compiler and Python's headers, the default engine runs the kernel (no silent fallback)."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") and headers.exists():
        assert KERNEL, "the C update kernel was not built: run ./scripts/bootstrap"
        assert Engine().native
        assert not Engine(native=False).native


Event = tuple[str, int, int, float]  # (op, a, b, dt): op "kill", "reset", "sweep", "roundtrip"

events = st.lists(
    st.tuples(
        st.sampled_from(["kill"] * 12 + ["reset", "roundtrip", "placement"]),
        st.integers(0, 9),
        st.integers(0, 9),
        st.sampled_from([0.0, 0.5, 1.0, 3.0, 7.0, 61.0, -1.0, -4.0, -30.0, 900.0, 0.03 * DAY, 2.0 * DAY])
        | st.floats(-6.0, 400.0, allow_nan=False),
    ),
    min_size=1,
    max_size=220,
)


def run_both(params: ADRParams, stream: list[Event]) -> None:
    native = Engine(params, native=True)
    py = Engine(params, native=False)
    t = 1_700_000_000.0
    for op, a, b, dt in stream:
        if op == "reset":
            native.season_reset(1.5, 0.3)
            py.season_reset(1.5, 0.3)
            continue
        if op == "roundtrip":  # export and import: the kernel binds to the rebuilt engine
            native = Engine.from_state(native.export_state(), params, native=True)
            py = Engine.from_state(py.export_state(), params, native=False)
            continue
        if op == "placement":  # a match of four: Python for both, then the kernel goes on
            match = ((f"p{a}",), (f"p{(a + 1 + b % 2) % 10}", f"p{(a + 4) % 10}"), (f"p{(a + 7) % 10}",))
            assert native.apply_placement(match, t) == py.apply_placement(match, t)
            continue
        t += dt
        name_a, name_b = f"p{a}", f"p{b}"
        assert native.feed(name_a, name_b, t) is py.feed(name_a, name_b, t)
        assert native.last_delta_attacker == py.last_delta_attacker
    assert_same(native, py)


@needs_kernel
@pytest.mark.parametrize("overrides", ALL_SETS, ids=ALL_IDS)
@settings(max_examples=60, deadline=None)
@given(stream=events)
def test_same_stream_same_state(overrides: dict[str, Any], stream: list[Event]) -> None:
    run_both(ADRParams(**overrides), stream)


@needs_kernel
@pytest.mark.parametrize(
    "overrides",
    [PARAM_SETS[0], PAPER_SETS[0], PARAM_SETS[1], PAPER_SETS[4], *MECHANISM_SETS[1:4]],
    ids=["default", "paper", "rare-paths", "paper-sweep", "grace-cap", "grace-sweep", "repeats"],
)
def test_long_stream_same_state(overrides: dict[str, Any]) -> None:
    """20,000 kills among 300 players with gaps of days (returning players), bursts (cooldown),
    late and too-late events and self-kills: the final states are bit-identical."""
    rng = random.Random(7)
    params = ADRParams(**overrides)
    native = Engine(params, native=True)
    py = Engine(params, native=False)
    t = 1_700_000_000.0
    applied = 0
    for k in range(20_000):
        t += rng.choice([0.0, 0.2, 1.0, 5.0, 30.0, 120.0]) if k % 997 else 70 * DAY
        a, b = rng.randrange(300), rng.randrange(300)
        late = rng.random()
        at = t - 3.0 if late < 0.05 else t - 50.0 if late < 0.06 else t
        out = native.feed(f"p{a}", f"p{b}", at)
        assert out is py.feed(f"p{a}", f"p{b}", at)
        applied += out is Outcome.APPLIED
        if k == 12_000:
            native.season_reset(1.2, 0.5)
            py.season_reset(1.2, 0.5)
    assert applied > 10_000
    assert native.tier_changes > 0
    assert_same(native, py)


@needs_kernel
def test_kernel_refuses_a_column_of_the_wrong_type() -> None:
    """The kernel reads the engine's arrays in place: a column of another type is an error, not
    a misread."""
    eng = Engine(native=True)
    eng.apply("a", "b", 1.0)
    eng.apply("a", "b", 100.0)
    eng._sigma = [350.0, 350.0]  # type: ignore[assignment]
    with pytest.raises(TypeError, match="_sigma"):
        eng.apply("a", "b", 200.0)


@needs_kernel
def test_the_fallback_changes_nothing_first() -> None:
    """Newcomers, self-kills, non-finite and too-late times leave the kernel untouched and take
    the Python path, which counts them as before."""
    eng = Engine(native=True)
    assert eng.apply("a", "b", 1000.0) is Outcome.APPLIED  # newcomers: Python
    assert eng.apply("a", "a", 1001.0) is Outcome.SELF_KILL
    assert eng.apply("a", "b", float("nan")) is Outcome.NON_FINITE_TIME
    assert eng.apply("a", "b", 900.0) is Outcome.OUT_OF_ORDER
    assert eng.apply("a", "b", 1030.0) is Outcome.FILTERED  # kernel: inside the cooldown
    assert eng.apply("b", "a", 1031.0) is Outcome.APPLIED  # kernel
    assert eng.apply("b", "a", 1029) is Outcome.FILTERED  # an int time: Python, late at the clock
    assert eng.rejected == {"self_kill": 1, "non_finite_time": 1, "out_of_order": 1}
    assert (eng.applied, eng.filtered, eng.late_applied) == (2, 2, 1)


@needs_kernel
@settings(max_examples=150, deadline=None)
@given(stream=events, chunk=st.integers(1, 40))
def test_run_records_equals_feeding_one_by_one(stream: list[Event], chunk: int) -> None:
    """``run_records`` (the daemon's batch path) stops exactly where Python must take over and
    otherwise leaves the same state as ``feed`` record by record."""
    params = ADRParams(**PARAM_SETS[1])
    batch = Engine(params, native=True)
    single = Engine(params, native=False)
    t = 1_700_000_000.0
    records: list[Any] = []
    for n, (op, a, b, dt) in enumerate(stream):
        t += dt
        records.append((n, t, f"p{a}", f"p{b}", None, None) if op == "kill" else ("other", n))
    outcomes = [single.feed(r[2], r[3], r[1]) if len(r) == 6 else None for r in records]
    assert batch.run_records is not None
    k = 0
    while k < len(records):
        done, applied, filtered = batch.run_records(records, k, k + chunk)
        assert k <= done <= min(len(records), k + chunk)
        assert applied == outcomes[k:done].count(Outcome.APPLIED)
        assert filtered == outcomes[k:done].count(Outcome.FILTERED)
        assert applied + filtered == done - k
        if done < min(len(records), k + chunk):  # stopped early: Python's turn, for a reason
            rec = records[done]
            assert (
                len(rec) != 6
                or rec[1] >= batch.next_recalibration
                or outcomes[done]
                not in (
                    Outcome.APPLIED,
                    Outcome.FILTERED,
                )
                or rec[2] not in batch.ids
                or rec[3] not in batch.ids
            )
            if len(rec) == 6:
                batch.feed(rec[2], rec[3], rec[1])
            done += 1
        k = done
    assert_same(batch, single)


# ---------------------------------------------------------------------------- the contract
def _unpack_names() -> list[str]:
    """The names _apply_py unpacks ``self._k`` into, read from its source."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(Engine._apply_py)))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "_k"
            and isinstance(node.targets[0], ast.Tuple)
        ):
            return [e.id for e in node.targets[0].elts if isinstance(e, ast.Name)]
    raise AssertionError("no unpack of self._k in _apply_py")


def test_the_python_unpack_follows_the_named_constants() -> None:
    """``_k`` is ``_kc``'s values: the unpack's names are its keys, in order (one table)."""
    names = list(kernel_constants(ADRParams()))
    unpacked = _unpack_names()
    # an unused one carries a leading underscore
    assert [n.removeprefix("_") for n in unpacked] == names


def test_the_columns_table_is_the_engine_state() -> None:
    eng = Engine()
    eng.feed("a", "b", 1.0)
    for name, code in Engine.KERNEL_COLUMNS.items():
        assert getattr(eng, name).typecode == code
    from arenad.core.engine import _COLUMNS

    assert set(_COLUMNS.values()) == set(Engine.KERNEL_COLUMNS)


@needs_kernel
@pytest.mark.parametrize("change", ["drop_column", "retype_column", "drop_attribute", "drop_constant"])
def test_the_kernel_refuses_what_the_table_does_not_declare(change: str) -> None:
    """The C kernel reads the one table at start-up: a column, attribute or constant it needs
    that Python does not declare (or declares with another type) refuses it, naming it."""
    columns = dict(Engine.KERNEL_COLUMNS)
    attributes = tuple(Engine.KERNEL_ATTRIBUTES)
    if change == "drop_column":
        del columns["_sigma"]
    elif change == "retype_column":
        columns["_n"] = "d"
    elif change == "drop_attribute":
        attributes = tuple(a for a in attributes if a != "_cal")

    class Other(Engine):
        KERNEL_COLUMNS = columns
        KERNEL_ATTRIBUTES = attributes

    if change == "drop_constant":
        original = kernel_constants

        def without_grace(p: ADRParams) -> dict[str, Any]:
            return {k: v for k, v in original(p).items() if k != "grace_s"}

        import arenad.core.engine as engine_module

        engine_module.kernel_constants = without_grace
        try:
            with pytest.raises(KeyError, match="grace_s"):
                Engine(native=True)
        finally:
            engine_module.kernel_constants = original
        return
    word = {"drop_column": "_sigma", "retype_column": "_n", "drop_attribute": "_cal"}[change]
    with pytest.raises(TypeError, match=word):
        Other(native=True)


deferred_events = st.lists(
    st.tuples(
        st.sampled_from(["kill"] * 12 + ["reset", "roundtrip", "placement", "read", "defer", "sweep"]),
        st.integers(0, 9),
        st.integers(0, 9),
        st.sampled_from([0.0, 0.5, 1.0, 3.0, 61.0, -1.0, -30.0, 900.0, 0.03 * DAY, 2.0 * DAY])
        | st.floats(-6.0, 400.0, allow_nan=False),
    ),
    min_size=1,
    max_size=220,
)


def _ranks(engine: Engine) -> tuple[list[int], list[int], list[float]]:
    return (
        list(engine.ladder_ids()),
        [engine.rank(i) for i in range(len(engine))],
        [engine.percentile(i) for i in range(len(engine))],
    )


#: Bounds so tight that the anchor's shift pushes ratings out of them at most recalibrations: the
#: clamp reads the ladder's ends (a deferred index is rebuilt for it).
CLAMP_SET: dict[str, Any] = {
    "mu_max": 1050.0, "mu_min": 1000.0, "delta_max": 30.0, "n_active": 1, "p_min": 2,
    "recalibrate_interval": 10.0,
}  # fmt: skip


@needs_kernel
@pytest.mark.parametrize("overrides", [*ALL_SETS, CLAMP_SET], ids=[*ALL_IDS, "clamps"])
@settings(max_examples=40, deadline=None)
@given(stream=deferred_events)
def test_a_deferred_ladder_changes_nothing(overrides: dict[str, Any], stream: list[Event]) -> None:
    """``Engine.defer_ladder`` (batch replay, tuning): with the index deferred, in the kernel and in
    Python, every read in between (which rebuilds it) and the final state, ranks and ladder
    order are those of an engine that kept its index in step event by event."""
    params = ADRParams(**overrides)
    ref = Engine(params, native=True)
    deferred = [Engine(params, native=True), Engine(params, native=False)]
    for engine in deferred:
        engine.defer_ladder()
    t = 1_700_000_000.0
    for op, a, b, dt in stream:
        everyone = [ref, *deferred]
        if op == "reset":
            for engine in everyone:
                engine.season_reset(1.5, 0.3)
        elif op == "roundtrip":
            ref = Engine.from_state(ref.export_state(), params, native=True)
            deferred = [Engine.from_state(e.export_state(), params, native=e.native) for e in deferred]
            for engine in deferred:
                engine.defer_ladder()
        elif op == "placement":
            match = ((f"p{a}",), (f"p{(a + 1 + b % 2) % 10}", f"p{(a + 4) % 10}"), (f"p{(a + 7) % 10}",))
            for engine in everyone:
                engine.apply_placement(match, t)
        elif op == "read" and len(ref):
            want = (ref.top(3), ref.around(a % len(ref), 2))
            for engine in deferred:
                assert (engine.top(3), engine.around(a % len(engine), 2)) == want
        elif op == "defer":
            deferred[a % 2].defer_ladder()
        elif op == "sweep":
            for engine in everyone:
                engine.sweep(t)
        else:
            t += dt
            outs = [engine.feed(f"p{a}", f"p{b}", t) for engine in everyone]
            assert outs[1] is outs[0] and outs[2] is outs[0]
    for engine in deferred:
        assert_same(engine, ref)
        assert _ranks(engine) == _ranks(ref)


@needs_kernel
@pytest.mark.parametrize("overrides", ALL_SETS, ids=ALL_IDS)
@settings(max_examples=30, deadline=None)
@given(stream=events, chunk=st.integers(1, 60))
def test_batches_equal_feeding_one_by_one(overrides: dict[str, Any], stream: list[Event], chunk: int) -> None:
    """``feed_many`` and ``score_many`` (the kernel holds the engine's scalars through a batch and
    writes them back before any Python method and at its end) leave the Python path's state,
    last changes and predictions, bit for bit, under every parameter set."""
    params = ADRParams(**overrides)
    many = Engine(params, native=True)
    scored = Engine(params, native=True)
    single = Engine(params, native=False)
    t = 1_700_000_000.0
    kills = []
    for op, a, b, dt in stream:
        t += dt
        if op == "kill":
            kills.append((f"p{a}", f"p{b}", t))
    attackers = [k[0] for k in kills]
    victims = [k[1] for k in kills]
    times = [k[2] for k in kills]
    learn = bytes(1 for _ in kills)
    want_p = []
    for name_a, name_v, at in kills:
        i, j = single.ids.get(name_a), single.ids.get(name_v)
        want_p.append(0.5 if i is None or j is None else single.predict(i, j))
        single.feed(name_a, name_v, at)
    got_p = np.zeros(len(kills))
    for k in range(0, len(kills), chunk):
        stop = min(k + chunk, len(kills))
        many.feed_many(attackers[k:stop], victims[k:stop], times[k:stop])
        scored.score_many(attackers, victims, times, learn, got_p, start=k, stop=stop)
    for engine in (many, scored):
        assert_same(engine, single)
        assert (engine.last_delta_attacker, engine.last_delta_victim) == (
            single.last_delta_attacker,
            single.last_delta_victim,
        )
    assert canonical(got_p.tolist()) == canonical(want_p)


def _cooldown_of(engine: Engine) -> tuple[list[tuple[int, bytes]], list[tuple[bytes, int]]]:
    """The §2.1 cooldown map (in its iteration order) and log, floats as bit patterns."""
    cooldown, log = engine._cooldown_py()
    return [(k, struct.pack("<d", t)) for k, t in cooldown.items()], [
        (struct.pack("<d", t), k) for t, k in log
    ]


@needs_kernel
@pytest.mark.parametrize("t_cooldown", [60.0, 5.0, 0.0])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_c_cooldown_table_is_the_python_dict_and_log(t_cooldown: float, seed: int) -> None:
    """The kernel's own cooldown table (open addressing, a ring for the log) against the Python
    engine's dict and deque: random streams with many repeats inside the window (a few hot
    pairs among many), phases of thousands of distinct pairs (the table and the ring grow, the
    trim deletes from crowded probe chains), an export in the middle (the cooldown goes back to
    Python and is adopted again), a rebuild from the checkpoint, and int times (Python's path on
    the native engine, which takes the cooldown back): the same outcomes, the same map in the
    same order, the same log (stale entries included) and the same state, bit for bit."""
    rng = random.Random(seed)
    params = ADRParams(t_cooldown=t_cooldown)
    native = Engine(params, native=True)
    py = Engine(params, native=False)
    t = 1_700_000_000.0
    filtered = 0
    for k in range(12_000):
        phase = (k // 1500) % 3
        if phase == 0:  # hot pairs: repeats inside the window
            a, b = rng.randrange(6), rng.randrange(6)
            t += rng.choice([0.0, 0.5, 1.0, 2.0, 4.0, 7.0])
        elif phase == 1:  # many distinct pairs at once: growth and long probe chains
            a, b = rng.randrange(2000), rng.randrange(2000)
            t += rng.choice([0.0, 0.01, 0.05])
        else:
            a, b = rng.randrange(60), rng.randrange(60)
            t += rng.choice([0.0, 1.0, 3.0, 30.0, 59.9, 60.0, 61.0])
        # an int time takes Engine._apply_py on the native engine too
        when: Any = int(t) if k % 409 == 0 else t
        out = native.feed(f"p{a}", f"p{b}", when)
        assert out is py.feed(f"p{a}", f"p{b}", when)
        filtered += out is Outcome.FILTERED
        if k % 1000 == 500:
            assert _cooldown_of(native) == _cooldown_of(py)
            assert native._cooldown is not None  # given back to Python until the next event
        if k % 3001 == 3000:
            assert canonical(native.export_state()) == canonical(py.export_state())
        if k == 7000:
            native = Engine.from_state(native.export_state(), params, native=True)
            py = Engine.from_state(py.export_state(), params, native=False)
    assert filtered > {60.0: 1000, 5.0: 100, 0.0: -1}[t_cooldown]
    assert _cooldown_of(native) == _cooldown_of(py)
    assert_same(native, py)


@needs_kernel
def test_the_kernel_holds_the_cooldown_between_events() -> None:
    """While the kernel runs, the engine's cooldown slots are None (nothing stale to read);
    _cooldown_py gives them back, and the next kernel event adopts them again."""
    eng = Engine(ADRParams(), native=True)
    eng.feed("a", "b", 1.0)
    eng.feed("a", "b", 2.0)
    assert eng._cooldown is None and eng._cooldown_log is None
    cooldown, log = eng._cooldown_py()
    assert list(cooldown.values()) == [1.0] and list(log) == [(1.0, 1)]
    assert eng.feed("a", "b", 3.0) is Outcome.FILTERED
    assert eng._cooldown is None


@needs_kernel
@pytest.mark.parametrize("deferred", [False, True])
def test_newcomers_join_in_c_as_add_player_adds_them(deferred: bool) -> None:
    """The kernel appends a newcomer's columns itself (Engine._add_player's Python path only for a
    season's _n0 column or an exported column buffer): the same names, ids, columns (lengths
    included), tier and activity bytes, ladder and sums as the Python path, with the ladder kept
    and deferred, and across a season reset (Python's _add_player adds from then on)."""
    params = ADRParams(**PARAM_SETS[1])
    native = Engine(params, native=True)
    py = Engine(params, native=False)
    if deferred:
        native.defer_ladder()
        py.defer_ladder()
    rng = random.Random(5)
    t = 1_700_000_000.0
    for k in range(3000):
        t += rng.choice([0.0, 0.5, 3.0, 90.0])
        a, b = f"n{rng.randrange(k + 2)}", f"n{rng.randrange(k + 2)}"
        if k == 1500:
            native.season_reset(1.5, 0.3)
            py.season_reset(1.5, 0.3)
        assert native.feed(a, b, t) is py.feed(a, b, t)
    assert native.names == py.names
    assert native.ids == py.ids
    for attr in Engine.KERNEL_COLUMNS:
        assert getattr(native, attr).tobytes() == getattr(py, attr).tobytes(), attr
    assert native._tier == py._tier and native._active == py._active
    assert list(native._index()) == list(py._index())
    assert_same(native, py)


@needs_kernel
@pytest.mark.parametrize("damping", [10.0, 0.25, 0.0])
def test_a_farmer_is_damped_alike(damping: float) -> None:
    """One attacker kills the same victim 600 times just past the cooldown amid other kills (runs
    that grow, end when the victim kills back or the attacker kills someone else, and start
    again): the C kernel and the Python path damp alike, bit for bit."""
    rng = random.Random(11)
    params = ADRParams(farm_damping=damping)
    native = Engine(params, native=True)
    py = Engine(params, native=False)
    t = 1_700_000_000.0
    gains = []
    for k in range(3_000):
        t += 15.0
        if k % 5 == 0:
            a, b = "farmer", "prey" if rng.random() > 0.05 else f"p{rng.randrange(20)}"
        elif k % 97 == 0:
            a, b = "prey", "farmer"
        else:
            a, b = f"p{rng.randrange(20)}", f"p{rng.randrange(20)}"
        assert native.feed(a, b, t) is py.feed(a, b, t)
        assert native.last_delta_attacker == py.last_delta_attacker
        if a == "farmer" and b == "prey":
            gains.append(py.last_delta_attacker)
    assert_same(native, py)
    assert len(gains) > 500
    run = py._prey[py.ids["farmer"]] & 0xFFFF
    assert (run > 0) == (py._prey[py.ids["farmer"]] >> 16 == py.ids["prey"] + 1)


@needs_kernel
def test_a_saturated_run_stays_saturated() -> None:
    params = ADRParams()
    engines = [Engine(params, native=True), Engine(params, native=False)]
    for eng in engines:
        eng.feed("a", "b", 1_700_000_000.0)
        a, b = eng.ids["a"], eng.ids["b"]
        eng._prey[a] = ((b + 1) << 16) | 0xFFFF
        eng.feed("a", "b", 1_700_000_100.0)
        assert eng._prey[a] == ((b + 1) << 16) | 0xFFFF
    assert_same(*engines)
