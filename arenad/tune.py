"""``arenad tune``: calibrate ADR's ``[adr]`` parameters on an operator's own event history.

The objective is the held-out log loss of the §10.5 walk-forward split (every ``test_every``-th
block of ``block`` events is predicted but not learnt: :mod:`arenad.evaluation.walkforward`).
Every configuration is also measured on the §10.4 scenario stream (a simulated 200-player
network with a jump, an absence, farming and bursts: :func:`scenario_stream`), and one that
breaks a constraint (:class:`Limits`) is reported but never chosen.

Three parts, each usable alone:

* the search (:func:`search`): grid, random or Nelder–Mead over a box of parameters, a pure
  function of a ``score(config) -> Scores`` callable, so it is tested with toy objectives;
* one configuration's objective (:func:`score_config`), through the batched C path;
* the constraints (:func:`scenario_measures`, :func:`baseline_farming`) and the ``[adr]``
  section written for the chosen configuration (:func:`adr_section`).

No I/O: the CLI (``arenad.cli``) reads the events and writes the files.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from arenad.core.params import ADRParams
from arenad.errors import ConfigError, ConfigProblem
from arenad.evaluation.fast import Columns, columns, walk_forward_adr
from arenad.evaluation.scenarios import ScenarioWatch
from arenad.evaluation.tiers import TierRules
from arenad.evaluation.walkforward import StreamEvent, replay, score
from arenad.models import BUILTIN_MODELS
from arenad.models.adr import adr_model
from arenad.simulate import Population, ScenarioPlan, SimulatedStream, simulate_stream

Method = Literal["grid", "random", "nelder-mead"]
METHODS: tuple[Method, ...] = ("grid", "random", "nelder-mead")
#: A configuration as the search sees it: ``[adr]`` keys and their values.
Config = dict[str, float]
FloatArray = npt.NDArray[np.float64]

#: Grid points per parameter when ``--params`` gives no steps.
DEFAULT_STEPS = 5
#: Configurations evaluated (besides the base) when ``--budget`` is not given.
DEFAULT_BUDGET: dict[Method, int] = {"random": 20, "nelder-mead": 30}
#: A continuous parameter is rounded to about 1/1000 of its range: readable values in the
#: ``[adr]`` section, and Nelder–Mead's nearby points share one evaluation.
RESOLUTION = 1000


# ---------------------------------------------------------------------------- the search space
@dataclass(frozen=True, slots=True)
class Dimension:
    """One searched ``[adr]`` parameter: ``key`` in ``[low, high]``, ``steps`` grid points."""

    key: str
    low: float
    high: float
    steps: int | None = None
    integer: bool = False

    def value(self, u: float) -> float:
        """The parameter at ``u`` in [0, 1] of the range, rounded (integers to integers)."""
        v = self.low + min(1.0, max(0.0, float(u))) * (self.high - self.low)
        if self.integer:
            return round(v)
        digits = max(0, math.ceil(-math.log10((self.high - self.low) / RESOLUTION)))
        return min(self.high, max(self.low, round(v, digits)))

    def unit(self, v: float) -> float:
        """Where ``v`` lies in the range, clipped into [0, 1]."""
        return min(1.0, max(0.0, (v - self.low) / (self.high - self.low)))

    def grid(self) -> list[float]:
        """``steps`` evenly spaced values from ``low`` to ``high`` (distinct ones, for integers)."""
        n = self.steps or DEFAULT_STEPS
        return list(dict.fromkeys(self.value(u) for u in np.linspace(0.0, 1.0, n)))


def numeric_keys() -> dict[str, bool]:
    """Every numeric ``[adr]`` key a search may vary, mapped to whether it takes integers."""
    out: dict[str, bool] = {}
    for f in fields(ADRParams):
        key = "lambda" if f.name == "lambda_" else f.name  # as ADRParams.to_mapping spells it
        if f.type in ("float", "float | None"):
            out[key] = False
        elif f.type == "int":
            out[key] = True
    return out


def parse_dimensions(texts: Sequence[str], base: ADRParams) -> list[Dimension]:
    """``name=lo:hi[:steps]`` for each text; every bad one is reported at once (``--params``).

    Each bound must be a valid value of the parameter with the rest of ``base`` around it.
    """
    known = numeric_keys()
    problems: list[ConfigProblem] = []
    out: list[Dimension] = []

    def bad(text: str, message: str) -> None:
        problems.append(ConfigProblem("--params", text, message))

    for text in texts:
        key, sep, spec = text.partition("=")
        key = key.strip()
        parts = spec.split(":")
        if not sep or len(parts) not in (2, 3):
            bad(text, "must be name=lo:hi or name=lo:hi:steps")
            continue
        if key not in known:
            bad(text, f"{key!r} is not a numeric [adr] key (known: {', '.join(known)})")
            continue
        if any(d.key == key for d in out):
            bad(text, f"{key} is given twice")
            continue
        integer = known[key]
        try:
            low, high = (int(p) if integer else float(p) for p in parts[:2])
            steps = int(parts[2]) if len(parts) == 3 else None
        except ValueError:
            bad(text, f"lo and hi must be {'integers' if integer else 'numbers'}, steps an integer")
            continue
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            bad(text, "needs finite bounds with lo < hi")
            continue
        if steps is not None and steps < 2:
            bad(text, "steps must be at least 2")
            continue
        for bound in (low, high):
            try:
                with_base(base, {key: bound})
            except ConfigError as e:
                bad(text, f"{key} = {bound!r} is refused: {e.problems[0].message}")
                break
        else:
            out.append(Dimension(key, low, high, steps, integer))
    if problems:
        raise ConfigError(problems, "command line")
    return out


def with_base(base: ADRParams, config: Mapping[str, float]) -> ADRParams:
    """``base`` with the ``[adr]`` keys of ``config`` set, validated as a config file would be."""
    return ADRParams.from_mapping({**base.to_mapping(), **config})


# ---------------------------------------------------------------------------- scores
#: Slack on every constraint: 1/1000 of the limit, and at least 0.001 of its unit. The scale
#: anchor shifts every rating a little at each recalibration, so a capped change measures a
#: few thousandths of a point past delta_max, and a filtered burst up to about 1e-3 sd (a
#: learnt burst is 0.1-0.3 sd).
TOLERANCE = 1e-3


@dataclass(frozen=True, slots=True)
class Constraint:
    """``values[key] <= limit``; a value that was not measured (nan) breaks it."""

    key: str
    limit: float

    def excess(self, value: float) -> float:
        """0 when met, else how far past the limit, relative to the limit (at least 1 unit)."""
        if math.isnan(value):
            return math.inf
        over = value - self.limit
        scale = max(abs(self.limit), 1.0)
        return 0.0 if over <= TOLERANCE * scale else over / scale


@dataclass(frozen=True, slots=True)
class Scores:
    """What one configuration scored: the objective (lower is better) and everything reported."""

    objective: float
    values: Mapping[str, float] = field(default_factory=dict)
    violated: tuple[str, ...] = ()
    #: Summed relative excess over the broken limits: Nelder–Mead ranks infeasible points by it.
    excess: float = 0.0
    #: Why a configuration could not be scored at all (its parameters were refused).
    error: str = ""

    @property
    def feasible(self) -> bool:
        return not self.violated and not self.error and not math.isnan(self.objective)

    def rank(self) -> tuple[float, float, float]:
        """Sort key: feasible by objective first, then the others by how far out they are."""
        objective = math.inf if math.isnan(self.objective) else self.objective
        if self.feasible:
            return (0.0, 0.0, objective)
        return (1.0, self.excess, objective)


def judge(objective: float, values: Mapping[str, float], constraints: Sequence[Constraint]) -> Scores:
    """Scores of one configuration, with each constraint it breaks named."""
    excess = {c.key: c.excess(values.get(c.key, math.nan)) for c in constraints}
    broken = tuple(k for k, e in excess.items() if e > 0)
    return Scores(objective, dict(values), broken, sum(excess[k] for k in broken))


def refused(message: str) -> Scores:
    """Scores of a configuration whose parameters are invalid together (e.g. eta_max < eta_min)."""
    return Scores(math.inf, {}, ("invalid",), math.inf, message)


# ---------------------------------------------------------------------------- the search
@dataclass(frozen=True, slots=True)
class Trial:
    """One evaluated configuration; trial 0 is the start (the base configuration)."""

    index: int
    config: Config
    scores: Scores


class _BudgetSpentError(Exception):
    """The budget is used up."""


def search(
    space: Sequence[Dimension],
    score: Callable[[Config], Scores],
    *,
    method: Method = "nelder-mead",
    budget: int | None = None,
    start: Mapping[str, float | None] | None = None,
    seed: int = 1,
) -> list[Trial]:
    """Evaluate the start, then up to ``budget`` distinct configurations of the box ``space``.

    ``grid`` takes every combination of the dimensions' grids (budget: the grid's size, and a
    smaller budget is an error); ``random`` draws uniformly (from the grid of a dimension with
    steps), seeded; ``nelder-mead`` walks a simplex from the start (clipped into the box) over
    the box scaled to [0, 1], ranking by :meth:`Scores.rank`, so it moves toward feasibility
    first. A configuration is scored once however often a method reaches it.
    """
    budget = resolve_budget(space, method, budget)
    begin = {k: v for k, v in (start or {}).items() if v is not None}
    trials: list[Trial] = []
    seen: dict[tuple[tuple[str, float], ...], Scores] = {}

    def run(config: Config, counted: bool = True) -> Scores:
        key = tuple(sorted(config.items()))
        if key in seen:
            return seen[key]
        if counted and len(trials) - 1 >= budget:
            raise _BudgetSpentError
        scores = seen[key] = score(config)
        trials.append(Trial(len(trials), dict(config), scores))
        return scores

    def at(u: FloatArray) -> Config:
        return {d.key: d.value(x) for d, x in zip(space, u, strict=True)}

    run(begin, counted=False)
    try:
        if method == "grid":
            for combo in itertools.product(*(d.grid() for d in space)):
                run(dict(zip((d.key for d in space), combo, strict=True)))
        elif method == "random":
            rng = np.random.default_rng(seed)
            for _ in range(50 * budget):  # small integer boxes run out of new points
                run({d.key: _draw(d, rng) for d in space})
        else:
            x0 = [d.unit(begin[d.key]) if d.key in begin else 0.5 for d in space]
            _nelder_mead(lambda u: run(at(u)).rank(), x0, iterations=50 * budget)
    except _BudgetSpentError:
        pass
    return trials


def resolve_budget(space: Sequence[Dimension], method: Method, budget: int | None) -> int:
    """The budget :func:`search` uses; ``ValueError`` names what is wrong with the arguments."""
    if not space:
        raise ValueError("at least one parameter to search")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    grid_size = math.prod(len(d.grid()) for d in space)
    if budget is None:
        return grid_size if method == "grid" else DEFAULT_BUDGET[method]
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget!r}")
    if method == "grid" and budget < grid_size:
        raise ValueError(f"budget {budget} is smaller than the grid ({grid_size} configurations)")
    return budget


def _draw(d: Dimension, rng: np.random.Generator) -> float:
    if d.steps is not None:
        grid = d.grid()
        return grid[int(rng.integers(len(grid)))]
    if d.integer:
        return int(rng.integers(int(d.low), int(d.high) + 1))
    return d.value(float(rng.random()))


def _nelder_mead(f: Callable[[FloatArray], tuple[float, ...]], x0: Sequence[float], iterations: int) -> None:
    """Nelder–Mead (reflection 1, expansion 2, contraction and shrink 1/2) in the unit box.

    Points are clipped into [0, 1]^d. Only comparisons of ``f`` are used, so its values may be
    any ordered tuples. Stops when the simplex is smaller than 1e-3 of the box or after
    ``iterations``; the caller stops it earlier by raising from ``f``.
    """
    d = len(x0)
    start = np.clip(np.asarray(x0, dtype=np.float64), 0.0, 1.0)
    simplex = [start]
    for i in range(d):
        x = start.copy()
        x[i] += 0.25 if x[i] <= 0.75 else -0.25
        simplex.append(x)
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = sorted(range(d + 1), key=lambda i: values[i])
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if max(float(np.max(np.abs(x - simplex[0]))) for x in simplex[1:]) < 1e-3:
            return
        centroid = np.mean(simplex[:-1], axis=0)
        away = centroid - simplex[-1]  # from the worst point through the centroid
        xr = np.clip(centroid + away, 0.0, 1.0)
        fr = f(xr)
        if fr < values[0]:
            xe = np.clip(centroid + 2.0 * away, 0.0, 1.0)
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            # Contract outside (toward the reflection) or inside (toward the worst point).
            xc = np.clip(centroid + (0.5 if fr < values[-1] else -0.5) * away, 0.0, 1.0)
            fc = f(xc)
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = xc, fc
            else:
                first = simplex[0]
                simplex = [first] + [first + 0.5 * (x - first) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]


def best(trials: Sequence[Trial]) -> Trial | None:
    """The feasible trial with the lowest objective (the earliest of equals), or None."""
    feasible = [t for t in trials if t.scores.feasible]
    return min(feasible, key=lambda t: t.scores.objective) if feasible else None


# ---------------------------------------------------------------------------- one configuration
# The objective of one configuration, through the batch path of the C kernel
# (arenad.evaluation.fast: the harness's predictions, bit for bit, tests/evaluation/test_fast.py).
def score_config(
    params: ADRParams, events: Sequence[StreamEvent] | Columns, block: int, test_every: int, seed: int
) -> dict[str, float]:
    """Walk-forward scores of ADR with ``params`` on ``events`` (§10.5): ``heldout_log_loss``
    (the objective), ``heldout_ece``, ``heldout_auc``, ``heldout_n``, the other ``heldout_*``
    and ``online_*`` metrics — the ``adr`` row of ``arenad evaluate --config`` on that stream."""
    predictions = walk_forward_adr(params, events, test_every=test_every, block=block)
    return score(predictions, seed)["adr"]


# ---------------------------------------------------------------------------- the constraints
#: The scenario stream: §10.4 with every scenario, the size docs/evaluation.md measures.
SCENARIO_PLAYERS = 200
SCENARIO_DAYS = 90
SCENARIO_EVENTS = 60_000
#: The §10.2 baselines whose median farming gain is the default farming limit.
BASELINES = ("elo", "elo-dynamic", "glicko2", "trueskill")
MEASURES = (
    "farming_gain", "burst_gain", "tier_changes_per_1k", "absence_rating_change", "absence_display_change",
)  # fmt: skip


@functools.lru_cache(maxsize=4)
def scenario_stream(seed: int = 1, events: int = SCENARIO_EVENTS) -> SimulatedStream:
    """The §10.4 stream the constraints are measured on (built once per seed and size)."""
    pop = Population(players=SCENARIO_PLAYERS, days=SCENARIO_DAYS, seed=seed, events=events)
    return simulate_stream(pop, ScenarioPlan(strict=True))


def _watched(models: Mapping[str, Any], stream: SimulatedStream, params: ADRParams) -> ScenarioWatch:
    # The constraints read ADR's own tiers, not the quantile tiers the watch keeps for every
    # model: calibrating those never (interval inf) halves the time of the pass.
    rules = TierRules.from_params(params, interval=math.inf)
    watch = ScenarioWatch(models, stream.truth, rules, events=len(stream.events))
    replay(models, stream.events, watch)
    return watch


def scenario_measures(params: ADRParams, stream: SimulatedStream) -> dict[str, float]:
    """What the constraints read, for ADR with ``params`` learning every event of ``stream``.

    ``farming_gain`` and ``burst_gain`` in sd of the ratings and ``tier_changes_per_1k`` (ADR's
    own §6.4 tiers) as ``arenad evaluate`` reports them; ``absence_rating_change`` and
    ``absence_display_change`` in rating points: the largest change of the returning player's
    rating (and display rating mu − 3σ) from one event to the next after its return, to set
    against §8.4's delta_max.
    """
    watch = _watched({"adr": adr_model(params)}, stream, params)
    row = watch.results()["adr"]
    steps = watch.track["adr"].absence_steps
    return {
        "farming_gain": float(row["farming_gain"]),
        "burst_gain": float(row["burst_gain"]),
        "tier_changes_per_1k": float(row["tier_changes_per_1k"]),
        "absence_rating_change": max((abs(r) for r, _ in steps), default=math.nan),
        "absence_display_change": max((abs(d) for _, d in steps), default=math.nan),
    }


@functools.lru_cache(maxsize=4)
def baseline_farming(seed: int = 1, events: int = SCENARIO_EVENTS) -> float:
    """Median farming gain (sd) of the §10.2 baselines on :func:`scenario_stream`."""
    stream = scenario_stream(seed, events)
    watch = _watched({n: BUILTIN_MODELS[n]() for n in BASELINES}, stream, ADRParams())
    return statistics.median(float(row["farming_gain"]) for row in watch.results().values())


@dataclass(frozen=True, slots=True)
class Limits:
    """The constraint limits; None for the absence limits means the configuration's delta_max."""

    max_farming: float
    max_burst: float = 0.0
    max_tier_changes: float = 15.0
    max_absence_change: float | None = None
    max_absence_display: float | None = None

    def constraints(self, params: ADRParams) -> list[Constraint]:
        rating = params.delta_max if self.max_absence_change is None else self.max_absence_change
        display = params.delta_max if self.max_absence_display is None else self.max_absence_display
        return [
            Constraint("farming_gain", self.max_farming),
            Constraint("burst_gain", self.max_burst),
            Constraint("tier_changes_per_1k", self.max_tier_changes),
            Constraint("absence_rating_change", rating),
            Constraint("absence_display_change", display),
        ]

    def describe(self, farming_source: str = "") -> list[str]:
        """One line per constraint; ``farming_source`` says where the farming limit came from."""
        absence = [
            f"{key} <= {'delta_max' if v is None else _short(v)} points"
            for key, v in (
                ("absence_rating_change", self.max_absence_change),
                ("absence_display_change", self.max_absence_display),
            )
        ]
        return [
            f"farming_gain <= {_short(self.max_farming)} sd{farming_source}",
            f"burst_gain <= {_short(self.max_burst)} sd",
            f"tier_changes_per_1k <= {_short(self.max_tier_changes)}",
            *absence,
        ]


def scorer(
    base: ADRParams,
    events: Sequence[StreamEvent],
    *,
    block: int,
    test_every: int,
    seed: int,
    stream: SimulatedStream,
    limits: Limits,
) -> Callable[[Config], Scores]:
    """The ``score`` a search calls: the base with the configuration's keys, then
    :func:`score_config` on ``events`` and :func:`scenario_measures` on ``stream``."""

    cols = columns(events)  # split once: every configuration reads the same stream

    def score(config: Config) -> Scores:
        try:
            params = with_base(base, config)
        except ConfigError as e:
            return refused("; ".join(f"{p.key}: {p.message}" for p in e.problems))
        values = score_config(params, cols, block, test_every, seed)
        values.update(scenario_measures(params, stream))
        return judge(values["heldout_log_loss"], values, limits.constraints(params))

    return score


# ---------------------------------------------------------------------------- reporting
COLUMNS = ("heldout_log_loss", "heldout_ece", "heldout_auc", *MEASURES)


def table_rows(trials: Sequence[Trial], space: Sequence[Dimension]) -> list[dict[str, Any]]:
    """One row per trial, by objective (refused configurations last), the chosen one marked."""
    chosen = best(trials)
    rows: list[dict[str, Any]] = []
    for t in sorted(trials, key=lambda t: (bool(t.scores.error), t.scores.rank()[2], t.index)):
        s = t.scores
        row: dict[str, Any] = {"trial": "base" if t.index == 0 else t.index}
        for d in space:
            row[d.key] = t.config.get(d.key)
        for c in COLUMNS:
            v = s.values.get(c)
            row[c] = round(v, 4) + 0.0 if v is not None and math.isfinite(v) else None
        if s.error:
            row["status"] = f"invalid: {s.error}"
        elif s.violated:
            row["status"] = "violated: " + ", ".join(s.violated)
        else:
            row["status"] = "ok, chosen" if t is chosen else "ok"
        rows.append(row)
    return rows


def measured(scores: Scores, constraints: Sequence[Constraint]) -> list[str]:
    """``key value <= limit`` for each constraint, as the ``[adr]`` header states them."""
    return [
        f"{c.key} {_short(scores.values.get(c.key, math.nan))} <= {_short(c.limit)}"
        + ("" if c.excess(scores.values.get(c.key, math.nan)) == 0 else " (violated)")
        for c in constraints
    ]


def adr_section(params: ADRParams, header: Sequence[str] = ()) -> str:
    """An ``[adr]`` section that loads as ``params``: the keys that differ from arenad's defaults,
    or ``preset = "paper"`` and the keys that differ from the paper's §9 set when that is
    shorter. ``header`` lines come first, as comments."""
    mine = params.to_mapping()
    defaults, paper_values = ADRParams().to_mapping(), ADRParams.paper().to_mapping()
    default = {k: v for k, v in mine.items() if defaults.get(k) != v}
    paper = {"preset": "paper", **{k: v for k, v in mine.items() if paper_values.get(k) != v}}
    keys = paper if len(paper) < len(default) else default
    lines = [f"# {line}" for line in header]
    lines.append("[adr]")
    lines += [f"{k} = {_toml(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def _short(v: float) -> str:
    return f"{v:.4g}"
