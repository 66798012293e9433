"""Command line: ``arenad replay | simulate | check-config | version``."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from arenad import __version__
from arenad.core.events import KillEvent
from arenad.daemon.emit import emit_mqtt, emit_udp, simulated_kills
from arenad.daemon.query_client import add_query_parser, run_query
from arenad.daemon.sources.tail import TailSpec
from arenad.decode import iter_file
from arenad.errors import ArenadError, ConfigError, ConfigProblem
from arenad.evaluation import evaluate_stream
from arenad.feeds import discover_feeds
from arenad.models import discover_models
from arenad.replay import replay_files, replay_log_files, write_state
from arenad.settings import Settings, load_settings
from arenad.simulate import Population, event_stream, format_table, simulate_returning, simulate_tiers

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
    rp.add_argument("--config", type=Path, help="TOML settings file ([adr] parameters)")
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

    add_query_parser(sub)

    cp = sub.add_parser("check-config", help="validate a settings file; list every problem")
    cp.add_argument("file", type=Path)

    ev = sub.add_parser("evaluate", help="compare rating models' prediction quality, walking forward (§10.5)")
    ev.add_argument(
        "--models", default="adr,elo,elo-dynamic,glicko2,trueskill", help="comma-separated model names"
    )
    ev.add_argument("--format", default="arenad", help="input format of FILES (arenad or a feed plugin)")
    ev.add_argument("--feed-option", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--players", type=int, default=50, help="without FILES: simulated players (§10.4)")
    ev.add_argument("--days", type=int, default=7, help="without FILES: simulated days")
    ev.add_argument("--seed", type=int, default=1)
    ev.add_argument("--block", type=int, default=1000, help="events per block")
    ev.add_argument("--test-every", type=int, default=10, help="every k-th block is held out")
    ev.add_argument("--out", type=Path, help="write report.json into this directory")
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
    if args.format == "arenad" and not args.feed_option:
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
    if args.files:
        events = list(_file_events(args))
        source = [str(f) for f in args.files]
    else:
        pop = Population(players=args.players, days=args.days, seed=args.seed)
        events = event_stream(pop)
        source = [f"simulated: {args.players} players, {args.days} days, seed {args.seed}"]
    models = {name: known[name]() for name in names}
    report = evaluate_stream(models, events, test_every=args.test_every, seed=args.seed, block=args.block)
    rows = [
        {"model": name, **{k: round(v, 4) if math.isfinite(v) else None for k, v in metrics.items()}}
        for name, metrics in report.items()
    ]
    columns = ["model", "online_log_loss", "online_brier", "online_auc", "online_ece", "online_accuracy"]
    columns += ["heldout_log_loss", "heldout_auc", "heldout_n"]
    print(f"{len(events)} events from {', '.join(source)}")
    print(format_table(rows, columns))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        doc = {"events": len(events), "source": source, "block": args.block, "test_every": args.test_every}
        doc["models"] = {row["model"]: {k: v for k, v in row.items() if k != "model"} for row in rows}
        (args.out / "report.json").write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def _file_events(args: argparse.Namespace) -> Iterator[tuple[str, str, float]]:
    """(attacker, victim, t) of every valid kill in the files, in order (rejects are skipped)."""
    if args.format == "arenad" and not args.feed_option:
        for path in args.files:
            for decoded in iter_file(path):
                if isinstance(decoded, KillEvent):
                    yield decoded.attacker, decoded.victim, decoded.t
        return
    feeds, _errors = discover_feeds()
    feed = feeds.get(args.format)
    if feed is None:
        raise ConfigError(
            [ConfigProblem("--format", args.format, f"unknown (known: {', '.join(sorted(feeds))})")]
        )
    parser = feed.parser(_feed_options(args.feed_option))
    for path in args.files:
        for line in path.read_bytes().splitlines():
            for item in parser.feed(line, 0.0):
                if isinstance(item, KillEvent):
                    yield item.attacker, item.victim, item.t


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
    return run_daemon(settings)


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
        sent = emit_udp(args.udp, events, batch=args.batch, rate=args.rate)
        where = f"udp {args.udp}"
    print(json.dumps({"sent": sent, "to": where}))
    return 0


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
