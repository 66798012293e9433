"""Command line: ``arenad replay | simulate | evaluate | tune | check-config | version`` and the rest."""

from __future__ import annotations

import argparse
import collections
import functools
import itertools
import json
import math
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from arenad import __version__, tune
from arenad.auth import Signer, parse_key
from arenad.core.events import KillEvent, PlacementEvent
from arenad.core.params import ADRParams
from arenad.daemon.admin_client import add_admin_parsers, run_admin
from arenad.daemon.config_sources import TailSpec
from arenad.daemon.emit import emit_mqtt, emit_udp, simulated_kills
from arenad.daemon.query_client import add_query_parser, run_query
from arenad.daemon.secrets import read_secret
from arenad.daemon.sources.hl_udp import source_udp_feed_options
from arenad.errors import ArenadError, ConfigError, ConfigProblem, InputError
from arenad.evaluation.plots import (
    INSTALL_HINT,
    plots_available,
    write_evaluation_plots,
    write_returning_plots,
)
from arenad.evaluation.protocol import ModelFactory, evaluate
from arenad.evaluation.report import build_report, render_markdown, returning_report
from arenad.evaluation.returning import returning_toy
from arenad.evaluation.tiers import TierRules
from arenad.evaluation.truth import Truth
from arenad.evaluation.walkforward import StreamEvent
from arenad.feeds import FeedPlugin, feed_plugin, loaded_feeds
from arenad.fileio import atomic_text_file
from arenad.models import discover_models
from arenad.models.adr import adr_model
from arenad.replay import iter_file, replay_files, replay_log_files, replay_scoped, write_state
from arenad.scopes import ScopeSet, parse_scope
from arenad.settings import Settings, load_settings
from arenad.simulate import (
    SCENARIOS,
    Population,
    ScenarioPlan,
    event_stream,
    format_table,
    placements_from_kills,
    simulate_returning,
    simulate_stream,
    simulate_tiers,
)

MODELS = ("adr",)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="arenad", description="Skill ratings for free-for-all arenas (ADR).")
    sub = ap.add_subparsers(dest="command", required=True)

    rp = sub.add_parser("replay", help="rate an event file offline and write the ladder")
    rp.add_argument("--model", default="adr", choices=MODELS)
    rp.add_argument(
        "--format",
        default="arenad",
        help="input format: arenad (JSON lines or msgpack) or a feed plugin such as openarena or source",
    )
    rp.add_argument(
        "--feed-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option for the feed parser (repeatable), e.g. bots=exclude or base_time=1700000000",
    )
    rp.add_argument("--config", type=Path, help="TOML settings file ([adr] parameters, [scopes])")
    rp.add_argument(
        "--scope",
        default=None,
        help="write this scope's ladder: global (default), server:ID, season, season:NAME, event:NAME",
    )
    rp.add_argument("--out", type=Path, required=True, help="state file to write (JSON lines, best first)")
    rp.add_argument("files", type=Path, nargs="+", help="event files: JSON lines or msgpack, in order")

    sp = sub.add_parser("simulate", help="run the paper's experiments on simulated servers")
    sp.add_argument("experiment", choices=("returning", "tiers"))
    sp.add_argument("--config", type=Path, help="TOML settings file ([adr] parameters)")
    sp.add_argument("--players", type=int, default=500, help="tiers: simulated players")
    sp.add_argument("--days", type=int, default=28, help="tiers: simulated days")
    sp.add_argument("--seed", type=int, default=1)
    sp.add_argument("--kills", type=int, default=50, help="returning: consecutive kills")
    sp.add_argument("--json", action="store_true", help="print JSON rows instead of a table")

    gp = sub.add_parser("generate", help="write a simulated kill stream (JSON lines) for trying things out")
    gp.add_argument("--players", type=int, default=200)
    gp.add_argument("--days", type=int, default=7)
    gp.add_argument("--seed", type=int, default=1)
    gp.add_argument("--out", type=Path, required=True)

    run = sub.add_parser("run", help="run the daemon (live feeds in; ratings, lookups and metrics out)")
    run.add_argument("--config", type=Path, help="TOML settings file (default: built-in defaults)")
    run.add_argument("--state-dir", help="state directory (journal and checkpoints)")
    run.add_argument("--udp", metavar="ADDR", help='UDP listen address, or "off"')
    run.add_argument("--mqtt", metavar="URL", help='MQTT broker URL (mqtt://host:port), or "off"')
    run.add_argument("--query", metavar="ADDR", help='query TCP listen address, or "off"')
    run.add_argument("--query-unix", metavar="PATH", help="also serve queries on this Unix socket")
    run.add_argument("--metrics", metavar="ADDR", help='Prometheus listen address, or "off"')
    run.add_argument("--web", metavar="ADDR", help='HTTP API and pages listen address, or "off"')
    run.add_argument("--source-udp", metavar="ADDR", help='Source-engine UDP log listen address, or "off"')
    run.add_argument(
        "--tail",
        action="append",
        default=[],
        metavar="FORMAT:PATH",
        help="follow a game-server log (repeatable), e.g. openarena:/srv/oa/.openarena/baseoa/games.log",
    )
    run.add_argument("--log-format", choices=("auto", "json", "console"))
    run.add_argument("--log-level", choices=("debug", "info", "warning", "error"))

    em = sub.add_parser("emit", help="send simulated kills to a running arenad (UDP or MQTT)")
    target = em.add_mutually_exclusive_group()
    target.add_argument("--udp", metavar="ADDR", default="127.0.0.1:27500", help="UDP target (default)")
    target.add_argument("--mqtt", metavar="URL", help="MQTT broker URL; publishes with QoS 1")
    em.add_argument("--topic", default="arena/sim-1/kills", help="MQTT topic (the + segment is the server)")
    em.add_argument("--players", type=int, default=20)
    em.add_argument("--events", type=int, default=1000)
    em.add_argument("--batch", type=int, default=50, help="events per datagram / message")
    em.add_argument("--rate", type=float, default=0.0, help="events per second (0: as fast as possible)")
    em.add_argument("--seed", type=int, default=1)
    em.add_argument("--server", default="sim-1")
    em.add_argument("--key-id", metavar="ID", help="sign UDP datagrams under this [[udp.keys]] id")
    em.add_argument("--key-file", metavar="FILE", type=Path, help="file whose first line is that key (hex)")

    add_query_parser(sub)
    add_admin_parsers(sub)

    cp = sub.add_parser("check-config", help="validate a settings file; list every problem")
    cp.add_argument("file", type=Path)

    ev = sub.add_parser(
        "evaluate",
        help="the paper's §10 protocol: rating models compared walking forward, with injected scenarios",
    )
    ev.add_argument(
        "--models", default="adr,elo,elo-dynamic,glicko2,trueskill", help="comma-separated model names"
    )
    ev.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML settings file: its [adr] section (with [models] primary folded in) replaces the "
        "defaults of the model named adr, and the quantile tiers of the other models follow its §6 "
        "numbers. adr-paper, adr-printed, adr-unanchored and the other models keep their own "
        "parameters; with a --models list without adr, only the tier rules come from FILE",
    )
    _add_stream_options(
        ev,
        simulate_help="a §10.4 simulated stream (the default without FILES)",
        files_help="event files (default: a simulated stream)",
    )
    ev.add_argument("--out", type=Path, help="write report.json, report.md and PNG plots into this directory")
    ev.add_argument("--no-plots", action="store_true", help="with --out: no PNG plots")
    ev.add_argument(
        "--returning", action="store_true",
        help="run §10.6 instead: a 1000-rated player back after --absence-days beats a 2000-rated one",
    )  # fmt: skip
    ev.add_argument("--kills", type=int, default=50, help="returning: consecutive kills")
    ev.add_argument(
        "--fixed-opponent",
        action="store_true",
        help="returning: hold the opponent's rating (the paper's Elo setup)",
    )
    _add_tune_parser(sub)

    sub.add_parser("plugins", help="list rating models and feed plugins (built-in and entry points)")
    sub.add_parser("version", help="print the version")
    cl = sub.add_parser("cluster", help="the cluster mode on NATS JetStream ([cluster], docs/operations.md)")
    clsub = cl.add_subparsers(dest="cluster_command", required=True)
    cs = clsub.add_parser("status", help="nodes, their stream positions and lag, and the lease holder")
    cs.add_argument("--config", type=Path, help="TOML settings file: its [cluster] servers and stream")
    cs.add_argument("--servers", help="comma-separated NATS URLs instead of [cluster] servers")
    cs.add_argument("--json", action="store_true", help="print the answer as JSON")
    return ap


def _add_tune_parser(sub: Any) -> None:
    tp = sub.add_parser(
        "tune",
        help="calibrate ADR's [adr] parameters on your own history (held-out log loss, with constraints)",
        description="Search [adr] parameters for the lowest held-out log loss on FILES (or a simulation), "
        "walking forward as evaluate does. Each configuration is also measured on the §10.4 scenario "
        "stream (200 simulated players with farming, bursts and an absence); one that breaks a "
        "constraint is listed but never chosen. The best feasible one is written as an [adr] section.",
    )
    tp.add_argument(
        "--params", action="append", required=True, metavar="NAME=LO:HI[:STEPS]",
        help="a numeric [adr] key and its range (repeatable); STEPS: grid points (default 5)",
    )  # fmt: skip
    tp.add_argument(
        "--method", choices=tune.METHODS, default="nelder-mead", help="search (default nelder-mead)"
    )
    tp.add_argument(
        "--budget", type=int, metavar="N",
        help="configurations to evaluate besides the base (default: the grid; random 20; nelder-mead 30)",
    )  # fmt: skip
    tp.add_argument(
        "--base-config", type=Path, metavar="FILE",
        help="start from this settings file's [adr] (default: arenad's defaults); the base is evaluated too",
    )  # fmt: skip
    tp.add_argument(
        "--out", type=Path, metavar="FILE", help="write the chosen configuration as an [adr] section"
    )
    tp.add_argument(
        "--max-farming", type=float, metavar="SD",
        help="largest farming gain, in sd (default: the median of elo, elo-dynamic, glicko2 and trueskill "
        "on the scenario stream)",
    )  # fmt: skip
    tp.add_argument(
        "--max-burst", type=float, default=0.0, metavar="SD", help="largest burst gain (default 0)"
    )
    tp.add_argument(
        "--max-tier-changes", type=float, default=15.0, metavar="N",
        help="most own-tier changes per 1,000 player-events (default 15)",
    )  # fmt: skip
    tp.add_argument(
        "--max-absence-change", type=float, metavar="POINTS",
        help="largest one-event rating change of the returning player (default: its delta_max)",
    )  # fmt: skip
    tp.add_argument(
        "--max-absence-display", type=float, metavar="POINTS",
        help="largest one-event change of its display rating mu - 3 sigma (default: its delta_max)",
    )  # fmt: skip
    tp.add_argument(
        "--scenario-events", type=int, default=tune.SCENARIO_EVENTS, metavar="N",
        help=f"background kills of the scenario stream (default {tune.SCENARIO_EVENTS}; fewer is faster "
        "and coarser)",
    )  # fmt: skip
    _add_stream_options(
        tp,
        simulate_help="tune on a §10.4 simulated stream (options as for evaluate) instead of FILES",
        files_help="event files to tune on (as for evaluate)",
    )


def _add_stream_options(p: argparse.ArgumentParser, *, simulate_help: str, files_help: str) -> None:
    """The event stream of ``evaluate`` and ``tune``: FILES in a format, or a §10.4 simulation."""
    p.add_argument("--format", default="arenad", help="input format of FILES (arenad or a feed plugin)")
    p.add_argument("--feed-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--simulate", action="store_true", help=simulate_help)
    p.add_argument("--players", type=int, default=50, help="simulate: players P (§10.4)")
    p.add_argument("--days", type=int, default=90, help="simulate: days of play")
    p.add_argument(
        "--events", type=int, help="simulate: background kills in all (default: 30 per online player per day)"
    )
    p.add_argument("--seed", type=int, default=1, help="simulation seed; also seeds the AUC/ECE orientation")
    p.add_argument(
        "--scenarios",
        default="all",
        help="simulate: all (those that fit), none, or a comma list of " + ", ".join(SCENARIOS),
    )
    p.add_argument(
        "--matches", type=float, default=0.0, metavar="MINUTES",
        help="simulate: a match-placement event after every MINUTES of play (0: none)",
    )  # fmt: skip
    p.add_argument(
        "--absence-days", type=float, default=61.0,
        help="days away of the returning player (§10.6) and of the simulated absence (> T_return = 60)",
    )  # fmt: skip
    p.add_argument("--block", type=int, default=500, help="events per block")
    p.add_argument("--test-every", type=int, default=5, help="every k-th block is held out")
    p.add_argument("files", type=Path, nargs="*", help=files_help)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "replay":
            return _replay(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "run":
            return _run(args)
        if args.command == "emit":
            return _emit(args)
        if args.command == "query":
            return run_query(args)
        if args.command in ("season", "exclude", "hide", "merge", "suspects", "recompute", "admin"):
            return run_admin(args)
        if args.command == "generate":
            return _generate(args)
        if args.command == "plugins":
            return _plugins()
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "tune":
            return _tune(args, list(sys.argv[1:] if argv is None else argv))
        if args.command == "cluster":
            return _cluster(args)
        if args.command == "check-config":
            load_checked(args.file)
            print(f"{args.file}: ok")
            return 0
        print(__version__)
        return 0
    except ConfigError as e:
        for p in e.problems:
            print(f"{e.source or 'config'}: {p.key}: {p.value!r}: {p.message}", file=sys.stderr)
        return 2
    except ArenadError as e:
        print(f"arenad: {e}", file=sys.stderr)
        return 1


def _replay(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    for f in args.files:
        if not f.is_file():
            print(f"arenad replay: no such file: {f}", file=sys.stderr)
            return 1
    if args.scope is not None:
        engine, summary = _replay_scope(args, settings)
    elif args.format == "arenad" and not args.feed_option:
        engine, summary = replay_files(args.files, settings.adr)
    else:
        feed = _feed(args)
        engine, summary = replay_log_files(args.files, settings.adr, feed, _feed_options(args.feed_option))
    with atomic_text_file(args.out) as out:
        write_state(engine, out)
    print(json.dumps(summary.as_dict()))
    return 0


def _replay_scope(args: argparse.Namespace, settings: Settings) -> tuple[Any, Any]:
    """Replay through every configured scope; the ladder of ``--scope``."""
    scopes = ScopeSet(settings.adr, settings.scope_config())
    try:
        kind, _ident = parse_scope(args.scope)
    except ValueError as e:
        raise ConfigError([ConfigProblem("--scope", args.scope, str(e))], "command line") from None
    if not scopes.config.on(kind):
        raise ConfigError(
            [
                ConfigProblem(
                    "--scope", args.scope, f"scope kind {kind!r} is not in [scopes] kinds of --config"
                )
            ],
            "command line",
        )
    if args.format == "arenad" and not args.feed_option:
        events: Iterator[Any] = itertools.chain.from_iterable(iter_file(p) for p in args.files)
    else:
        events = _log_events(args.files, _feed(args).parser(_feed_options(args.feed_option)))
    summary = replay_scoped(events, scopes)
    try:
        key = scopes.resolve(args.scope)
    except KeyError as e:
        raise InputError(f"--scope {args.scope}: {e.args[0]}") from None
    return scopes.engines[key], summary


def _feed(args: argparse.Namespace) -> FeedPlugin:
    """The feed plugin ``--format`` names (``ConfigError`` listing the known ones if none)."""
    return feed_plugin(args.format, key="--format", source="command line")


def _log_events(paths: list[Path], parser: Any) -> Iterator[Any]:
    for path in paths:
        for line in path.read_bytes().splitlines():
            for item in parser.feed(line, 0.0):
                if isinstance(item, KillEvent | PlacementEvent):
                    yield item


def _feed_options(pairs: list[str]) -> dict[str, object]:
    """KEY=VALUE pairs; values that read as JSON (numbers, true/false) are converted."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError([ConfigProblem("--feed-option", pair, "must be KEY=VALUE")], "command line")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _evaluate(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    known, errors = discover_models()
    for error in errors:
        print(f"arenad evaluate: model plugin not loaded: {error}", file=sys.stderr)
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        print(
            f"arenad evaluate: unknown model(s) {unknown} (known: {', '.join(known)})",
            file=sys.stderr,
        )
        return 2
    factories = {name: known[name] for name in names}
    configured = load_settings(args.config).adr if args.config is not None else None
    notes: list[str] = []
    if configured is not None:
        if "adr" in factories:
            factories["adr"] = functools.partial(adr_model, configured)
            notes.append(f"adr rates with the [adr] section of {args.config}")
        else:
            notes.append(f"--config: no adr in --models, so {args.config} only sets the tier rules")
    if args.returning:
        if args.files or args.simulate:
            print("arenad evaluate: --returning takes no FILES and no --simulate", file=sys.stderr)
            return 2
        return _evaluate_returning(args, factories)
    try:
        stream = _read_stream(args)
    except _RefusedError as e:
        print(f"arenad evaluate: {e}", file=sys.stderr)
        return 2
    events, truth, source = stream.events, stream.truth, stream.source
    notes = stream.notes + notes
    rules = TierRules.from_params(configured or ADRParams())
    evaluation = evaluate(
        factories,
        events,
        truth=truth,
        rules=rules,
        test_every=args.test_every,
        block=args.block,
        seed=args.seed,
    )
    pred = evaluation.predictions
    if pred.placements:
        kill_only = [n for n, row in evaluation.rows.items() if not row["rates_matches"]]
        if kill_only:
            notes.append(
                f"{', '.join(kill_only)} rate kills only: their placement pairs are predicted from kills and "
                "they do not learn from placement events"
            )
    offline = [n for n, row in evaluation.rows.items() if "read_every" in row]
    if offline:
        every = evaluation.rows[offline[0]]["read_every"]
        notes.append(
            f"{', '.join(offline)} refit over the whole history (offline): the scenario pass reads them "
            f"from a refit every {every} events, and their per-kill measures are n/a"
        )
    deferred = [n for n, row in evaluation.rows.items() if row.get("deferred_updates") and n not in offline]
    if deferred:
        notes.append(
            f"{', '.join(deferred)}: kills take effect when a rating period closes, so a change cannot be "
            "pinned on the kill that caused it (farming and burst measures are n/a)"
        )
    if not pred.held_out.any():
        notes.append(
            f"no held-out block: the stream has {pred.events} events, fewer than "
            f"block × test_every = {args.block * args.test_every}"
        )
    print(f"{pred.events} events ({pred.kills} kills, {pred.placements} placements) from {', '.join(source)}")
    print(format_table(_rounded(evaluation.rows, _PRINTED_PREDICTION), ["model", *_PRINTED_PREDICTION]))
    if truth is not None:
        print()
        print(format_table(_rounded(evaluation.rows, _PRINTED_SCENARIOS), ["model", *_PRINTED_SCENARIOS]))
    for note in notes:
        print(f"note: {note}")
    if args.out is not None:
        report = build_report(
            evaluation, source=source, truth=truth, targets=rules.proportions, extra={"notes": notes}
        )
        _write_report(args, report, lambda out: write_evaluation_plots(out, evaluation, rules.proportions))
    return 0


class _RefusedError(Exception):
    """Options the command refuses (exit 2); the message says why."""


@dataclass(frozen=True, slots=True)
class _Stream:
    """The events of ``evaluate`` or ``tune``, what a simulation hides, and where they came from."""

    events: list[StreamEvent]
    truth: Truth | None
    source: list[str]
    notes: list[str]


def _read_stream(args: argparse.Namespace, *, simulate_by_default: bool = True) -> _Stream:
    """FILES (as ``_file_events`` reads them, in time order) or the §10.4 simulation of the options."""
    if args.files and args.simulate:
        raise _RefusedError("give FILES or --simulate, not both")
    if not args.files and not args.simulate and not simulate_by_default:
        raise _RefusedError("give event FILES to tune on, or --simulate")
    notes: list[str] = []
    if args.files:
        events: list[StreamEvent] = list(_file_events(args))
        late = sum(_time_of(b) < _time_of(a) for a, b in itertools.pairwise(events))
        if late:
            # Models with a clock (ADR) refuse events far older than the newest one, models without
            # one take them as they come: time order is the one order every model reads the same way.
            events.sort(key=_time_of)
            notes.append(f"{late} events came earlier than the one before them; all were put in time order")
        return _Stream(events, None, [str(f) for f in args.files], notes)
    try:
        plan = _scenario_plan(args.scenarios, args.absence_days)
        pop = Population(players=args.players, days=args.days, seed=args.seed, events=args.events)
        simulated = simulate_stream(pop, plan)
        events = list(simulated.events)
        if args.matches > 0:
            events = list(placements_from_kills(simulated.events, 60.0 * args.matches))
    except ValueError as e:
        raise _RefusedError(str(e)) from e
    truth = simulated.truth
    size = f"{args.events} background kills" if args.events is not None else "30 kills per player-day"
    scenarios = ", ".join(s for s in plan.scenarios if s not in truth.skipped) or "none"
    source = [f"simulated (§10.4): {args.players} players, {args.days} days, {size}, seed {args.seed}, "
              f"scenarios: {scenarios}"]  # fmt: skip
    for name, why in truth.skipped.items():
        notes.append(f"scenario {name} skipped: {why}")
    return _Stream(events, truth, source, notes)


_PRINTED_PREDICTION = (
    "online_log_loss", "online_brier", "online_auc", "online_ece", "online_accuracy",
    "heldout_log_loss", "heldout_auc", "heldout_n",
)  # fmt: skip
_PRINTED_SCENARIOS = (
    "convergence_events", "response_delay", "farming_gain", "farming_control_gain", "burst_gain",
    "absence_max_display_change", "tier_changes_per_1k", "tier_share_error",
)  # fmt: skip


def _rounded(rows: dict[str, dict[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, row in rows.items():
        cells: dict[str, Any] = {"model": name}
        for c in columns:
            v = row.get(c)
            if isinstance(v, float):
                v = round(v, 4) + 0.0 if math.isfinite(v) else None  # + 0.0: no "-0.0"
            cells[c] = v
        out.append(cells)
    return out


def _scenario_plan(text: str, absence_days: float) -> ScenarioPlan:
    """``all`` (those that fit the stream), ``none``, or a comma list (each must fit)."""
    value = text.strip().lower()
    if value == "all":
        return ScenarioPlan(absence_days=absence_days)
    if value == "none":
        return ScenarioPlan(scenarios=())
    names = tuple(s.strip() for s in value.split(",") if s.strip())
    return ScenarioPlan(scenarios=names, absence_days=absence_days, strict=True)


def _tune(args: argparse.Namespace, argv: Sequence[str]) -> int:
    base = load_settings(args.base_config).adr
    space = tune.parse_dimensions(args.params, base)
    try:
        budget = tune.resolve_budget(space, args.method, args.budget)
        if args.scenario_events < 1000:
            raise ValueError(f"--scenario-events {args.scenario_events}: at least 1000")
        stream = _read_stream(args, simulate_by_default=False)
    except (ValueError, _RefusedError) as e:
        print(f"arenad tune: {e}", file=sys.stderr)
        return 2
    events = stream.events
    if len(events) < args.block * args.test_every:
        print(
            f"arenad tune: no held-out block: {len(events)} events, fewer than "
            f"--block × --test-every = {args.block * args.test_every}",
            file=sys.stderr,
        )
        return 2
    scenario = tune.scenario_stream(args.seed, args.scenario_events)
    farming = args.max_farming
    farming_note = ""
    if farming is None:
        farming = tune.baseline_farming(args.seed, args.scenario_events)
        farming_note = f" (the median of {', '.join(tune.BASELINES)})"
    limits = tune.Limits(
        farming, args.max_burst, args.max_tier_changes, args.max_absence_change, args.max_absence_display
    )
    where = (
        f"§10.4 scenario stream: {tune.SCENARIO_PLAYERS} players, {tune.SCENARIO_DAYS} days, "
        f"{args.scenario_events} background kills, seed {args.seed}"
    )
    print(f"{len(events)} events from {', '.join(stream.source)}; every {args.test_every}th block of "
          f"{args.block} held out")  # fmt: skip
    print(f"constraints, on the {where}:")
    for line in limits.describe(farming_note):
        print(f"  {line}")
    score = tune.scorer(
        base,
        events,
        block=args.block,
        test_every=args.test_every,
        seed=args.seed,
        stream=scenario,
        limits=limits,
    )
    start = {d.key: base.to_mapping().get(d.key) for d in space}
    began = time.perf_counter()
    trials = tune.search(space, score, method=args.method, budget=budget, start=start, seed=args.seed)
    elapsed = time.perf_counter() - began
    rows = tune.table_rows(trials, space)
    print(format_table(rows, list(rows[0])))
    print(f"{len(trials)} configurations in {elapsed:.1f} s ({elapsed / len(trials):.1f} s each)")
    for note in stream.notes:
        print(f"note: {note}")
    chosen = tune.best(trials)
    if chosen is None:
        broken = collections.Counter(k for t in trials for k in t.scores.violated)
        why = ", ".join(
            f"{key} by {n} of {len(trials)}" + (f" ({_TUNE_FLAGS[key]})" if key in _TUNE_FLAGS else "")
            for key, n in broken.most_common()
        )
        print(
            f"arenad tune: no configuration meets every constraint ({why}); nothing chosen", file=sys.stderr
        )
        return 1
    params = tune.with_base(base, chosen.config)
    s = chosen.scores
    label = "the base" if chosen.index == 0 else f"trial {chosen.index}"
    changes = ", ".join(f"{k} = {v!r}" for k, v in chosen.config.items()) or "as the base"
    print(f"chosen: {label} ({changes}): held-out log loss {s.objective:.6f}")
    if args.out is not None:
        header = [
            f"arenad tune {__version__}: {label} of {len(trials)}, on {', '.join(stream.source)}",
            f"held-out log loss {s.objective:.6f} (ECE {s.values['heldout_ece']:.4f}, "
            f"AUC {s.values['heldout_auc']:.4f}; base {trials[0].scores.objective:.6f}), "
            f"block {args.block}, test_every {args.test_every}, seed {args.seed}",
            f"constraints on the {where}:",
            *(f"  {line}" for line in tune.measured(s, limits.constraints(params))),
            "command: " + shlex.join(["arenad", *argv]),
        ]
        args.out.write_text(tune.adr_section(params, header), encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


#: The option that sets each constraint's limit, for the message when nothing was feasible.
_TUNE_FLAGS = {
    "farming_gain": "--max-farming",
    "burst_gain": "--max-burst",
    "tier_changes_per_1k": "--max-tier-changes",
    "absence_rating_change": "--max-absence-change",
    "absence_display_change": "--max-absence-display",
}


def _evaluate_returning(args: argparse.Namespace, factories: dict[str, ModelFactory]) -> int:
    results = {
        name: returning_toy(
            make(), kills=args.kills, absence_days=args.absence_days, fixed_opponent=args.fixed_opponent
        )
        for name, make in factories.items()
    }
    report = returning_report(results, kills=args.kills, absence_days=args.absence_days)
    print(render_markdown(report))
    if args.out is not None:
        _write_report(args, report, lambda out: write_returning_plots(out, results))
    return 0


def _write_report(
    args: argparse.Namespace, report: dict[str, Any], plot: Callable[[Path], list[str]]
) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.no_plots:
        report["plots"] = []
    elif plots_available():
        report["plots"] = plot(out)
    else:
        report["plots"] = []
        print(f"note: {INSTALL_HINT} (report.json and report.md written without them)")
    (out / "report.json").write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_markdown(report), encoding="utf-8")
    print(f"wrote {out / 'report.json'}, {out / 'report.md'}" + "".join(f", {p}" for p in report["plots"]))


def _time_of(event: StreamEvent) -> float:
    return event[2] if isinstance(event, tuple) else event.t


def _file_events(args: argparse.Namespace) -> Iterator[StreamEvent]:
    """Every valid kill (as ``(attacker, victim, t)``) and placement event of the files, in order.

    Rejects and the other items a feed reports (world kills, identities) are skipped.
    """
    if args.format == "arenad" and not args.feed_option:
        for path in args.files:
            for decoded in iter_file(path):
                if isinstance(decoded, KillEvent):
                    yield decoded.attacker, decoded.victim, decoded.t
                elif isinstance(decoded, PlacementEvent):
                    yield decoded
        return
    feed = _feed(args)
    for path in args.files:
        if not path.is_file():
            raise InputError(f"no such file: {path}")
        parser = feed.parser(_feed_options(args.feed_option))
        for line in path.read_bytes().splitlines():
            for item in parser.feed(line, 0.0):
                if isinstance(item, KillEvent):
                    yield item.attacker, item.victim, item.t
                elif isinstance(item, PlacementEvent):
                    yield item


_MODEL_NOTES = {
    "adr": "ADR with arenad's defaults (ADRParams(); evaluate --config FILE rates its [adr] instead).",
    "adr-paper": "ADR as the paper's §9 sets it (preset = paper: arctan link, theta 400, ...).",
    "adr-printed": "adr-paper with the literal §4.2 victim update (loser_rule = printed), for comparison.",
    "adr-unanchored": "adr-paper without the scale anchor (anchor = false), for comparison.",
}


def _first_doc_line(name: str, factory: object) -> str:
    if name in _MODEL_NOTES:
        return _MODEL_NOTES[name]
    doc = (getattr(factory, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else name


def _plugins() -> int:
    feeds, errors = loaded_feeds()
    models, model_errors = discover_models()
    print(json.dumps({
        "models": {name: _first_doc_line(name, factory) for name, factory in models.items()},
        "feeds": {name: plugin.description for name, plugin in sorted(feeds.items())},
        "errors": [*errors, *model_errors],
    }, indent=2))  # fmt: skip
    return 1 if errors else 0


def _run(args: argparse.Namespace) -> int:
    from arenad.daemon.logs import configure_logging  # noqa: PLC0415 - daemon-only imports
    from arenad.daemon.service import run_daemon  # noqa: PLC0415

    settings = apply_run_flags(load_checked(args.config), args)
    configure_logging(settings.log.format, settings.log.level)
    if settings.cluster.role == "ingest":
        from arenad.cluster.ingestnode import run_ingest  # noqa: PLC0415

        return run_ingest(settings)
    reload = (lambda: apply_run_flags(load_checked(args.config), args)) if args.config is not None else None
    return run_daemon(settings, reload)


def _cluster(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415 - only this command talks to NATS

    from arenad.cluster.heartbeat import format_status, status  # noqa: PLC0415
    from arenad.daemon.logs import configure_logging  # noqa: PLC0415

    configure_logging("console", "warning")  # on stderr: stdout is the answer
    settings = load_checked(args.config).cluster
    if args.servers:
        settings = settings.model_copy(update={"servers": tuple(u.strip() for u in args.servers.split(","))})
    doc = asyncio.run(status(settings))
    print(json.dumps(doc, indent=2) if args.json else format_status(doc))
    return 0


#: `arenad run` flag -> (settings section, key) it overrides.
_RUN_FLAGS = (
    ("state_dir", "daemon", "state_dir"),
    ("udp", "udp", "listen"),
    ("mqtt", "mqtt", "url"),
    ("query", "query", "listen"),
    ("query_unix", "query", "unix"),
    ("metrics", "metrics", "listen"),
    ("web", "web", "listen"),
    ("source_udp", "source_udp", "listen"),
    ("log_format", "log", "format"),
    ("log_level", "log", "level"),
)


def apply_run_flags(settings: Settings, args: argparse.Namespace) -> Settings:
    """Command-line overrides of the usual keys, validated like the file."""
    changes: dict[str, dict[str, object]] = {}
    for flag, name, key in _RUN_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            changes.setdefault(name, {})[key] = value
    problems: list[ConfigProblem] = []
    tails: list[TailSpec] = []
    for text in getattr(args, "tail", []):
        fmt, sep, path = text.partition(":")
        if not sep or not fmt or not path:
            problems.append(
                ConfigProblem("--tail", text, "must be FORMAT:PATH, e.g. openarena:/path/games.log")
            )
        else:
            tails.append(TailSpec(format=fmt, path=path))
    try:
        s = settings.overridden(changes, tuple(tails))
    except ConfigError as e:
        problems.extend(e.problems)
    if problems:
        raise ConfigError(problems, "command line")
    return s


def load_checked(path: Path | str | None) -> Settings:
    """``load_settings`` with what the feed plugins say of their options: the settings sit below
    the feeds, so the Source feed's ``[source_udp.feed_options]`` are checked by the feed."""
    return load_settings(path, checks=(source_udp_feed_options,))


def _emit(args: argparse.Namespace) -> int:
    events = simulated_kills(args.players, args.events, seed=args.seed, server=args.server, rate=0.0)
    if args.mqtt:
        sent = emit_mqtt(args.mqtt, args.topic, events, batch=args.batch, rate=args.rate)
        where = f"{args.mqtt} {args.topic}"
    else:
        sent = emit_udp(args.udp, events, batch=args.batch, rate=args.rate, signer=_emit_signer(args))
        where = f"udp {args.udp}" + (f" signed as {args.key_id}" if args.key_id else "")
    print(json.dumps({"sent": sent, "to": where}))
    return 0


def _emit_signer(args: argparse.Namespace) -> Signer | None:
    """``--key-id`` with ``--key-file``: a signer whose sequence numbers start at the clock (µs)."""
    if bool(args.key_id) != bool(args.key_file):
        raise ConfigError(
            [ConfigProblem("--key-id/--key-file", args.key_id or args.key_file, "give both or neither")]
        )
    if not args.key_id:
        return None
    secret = read_secret("", str(args.key_file), "", "--key-file")
    try:
        return Signer(args.key_id, parse_key(secret or ""), time.time_ns() // 1000)
    except ValueError as e:
        raise ConfigError([ConfigProblem("--key-file", str(args.key_file), f"the key {e}")]) from e


def _generate(args: argparse.Namespace) -> int:
    events = event_stream(Population(players=args.players, days=args.days, seed=args.seed))
    with args.out.open("w", encoding="utf-8") as out:
        for n, (a, b, t) in enumerate(events):
            out.write(
                json.dumps({"t": round(t, 3), "attacker": a, "victim": b, "server": "sim-1", "id": str(n)})
            )
            out.write("\n")
    print(json.dumps({"events": len(events), "players": args.players, "out": str(args.out)}))
    return 0


def _simulate(args: argparse.Namespace) -> int:
    params = load_settings(args.config).adr
    if args.experiment == "returning":
        rows = simulate_returning(params, kills=args.kills)
        if args.json:
            print(json.dumps(rows))
            return 0
        print("§10.6 returning player: rated 1000, back after 61 days, kills a 2000-rated player")
        print(format_table(rows))
        print(f"largest single visible change: {max(abs(r['delta_mu']) for r in rows):.3f}")
        print(f"(delta_max = {params.delta_max})")
        return 0
    pop = Population(players=args.players, days=args.days, seed=args.seed)
    out: dict[str, object] = {}
    # The configured parameters, then the same with the scale anchor flipped, for comparison.
    for label, p in (("configured", params), ("anchor flipped", replace(params, anchor=not params.anchor))):
        rows, _ = simulate_tiers(p, pop)
        out[label] = rows
        if not args.json:
            print(f"== {label} (anchor = {p.anchor}): {args.players} players, {args.days} days ==")
            print(format_table(rows, [c for c in rows[0] if c != "shares"]))
            print(
                "tier shares at the end, % (1H..5L):", " ".join(f"{s * 100:.1f}" for s in rows[-1]["shares"])
            )
            print(
                "target shares, %:                  ", " ".join(f"{s * 100:.1f}" for s in p.tier_proportions)
            )
            print()
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
