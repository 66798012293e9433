"""Issue 17: the anti-boosting gates measured on the §10.4 farming scenario and on the real logs.

    .venv/bin/python bench/gates.py            # the tables of docs/operations.md "Boosting"

(a) The simulated stream of ``arenad evaluate --simulate`` (500 players, 28 days, the farming
scenario: the player nearest the 75th percentile kills the weakest 40 times, 90 s apart):
the boosting report right after the last farming kill and at the end of every day (false
alarms: pairs reported that the simulation did not inject), for several ``suspect_p``; the
kills ``min_players`` gates. The simulated network is one server (``server`` None).
(b) The real OpenArena logs (tests/data/realdata: bots only, 10 and 8 of them, skills 1-5):
kills gated by ``min_players`` and by ``bots = "excluded"``, and the report's pairs (the bots'
skill gaps are real, so this measures how far skill alone pushes a pair's share).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from arenad.core.events import KillEvent
from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.feeds import feed_plugin
from arenad.gates import GateConfig
from arenad.records import JournalRecord, Record
from arenad.scopes import ScopeConfig, ScopeSet
from arenad.simulate import Population, ScenarioPlan, simulate_stream

ROOT = Path(__file__).resolve().parent.parent
DAY = 86400.0


def scopes(**gates: Any) -> ScopeSet:
    return ScopeSet(ADRParams(), ScopeConfig(gates=GateConfig(**gates)))


def simulated() -> dict[str, Any]:
    sim = simulate_stream(Population(), ScenarioPlan(scenarios=("farming",)))
    farm = sim.truth.farming
    assert farm is not None
    records: list[Record] = [(k + 1, t, a, v, None, None) for k, (a, v, t) in enumerate(sim.events)]
    last_farm = max(farm.farming_events)
    out: dict[str, Any] = {"kills": len(records), "farming_kills": len(farm.farming_events)}
    for p in (1e-3, 1e-6, 1e-9):
        sc = scopes(suspects=True, suspect_p=p)
        applier = Applier(sc)
        applier.apply_all(records[: last_farm + 1])
        assert sc.gates is not None
        at_farm = sc.gates.suspects()
        pairs = [(s.attacker, s.victim) for s in at_farm]
        hit = (farm.attacker, farm.victim) in pairs
        row = next((s for s in at_farm if (s.attacker, s.victim) == (farm.attacker, farm.victim)), None)
        # False alarms: the report at every day's end, pairs other than the farm.
        alarms = 0
        days = 0
        start = records[0][1]
        k = 0
        sc2 = scopes(suspects=True, suspect_p=p)
        a2 = Applier(sc2)
        assert sc2.gates is not None
        while k < len(records):
            end = start + (days + 1) * DAY
            j = k
            while j < len(records) and records[j][1] < end:
                j += 1
            a2.apply_all(records[k:j])
            k = j
            days += 1
            alarms += sum(
                1 for s in sc2.gates.suspects() if (s.attacker, s.victim) != (farm.attacker, farm.victim)
            )
        out[f"p={p:g}"] = {
            "farm_reported": hit,
            "farm": None if row is None else row.as_dict(),
            "other_pairs_at_farm": len(pairs) - int(hit),
            "false_alarms_per_day": round(alarms / days, 3),
        }
    for m in (2, 4, 8):
        sc = scopes(min_players=m)
        applier = Applier(sc)
        applier.apply_all(records)
        out[f"min_players={m}"] = dict(applier.take().gated)
    return out


def real_kills(path: Path) -> list[JournalRecord]:
    parser = feed_plugin("openarena", key="format").parser({"server": path.stem})
    out: list[JournalRecord] = []
    for line in path.read_bytes().splitlines():
        for item in parser.feed(line, 0.0):
            if isinstance(item, KillEvent):
                out.append((len(out) + 1, item.t, item.attacker, item.victim, item.server, None))
    return out


def real() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted((ROOT / "tests" / "data" / "realdata").glob("*.log")):
        records = real_kills(path)
        row: dict[str, Any] = {"kills": len(records)}
        configs: list[tuple[str, dict[str, Any]]] = [
            ("none", {}),
            ("bots=excluded", {"bots": "excluded"}),
            *((f"min_players={m}", {"min_players": m}) for m in (4, 8, 10)),
        ]
        for label, gates in configs:
            sc = scopes(**gates)
            applier = Applier(sc)
            applier.apply_all(records)
            tally = applier.take()
            row[label] = {"applied": tally.applied, "gated": dict(tally.gated)}
        sc = scopes(suspects=True)
        Applier(sc).apply_all(records)
        assert sc.gates is not None
        row["suspects"] = [s.as_dict() for s in sc.gates.suspects()]
        out[path.name] = row
    return out


def main() -> int:
    print(json.dumps({"simulated": simulated(), "real": real()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
