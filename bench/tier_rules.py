"""§6.4 promotion/demotion rules measured against issue 14's tier goals (docs/adr.md).

    .venv/bin/python -m bench.tier_rules --rule points --h 250      # the paper's rule (the default)
    .venv/bin/python -m bench.tier_rules --rule widths --h 6        # accumulator in tier widths
    .venv/bin/python -m bench.tier_rules --rule points --h 0 --seeds 1-8

Each run is ``arenad evaluate --simulate --players 200 --events 60000 --seed S --models adr``
(§10.4 with every scenario) on the Python path of the engine (the C kernel's inline §6.4 is the
paper's rule only), with ``Engine._tiers_after_event`` replaced by the rule asked for:

* ``points``: the paper's §6.4: the accumulator adds the rating points past the tier's boundary and
  the player moves at ``--h`` points (``h_req``); ``--h 250`` reproduces the default's figures.
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
import statistics
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


def measure(seed: int) -> tuple[float, float]:
    """(tier changes per 1,000 player-events, tier-share error) of default ``adr`` on §10.4."""
    out = io.StringIO()
    argv = ["evaluate", "--simulate", "--players", "200", "--events", "60000", "--seed", str(seed)]
    argv += ["--models", "adr"]
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
    ap.add_argument("--rule", choices=("points", "widths"), default="points")
    ap.add_argument("--h", type=float, default=250.0, help="the accumulator's threshold (points or widths)")
    ap.add_argument("--seeds", default="1-3", help="e.g. 1-8 or 1,3 (default 1-3)")
    args = ap.parse_args()
    # The C kernel decides the paper's rule inline; the Python path calls the rule for every
    # event outside the tier.
    engine_module._Kernel = None  # type: ignore[attr-defined,assignment]
    Engine._tiers_after_event = make_rule(args.rule, args.h)  # type: ignore[method-assign,assignment]
    changes, shares = [], []
    for seed in _seeds(args.seeds):
        c, s = measure(seed)
        changes.append(c)
        shares.append(s)
        print(f"seed {seed}: tier changes {c:.2f} per 1k, share error {s:.4f}", flush=True)
    over = sum(s > 0.015 for s in shares)
    print(
        f"{args.rule} {args.h:g}: changes {min(changes):.1f}-{max(changes):.1f} per 1k, share error mean "
        f"{statistics.fmean(shares):.4f}, max {max(shares):.4f}, over 0.015 on {over} of {len(shares)} seeds"
    )


if __name__ == "__main__":
    main()
