"""§6.4 promotion/demotion rules measured against issue 14's tier goals (docs/adr.md).

    .venv/bin/python -m bench.tier_rules                            # the engine's rule (the default)
    .venv/bin/python -m bench.tier_rules --pull 0 --seeds 1-16      # ... at tier_pull = 0 (the paper's)
    .venv/bin/python -m bench.tier_rules --rule points --h 250      # the paper's rule, re-implemented
    .venv/bin/python -m bench.tier_rules --rule widths --h 6        # accumulator in tier widths
    .venv/bin/python -m bench.tier_rules --rule points --h 0 --seeds 1-8

Each run is ``arenad evaluate --simulate --players 200 --events 60000 --seed S --models adr``
(§10.4 with every scenario), with the rule asked for:

* ``engine``: the engine's own §6.4 (C kernel and all) at ``h_req = --h`` and ``tier_pull =
  --pull`` (default: the defaults, 250 and 0.75); the two keys go to ``evaluate`` in a
  ``--config`` file. docs/adr.md "Tiers that lean toward their targets".
* ``points``: the paper's §6.4 on the engine's Python path, ``Engine._tiers_after_event``
  replaced: the accumulator adds the rating points past the tier's boundary and the player moves
  at ``--h`` points (``h_req``); ``--h 250`` reproduces ``--rule engine --pull 0``.
* ``widths``: the same accumulator in units of the current tier's width (an end tier takes its
  neighbour's), the player moving at ``--h`` widths: a narrow middle tier fills as fast as a wide
  end one.

Tiers feed nothing back into the ratings, so the ratings, log loss and every other measure are
those of the default; only ``tier_changes_per_1k`` and ``tier_share_error`` move. Prints one line
per seed and the mean; about 3 s per seed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
from collections.abc import Callable
from typing import Any

import arenad.core.engine as engine_module
from arenad.cli import main as arenad_main
from arenad.core.engine import Engine

#: The engine's §6.1 placement and §6.4 rule, kept before main() replaces it.
_ENGINES_RULE = Engine._tiers_after_event


def _width(bounds: list[float], k: int) -> float:
    """Rating width of tier k (1 = top); the two end tiers, unbounded, take their neighbour's."""
    k = min(max(k, 2), len(bounds) - 2)
    return bounds[k - 1] - bounds[k]


def make_rule(rule: str, h_req: float) -> Callable[[Engine, int, float, float], None]:
    """``Engine._tiers_after_event`` with the §6.4 accumulator of ``rule`` moving at ``h_req``."""

    def after_event(self: Any, i: int, r: float, sigma: float) -> None:
        k = self._tier[i]
        if k == 0:  # §6.1 placement: the engine's own
            _ENGINES_RULE(self, i, r, sigma)
            return
        bounds = self._bounds
        upper, lower = bounds[k - 1], bounds[k]
        unit = 1.0 if rule == "points" else _width(bounds, k)
        h = self._h[i]
        if r >= upper:
            h = max(h, 0.0) + (r - upper) / unit
            if h >= h_req:
                self._move_tier(i, k, k - 1)
            else:
                self._h[i] = h
        elif r < lower:
            h = max(-h, 0.0) + (lower - r) / unit
            if h >= h_req:
                self._move_tier(i, k, k + 1)
            else:
                self._h[i] = -h
        else:
            self._h[i] = 0.0

    return after_event


def measure(seed: int, config: str | None = None) -> tuple[float, float]:
    """(tier changes per 1,000 player-events, tier-share error) of ``adr`` on §10.4: the
    defaults, or the [adr] keys of the TOML file ``config``."""
    out = io.StringIO()
    argv = ["evaluate", "--simulate", "--players", "200", "--events", "60000", "--seed", str(seed)]
    argv += ["--models", "adr"]
    if config is not None:
        argv += ["--config", config]
    with contextlib.redirect_stdout(out):
        code = arenad_main(argv)
    if code != 0:
        raise SystemExit(f"arenad evaluate exited {code}")
    header, row = _scenario_table(out.getvalue())
    return float(row[header.index("tier_changes_per_1k")]), float(row[header.index("tier_share_error")])


def _scenario_table(text: str) -> tuple[list[str], list[str]]:
    lines = text.splitlines()
    for j, line in enumerate(lines):
        cells = line.split()
        if "tier_share_error" in cells:
            return cells, lines[j + 1].split()
    raise SystemExit("no scenario table in arenad evaluate's output")


def _seeds(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-", 1)
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rule", choices=("engine", "points", "widths"), default="engine")
    ap.add_argument("--h", type=float, default=250.0, help="the accumulator's threshold (points or widths)")
    ap.add_argument("--pull", type=float, default=0.75, help="engine: [adr] tier_pull (default 0.75)")
    ap.add_argument("--seeds", default="1-3", help="e.g. 1-8 or 1,3 (default 1-3)")
    args = ap.parse_args()
    config = None
    if args.rule == "engine":
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(f"[adr]\nh_req = {args.h!r}\ntier_pull = {args.pull!r}\n")
        config = f.name
    else:
        # The C kernel decides the engine's rule inline; the Python path calls the rule for
        # every event outside the tier.
        engine_module._Kernel = None  # type: ignore[attr-defined,assignment]
        Engine._tiers_after_event = make_rule(args.rule, args.h)  # type: ignore[method-assign,assignment]
    changes, shares = [], []
    try:
        for seed in _seeds(args.seeds):
            c, s = measure(seed, config)
            changes.append(c)
            shares.append(s)
            print(f"seed {seed}: tier changes {c:.2f} per 1k, share error {s:.4f}", flush=True)
    finally:
        if config is not None:
            os.unlink(config)
    over = sum(s > 0.015 for s in shares)
    label = f"{args.rule} {args.h:g}" + (f" pull {args.pull:g}" if args.rule == "engine" else "")
    print(
        f"{label}: changes {min(changes):.1f}-{max(changes):.1f} per 1k, share error mean "
        f"{statistics.fmean(shares):.4f}, max {max(shares):.4f}, over 0.015 on {over} of {len(shares)} seeds"
    )


if __name__ == "__main__":
    main()
