"""Command line: ``arenad replay | simulate | check-config | version``."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from arenad import __version__
from arenad.auth import Signer, parse_key
from arenad.core.events import KillEvent, PlacementEvent
from arenad.core.params import ADRParams
from arenad.daemon.admin_client import add_admin_parsers, run_admin
from arenad.daemon.emit import emit_mqtt, emit_udp, simulated_kills
from arenad.daemon.query_client import add_query_parser, run_query
from arenad.daemon.secrets import read_secret
from arenad.daemon.sources.tail import TailSpec
from arenad.decode import iter_file
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
from arenad.evaluation.walkforward import StreamEvent
from arenad.feeds import discover_feeds
from arenad.models import discover_models
from arenad.replay import replay_files, replay_log_files, replay_scoped, write_state
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
    ev.add_argument("--format", default="arenad", help="input format of FILES (arenad or a feed plugin)")
    ev.add_argument("--feed-option", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument(
        "--simulate", action="store_true", help="a §10.4 simulated stream (the default without FILES)"
    )
    ev.add_argument("--players", type=int, default=50, help="simulate: players P (§10.4)")
    ev.add_argument("--days", type=int, default=90, help="simulate: days of play")
    ev.add_argument(
        "--events", type=int, help="simulate: background kills in all (default: 30 per online player per day)"
    )
    ev.add_argument("--seed", type=int, default=1, help="simulation seed; also seeds the AUC/ECE orientation")
    ev.add_argument(
        "--scenarios",
        default="all",
        help="simulate: all (those that fit), none, or a comma list of " + ", ".join(SCENARIOS),
    )
    ev.add_argument(
        "--matches", type=float, default=0.0, metavar="MINUTES",
        help="simulate: a match-placement event after every MINUTES of play (0: none)",
    )  # fmt: skip
    ev.add_argument("--block", type=int, default=500, help="events per block")
    ev.add_argument("--test-every", type=int, default=5, help="every k-th block is held out")
    ev.add_argument("--out", type=Path, help="write report.json, report.md and PNG plots into this directory")
    ev.add_argument("--no-plots", action="store_true", help="with --out: no PNG plots")
    ev.add_argument(
        "--returning", action="store_true",
        help="run §10.6 instead: a 1000-rated player back after --absence-days beats a 2000-rated one",
    )  # fmt: skip
    ev.add_argument("--kills", type=int, default=50, help="returning: consecutive kills")
    ev.add_argument(
        "--absence-days", type=float, default=61.0,
        help="days away of the returning player (§10.6) and of the simulated absence (> T_return = 60)",
    )  # fmt: skip
    ev.add_argument(
        "--fixed-opponent",
        action="store_true",
        help="returning: hold the opponent's rating (the paper's Elo setup)",
    )
    ev.add_argument("files", type=Path, nargs="*", help="event files (default: a simulated stream)")

    sub.add_parser("plugins", help="list rating models and feed plugins (built-in and entry points)")
    sub.add_parser("version", help="print the version")
    return ap


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
        if args.command in ("season", "exclude", "recompute", "admin"):
            return run_admin(args)
        if args.command == "generate":
            return _generate(args)
        if args.command == "plugins":
            return _plugins()
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "check-config":
            load_settings(args.file)
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
        feeds, _errors = discover_feeds()
        feed = feeds.get(args.format)
        if feed is None:
            print(
                f"arenad replay: unknown format {args.format!r} (known: {', '.join(sorted(feeds))})",
                file=sys.stderr,
            )
            return 2
        engine, summary = replay_log_files(args.files, settings.adr, feed, _feed_options(args.feed_option))
    tmp = args.out.with_name(args.out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        write_state(engine, out)
    tmp.replace(args.out)
    print(json.dumps(summary.as_dict()))
    return 0


def _replay_scope(args: argparse.Namespace, settings: Settings) -> tuple[Any, Any]:
    """Replay through every configured scope; the ladder of ``--scope``."""
    scopes = ScopeSet(settings.adr, settings.scopes.config())
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
        feeds, _errors = discover_feeds()
        feed = feeds.get(args.format)
        if feed is None:
            raise ConfigError([ConfigProblem("--format", args.format, "unknown feed")], "command line")
        events = _log_events(args.files, feed.parser(_feed_options(args.feed_option)))
    summary = replay_scoped(events, scopes)
    try:
        key = scopes.resolve(args.scope)
    except KeyError as e:
        raise InputError(f"--scope {args.scope}: {e.args[0]}") from None
    return scopes.engines[key], summary


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
    if args.returning:
        if args.files or args.simulate:
            print("arenad evaluate: --returning takes no FILES and no --simulate", file=sys.stderr)
            return 2
        return _evaluate_returning(args, factories)
    if args.files and args.simulate:
        print("arenad evaluate: give FILES or --simulate, not both", file=sys.stderr)
        return 2
    truth = None
    notes: list[str] = []
    if args.files:
        events: list[StreamEvent] = list(_file_events(args))
        source = [str(f) for f in args.files]
        late = sum(_time_of(b) < _time_of(a) for a, b in itertools.pairwise(events))
        if late:
            # Models with a clock (ADR) refuse events far older than the newest one, models without
            # one take them as they come: time order is the one order every model reads the same way.
            events.sort(key=_time_of)
            notes.append(f"{late} events came earlier than the one before them; all were put in time order")
    else:
        try:
            plan = _scenario_plan(args.scenarios, args.absence_days)
            pop = Population(players=args.players, days=args.days, seed=args.seed, events=args.events)
            simulated = simulate_stream(pop, plan)
            events = list(simulated.events)
            if args.matches > 0:
                events = list(placements_from_kills(simulated.events, 60.0 * args.matches))
        except ValueError as e:
            print(f"arenad evaluate: {e}", file=sys.stderr)
            return 2
        truth = simulated.truth
        size = f"{args.events} background kills" if args.events is not None else "30 kills per player-day"
        scenarios = ", ".join(s for s in plan.scenarios if s not in truth.skipped) or "none"
        source = [f"simulated (§10.4): {args.players} players, {args.days} days, {size}, seed {args.seed}, "
                  f"scenarios: {scenarios}"]  # fmt: skip
        for name, why in truth.skipped.items():
            notes.append(f"scenario {name} skipped: {why}")
    rules = TierRules.from_params(ADRParams())
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
    feeds, _errors = discover_feeds()
    feed = feeds.get(args.format)
    if feed is None:
        raise ConfigError(
            [ConfigProblem("--format", args.format, f"unknown (known: {', '.join(sorted(feeds))})")]
        )
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
    "adr-printed": "ADR with the literal §4.2 victim update (loser_rule = printed), for comparison.",
    "adr-unanchored": "ADR without the scale anchor (anchor = false), for comparison.",
}


def _first_doc_line(name: str, factory: object) -> str:
    if name in _MODEL_NOTES:
        return _MODEL_NOTES[name]
    doc = (getattr(factory, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else name


def _plugins() -> int:
    feeds, errors = discover_feeds()
    models, model_errors = discover_models()
    print(json.dumps({
        "models": {name: _first_doc_line(name, factory) for name, factory in models.items()},
        "feeds": {name: plugin.description for name, plugin in sorted(feeds.items())},
        "errors": errors + model_errors,
    }, indent=2))  # fmt: skip
    return 1 if errors else 0


def _run(args: argparse.Namespace) -> int:
    from arenad.daemon.logs import configure_logging  # noqa: PLC0415 - daemon-only imports
    from arenad.daemon.service import run_daemon  # noqa: PLC0415

    settings = apply_run_flags(load_settings(args.config), args)
    configure_logging(settings.log.format, settings.log.level)
    reload = (lambda: apply_run_flags(load_settings(args.config), args)) if args.config is not None else None
    return run_daemon(settings, reload)


#: `arenad run` flag -> (settings section, key) it overrides.
_RUN_FLAGS = (
    ("state_dir", "daemon", "state_dir"),
    ("udp", "udp", "listen"),
    ("mqtt", "mqtt", "url"),
    ("query", "query", "listen"),
    ("query_unix", "query", "unix"),
    ("metrics", "metrics", "listen"),
    ("source_udp", "source_udp", "listen"),
    ("log_format", "log", "format"),
    ("log_level", "log", "level"),
)


def apply_run_flags(settings: Settings, args: argparse.Namespace) -> Settings:
    """Command-line overrides of the usual keys, validated like the file."""
    s = settings
    for flag, name, key in _RUN_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            s = replace(s, **{name: replace(getattr(s, name), **{key: value})})
    problems: list[ConfigProblem] = []
    tails = list(s.tail)
    for text in getattr(args, "tail", []):
        fmt, sep, path = text.partition(":")
        if not sep or not fmt or not path:
            problems.append(
                ConfigProblem("--tail", text, "must be FORMAT:PATH, e.g. openarena:/path/games.log")
            )
        else:
            tails.append(TailSpec(fmt, path))
    s = replace(s, tail=tuple(tails))
    for section in (s.daemon, s.udp, s.mqtt, s.query, s.metrics, s.log, s.source_udp):
        problems.extend(section.problems())
    if problems:
        raise ConfigError(problems, "command line")
    return s


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
