"""Rating models side by side: kill updates/s for every built-in, match updates/s, and the packages.

Run:  .venv/bin/python -m bench.models [--quick] [--kills 50000] [--players 1000] [--matches 5000]
      [--match-size 8] [--repeat 3] [--seed 1]

Two workloads, built before anything is timed from one ``arenad.simulate`` population (hidden
skills from its Gaussian mixture, ``--seed``):

* **kills**: the first ``--kills`` kills of ``arenad.simulate.event_stream`` among ``--players``
  players (a 1v1 stream: attacker, victim, t).
* **matches**: ``--matches`` FFA matches of ``--match-size`` players drawn from the same
  population, placed by hidden skill plus Gaussian noise (sd 1), neighbours tied with
  probability 0.1 (groups best first).

Timed, best of ``--repeat`` runs, each on a fresh model:

* every model of ``BUILTIN_MODELS``: ``update`` over the kill stream (updates/s and µs per
  update), and ``predict`` then ``update`` per kill (what the daemon's shadow path and a
  walk-forward evaluation do). An offline model (``is_offline``) only records a kill in
  ``update`` and refits in ``predict``: its figure is the predict + update one;
* the reference packages' own loops over the same kills, ratings kept in a dict of the
  package's rating objects: ``openskill`` ``PlackettLuce().rate([[a], [b]])`` and ``trueskill``
  ``TrueSkill(draw_probability=0).rate_1vs1(a, b)`` (the ``trueskill`` model's ε = 0);
* the match models' ``update_match`` over the matches, next to ``openskill``
  ``PlackettLuce().rate(teams, ranks=...)`` and ``trueskill`` ``TrueSkill().rate(groups,
  ranks=...)`` (draw probability 0.10, as ``trueskill-ffa``).

Each package row also reports how far its final ratings are from the arenad model that computes
the same thing (largest |Δμ| over all players): 0 for ``openskill``, which the arenad model
calls; for ``trueskill`` the package's own approximate erfc (~1e-7) and its early stop
(``min_delta`` 1e-4) against arenad's exact Φ and converged EP. ``trueskill`` raises
``FloatingPointError`` when its approximations give w outside (0, 1) (a large upset); such
updates are counted and skipped.

stdout: a Markdown table, then one line of JSON with every figure. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import trueskill  # type: ignore[import-untyped]  # dev extra, no type information
from openskill.models import PlackettLuce, PlackettLuceRating

from arenad.models import BUILTIN_MODELS, MatchModel, is_offline, rates_matches
from arenad.simulate import Population, event_stream
from bench.core import engine_version, loadavg, machine

Kill = tuple[str, str, float]
Match = list[list[str]]
Result = dict[str, Any]
#: The match models and the package functions that compute the same update.
MATCH_BASELINES = {"openskill": "openskill", "trueskill-ffa": "trueskill"}


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- workloads
def kill_stream(players: int, kills: int, seed: int) -> list[Kill]:
    """The first ``kills`` kills of the simulated server network (``arenad.simulate``)."""
    pop = Population(players=players, seed=seed)
    per_day = players * pop.play_probability * pop.kills_per_player_day / 2
    pop = Population(players=players, seed=seed, days=math.ceil(kills / per_day) + 1)
    stream = event_stream(pop)
    if len(stream) < kills:
        raise RuntimeError(f"the simulation gave {len(stream)} kills, fewer than {kills}")
    return stream[:kills]


def match_stream(players: int, matches: int, size: int, seed: int) -> list[Match]:
    """FFA matches of ``size`` players placed by hidden skill + noise; neighbours tie w.p. 0.1."""
    skill = Population(players=players, seed=seed).skills()
    names = [f"p{i:04d}" for i in range(players)]
    rng = random.Random(seed + 2)
    out: list[Match] = []
    for _ in range(matches):
        chosen = rng.sample(range(players), size)
        chosen.sort(key=lambda i: -(skill[i] + rng.gauss(0.0, 1.0)))
        groups: Match = []
        for i in chosen:
            if groups and rng.random() < 0.1:
                groups[-1].append(names[i])
            else:
                groups.append([names[i]])
        out.append(groups)
    return out


# ---------------------------------------------------------------------------- timing
def best_of(repeat: int, run: Callable[[], int]) -> int:
    """Smallest of ``repeat`` runs' nanoseconds; ``run`` times itself (setup stays outside)."""
    best = 0
    for _ in range(repeat):
        gc.collect()
        ns = run()
        best = ns if best == 0 else min(best, ns)
    return best


def time_updates(name: str, kills: Sequence[Kill]) -> int:
    update = BUILTIN_MODELS[name]().update
    started = time.perf_counter_ns()
    for a, v, t in kills:
        update(a, v, t)
    return time.perf_counter_ns() - started


def time_predict_updates(name: str, kills: Sequence[Kill]) -> int:
    model = BUILTIN_MODELS[name]()
    predict = model.predict
    update = model.update
    started = time.perf_counter_ns()
    for a, v, t in kills:
        predict(a, v, t)
        update(a, v, t)
    return time.perf_counter_ns() - started


def time_matches(name: str, matches: Sequence[Match]) -> int:
    model = BUILTIN_MODELS[name]()
    assert isinstance(model, MatchModel)
    update_match = model.update_match
    started = time.perf_counter_ns()
    for groups in matches:
        update_match(groups, 0.0)
    return time.perf_counter_ns() - started


def openskill_kills(kills: Sequence[Kill], out: dict[str, float]) -> int:
    """The package's own loop: a dict of its rating objects, ``rate([[a], [b]])`` per kill."""
    model = PlackettLuce()
    rate = model.rate
    new = model.rating
    ratings: dict[str, PlackettLuceRating] = {}
    started = time.perf_counter_ns()
    for a, v, _ in kills:
        ra = ratings.get(a)
        rv = ratings.get(v)
        (ra,), (rv,) = rate([[new() if ra is None else ra], [new() if rv is None else rv]])
        ratings[a] = ra
        ratings[v] = rv
    elapsed = time.perf_counter_ns() - started
    out.update({p: r.mu for p, r in ratings.items()})
    return elapsed


def trueskill_kills(kills: Sequence[Kill], out: dict[str, float], failed: list[int]) -> int:
    """The package's own loop: ``rate_1vs1`` with no draw margin, as the ``trueskill`` model."""
    env = trueskill.TrueSkill(draw_probability=0.0)
    rate_1vs1 = env.rate_1vs1
    new = env.create_rating
    ratings: dict[str, Any] = {}
    errors = 0
    started = time.perf_counter_ns()
    for a, v, _ in kills:
        ra = ratings.get(a)
        rv = ratings.get(v)
        try:
            ra, rv = rate_1vs1(new() if ra is None else ra, new() if rv is None else rv)
        except FloatingPointError:
            errors += 1
            continue
        ratings[a] = ra
        ratings[v] = rv
    elapsed = time.perf_counter_ns() - started
    out.update({p: float(r.mu) for p, r in ratings.items()})
    failed.append(errors)
    return elapsed


def openskill_matches(matches: Sequence[Match], out: dict[str, float]) -> int:
    model = PlackettLuce()
    rate = model.rate
    new = model.rating
    ratings: dict[str, PlackettLuceRating] = {}
    started = time.perf_counter_ns()
    for groups in matches:
        players = [p for g in groups for p in g]
        ranks: list[float] = [float(k) for k, g in enumerate(groups) for _ in g]
        rated = rate([[ratings[p] if p in ratings else new()] for p in players], ranks=ranks)
        for p, (r,) in zip(players, rated, strict=True):
            ratings[p] = r
    elapsed = time.perf_counter_ns() - started
    out.update({p: r.mu for p, r in ratings.items()})
    return elapsed


def trueskill_matches(matches: Sequence[Match], out: dict[str, float], failed: list[int]) -> int:
    env = trueskill.TrueSkill()  # draw probability 0.10, as trueskill-ffa
    rate = env.rate
    new = env.create_rating
    ratings: dict[str, Any] = {}
    errors = 0
    started = time.perf_counter_ns()
    for groups in matches:
        players = [p for g in groups for p in g]
        ranks = [k for k, g in enumerate(groups) for _ in g]
        try:
            rated = rate([(ratings[p] if p in ratings else new(),) for p in players], ranks=ranks)
        except FloatingPointError:
            errors += 1
            continue
        for p, (r,) in zip(players, rated, strict=True):
            ratings[p] = r
    elapsed = time.perf_counter_ns() - started
    out.update({p: float(r.mu) for p, r in ratings.items()})
    failed.append(errors)
    return elapsed


def final_mu(name: str, kills: Sequence[Kill] = (), matches: Sequence[Match] = ()) -> dict[str, float]:
    """An arenad model's ratings after the stream (untimed), to compare with a package run."""
    model = BUILTIN_MODELS[name]()
    for a, v, t in kills:
        model.update(a, v, t)
    if matches:
        assert isinstance(model, MatchModel)
        for groups in matches:
            model.update_match(groups, 0.0)
    return {p: model.rating(p) for p in model.players()}


def largest_gap(ours: dict[str, float], theirs: dict[str, float]) -> float:
    return max((abs(ours[p] - theirs[p]) for p in theirs), default=0.0)


# ---------------------------------------------------------------------------- measuring
def measure(args: argparse.Namespace, log: Callable[[str], None]) -> Result:
    kills = kill_stream(args.players, args.kills, args.seed)
    matches = match_stream(args.players, args.matches, args.match_size, args.seed)
    log(f"{len(kills):,} kills, {len(matches):,} matches of {args.match_size} among {args.players:,} players")
    n = len(kills)
    kill_rows: dict[str, Result] = {}
    for name in BUILTIN_MODELS:
        log(f"kills: {name}")
        ns = best_of(args.repeat, partial(time_updates, name, kills))
        both = best_of(args.repeat, partial(time_predict_updates, name, kills))
        kill_rows[name] = {
            "updates_per_s": round(n / (ns / 1e9)),
            "us_per_update": round(ns / 1e3 / n, 3),
            "us_per_predict_and_update": round(both / 1e3 / n, 3),
            "offline": is_offline(BUILTIN_MODELS[name]()),
        }
    log("kills: openskill package")
    mus: dict[str, float] = {}
    ns = best_of(args.repeat, lambda: openskill_kills(kills, mus))
    kill_rows["openskill package: PlackettLuce().rate"] = {
        "updates_per_s": round(n / (ns / 1e9)),
        "us_per_update": round(ns / 1e3 / n, 3),
        "same_as": "openskill",
        "largest_mu_gap": largest_gap(final_mu("openskill", kills=kills), mus),
    }
    log("kills: trueskill package")
    failed: list[int] = []
    mus = {}
    ns = best_of(args.repeat, lambda: trueskill_kills(kills, mus, failed))
    kill_rows["trueskill package: rate_1vs1"] = {
        "updates_per_s": round(n / (ns / 1e9)),
        "us_per_update": round(ns / 1e3 / n, 3),
        "same_as": "trueskill",
        "largest_mu_gap": largest_gap(final_mu("trueskill", kills=kills), mus),
        "floating_point_errors": failed[-1],
    }

    m = len(matches)
    match_rows: dict[str, Result] = {}
    for name, factory in BUILTIN_MODELS.items():
        if not rates_matches(factory()):
            continue
        log(f"matches: {name}")
        ns = best_of(args.repeat, partial(time_matches, name, matches))
        match_rows[name] = {"matches_per_s": round(m / (ns / 1e9)), "us_per_match": round(ns / 1e3 / m, 1)}
    log("matches: openskill package")
    mus = {}
    ns = best_of(args.repeat, lambda: openskill_matches(matches, mus))
    match_rows["openskill package: PlackettLuce().rate"] = {
        "matches_per_s": round(m / (ns / 1e9)),
        "us_per_match": round(ns / 1e3 / m, 1),
        "same_as": "openskill",
        "largest_mu_gap": largest_gap(final_mu("openskill", matches=matches), mus),
    }
    log("matches: trueskill package")
    failed = []
    mus = {}
    ns = best_of(args.repeat, lambda: trueskill_matches(matches, mus, failed))
    match_rows["trueskill package: TrueSkill().rate"] = {
        "matches_per_s": round(m / (ns / 1e9)),
        "us_per_match": round(ns / 1e3 / m, 1),
        "same_as": "trueskill-ffa",
        "largest_mu_gap": largest_gap(final_mu("trueskill-ffa", matches=matches), mus),
        "floating_point_errors": failed[-1],
    }
    return {"kills": kill_rows, "matches": match_rows}


# ---------------------------------------------------------------------------- report
def _gap(row: Result) -> str:
    if "largest_mu_gap" not in row:
        return ""
    gap = f"{row['largest_mu_gap']:.1e} vs `{row['same_as']}`"
    errors = row.get("floating_point_errors")
    return gap + (f", {errors} FloatingPointError" if errors else "")


def format_table(report: Result) -> str:
    out = [
        f"Kill stream: {report['kills']:,} kills among {report['players']:,} players, best of "
        f"{report['repeat']}",
        "",
        "| model | updates/s | µs/update | µs predict+update | max abs μ gap |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    offline = False
    for name, row in report["results"]["kills"].items():
        both = row.get("us_per_predict_and_update")
        label = f"{name} (offline)¹" if row.get("offline") else name
        offline = offline or bool(row.get("offline"))
        out.append(
            f"| {label} | {row['updates_per_s']:,} | {row['us_per_update']:.2f} | "
            f"{'' if both is None else f'{both:.2f}'} | {_gap(row)} |"
        )
    if offline:
        out += [
            "",
            "¹ offline (`is_offline`): `update` only records the kill and the refits happen in "
            "`predict`, so read the predict+update column.",
        ]
    out += [
        "",
        f"Matches: {report['matches']:,} FFA matches of {report['match_size']} players, best of "
        f"{report['repeat']}",
        "",
        "| model | matches/s | µs/match | max abs μ gap |",
        "| --- | ---: | ---: | --- |",
    ]
    for name, row in report["results"]["matches"].items():
        out.append(f"| {name} | {row['matches_per_s']:,} | {row['us_per_match']:,.1f} | {_gap(row)} |")
    return "\n".join(out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__.split("\n", 1)[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 5,000 kills, 500 matches, one run each")
    p.add_argument("--kills", type=int, default=None, help="kills in the 1v1 stream (default 50,000)")
    p.add_argument("--players", type=int, default=1_000, help="players (default 1,000)")
    p.add_argument("--matches", type=int, default=None, help="FFA matches (default 5,000)")
    p.add_argument("--match-size", type=int, default=8, help="players per match (default 8)")
    p.add_argument("--repeat", type=int, default=None, help="runs per figure, best taken (default 3)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    # --quick only changes the defaults: explicit --kills/--matches/--repeat still win.
    quick = args.quick
    if args.kills is None:
        args.kills = 5_000 if quick else 50_000
    if args.matches is None:
        args.matches = 500 if quick else 5_000
    if args.repeat is None:
        args.repeat = 1 if quick else 3
    for key in ("kills", "matches", "repeat"):
        if getattr(args, key) < 1:
            p.error(f"--{key} must be at least 1")
    if args.players < 2 or not 2 <= args.match_size <= args.players:
        p.error("need --players >= 2 and 2 <= --match-size <= --players")
    return args


def main(argv: Sequence[str] | None = None, log: Callable[[str], None] = _stderr) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    load0 = loadavg()
    results = measure(args, log)
    report: Result = {
        "bench": "models",
        "kills": args.kills,
        "players": args.players,
        "matches": args.matches,
        "match_size": args.match_size,
        "repeat": args.repeat,
        "seed": args.seed,
        "results": results,
        **machine(),
        **engine_version(),
        "loadavg_1m": [load0, loadavg()],
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(format_table(report))
    print(f"\nload average {load0} -> {report['loadavg_1m'][1]}; {report['seconds']} s in all")
    loads = [x for x in report["loadavg_1m"] if x is not None]
    if loads and max(loads) > 1.5:
        print(
            f"WARNING: load average reached {max(loads):.2f} on {report['cores']} cores while timing: "
            "other processes competed for the CPU, so every rate is pessimistic (the ratios between "
            "rows, measured in the same run, hold better)."
        )
    print(json.dumps(report, separators=(",", ":"), allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
