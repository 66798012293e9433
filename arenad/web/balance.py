"""Team balance: split 2–64 players into 2 or more teams of near-equal predicted strength.

Pure: ratings in, a split out. A team's strength is the mean rating of its players (so teams one
player apart compare fairly, as minqlx's balance plugin compares them); a split's *spread* is the
strongest team's mean minus the weakest's, and the best split is the one with the smallest
spread, teams' sizes differing by at most one. Its predicted win probability is the engine's
§3.1 prediction for the gap between the strongest and the weakest team (``Engine.predict_gap``),
passed in as a function so this module needs no engine.

Two methods, chosen by the number of distinct balanced splits (``split_count``):

* **exhaustive** while there are at most ``EXHAUSTIVE_LIMIT_TWO`` (two teams) or
  ``EXHAUSTIVE_LIMIT`` splits: every split is tried, interchangeable teams (equal sizes) counted
  once. That covers 2 teams up to 16 players (6,435 splits, scored at once with numpy in
  ~1.4 ms) and 3 or 4 teams up to 9 (a recursion at ~2.2–3.3 µs a split, within ~5 ms);
  docs/web.md "Team balance" has the measurements.
* **heuristic** above: greedy (players strongest first, each to the weakest team that still has
  room), then local search (swap two players of different teams, or move one from a larger team
  to a smaller, whichever lowers the spread most, until no move does). The search only accepts
  improvements, so it is never worse than the greedy start.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MIN_PLAYERS = 2
MAX_PLAYERS = 64
MIN_TEAMS = 2
#: Largest number of distinct splits tried one by one: ~2.2 µs a split measured, so ~4.5 ms.
EXHAUSTIVE_LIMIT = 2_000
#: The same for two teams, scored with numpy at ~0.2 µs a split: 16 players (6,435) in ~1.4 ms;
#: 18 players (24,310) took 5.5-7.9 ms.
EXHAUSTIVE_LIMIT_TWO = 6_435
#: Local-search rounds at most (each applies the best improving move): bounds a request's cost.
MAX_ROUNDS = 256
_EPS = 1e-12


@dataclass(frozen=True, slots=True)
class Split:
    """Teams as indices into the ratings given (each team in index order; teams strongest
    first), their mean ratings, the spread and the method that found it."""

    teams: tuple[tuple[int, ...], ...]
    means: tuple[float, ...]
    spread: float
    method: str


def team_sizes(n: int, k: int) -> list[int]:
    """Sizes of ``k`` teams for ``n`` players, differing by at most one, larger first."""
    q, r = divmod(n, k)
    return [q + 1] * r + [q] * (k - r)


def split_count(n: int, k: int) -> int:
    """Distinct balanced splits of ``n`` players into ``k`` unlabelled teams."""
    sizes = team_sizes(n, k)
    count = math.factorial(n)
    for s in sizes:
        count //= math.factorial(s)
    for s in set(sizes):  # teams of equal size are interchangeable
        count //= math.factorial(sizes.count(s))
    return count


def spread_of(ratings: Sequence[float], teams: Sequence[Sequence[int]]) -> float:
    means = [sum(ratings[i] for i in t) / len(t) for t in teams]
    return max(means) - min(means)


def balance(ratings: Sequence[float], k: int, exhaustive_limit: int | None = None) -> Split:
    """The best split of ``ratings`` into ``k`` teams that this module can find in bounded time.

    Raises ``ValueError`` naming the argument when there are fewer than 2 or more than 64
    players, fewer than 2 teams, or more teams than players.
    """
    n = len(ratings)
    if not MIN_PLAYERS <= n <= MAX_PLAYERS:
        raise ValueError(f"players: need {MIN_PLAYERS} to {MAX_PLAYERS}, got {n}")
    if not MIN_TEAMS <= k <= n:
        raise ValueError(f"teams: need 2 to the number of players ({n}), got {k}")
    if not all(math.isfinite(r) for r in ratings):
        raise ValueError("ratings: every rating must be finite")
    if exhaustive_limit is None:
        exhaustive_limit = EXHAUSTIVE_LIMIT_TWO if k == 2 else EXHAUSTIVE_LIMIT
    if split_count(n, k) <= exhaustive_limit:
        return _finish(ratings, exhaustive(ratings, k), "exhaustive")
    return _finish(ratings, improve(ratings, greedy(ratings, k)), "heuristic")


def exhaustive(ratings: Sequence[float], k: int) -> list[list[int]]:
    """The split with the smallest spread, by trying every distinct one (first found on ties)."""
    if k == 2:
        return _exhaustive_two(ratings)
    return _exhaustive_general(ratings, k)


def _exhaustive_general(ratings: Sequence[float], k: int) -> list[list[int]]:
    """``exhaustive`` by recursion: each player into each team with room in turn."""
    n = len(ratings)
    caps = team_sizes(n, k)
    teams: list[list[int]] = [[] for _ in range(k)]
    sums = [0.0] * k
    best: list[list[int]] = []
    best_spread = math.inf

    def place(p: int) -> None:
        nonlocal best, best_spread
        if p == n:
            means = [s / c for s, c in zip(sums, caps, strict=True)]
            spread = max(means) - min(means)
            if spread < best_spread - _EPS:
                best_spread = spread
                best = [list(t) for t in teams]
            return
        r = ratings[p]
        opened = set()  # an empty team of a size already tried empty is the same split
        for t in range(k):
            if len(teams[t]) == caps[t]:
                continue
            if not teams[t]:
                if caps[t] in opened:
                    continue
                opened.add(caps[t])
            teams[t].append(p)
            sums[t] += r
            place(p + 1)
            sums[t] -= r
            teams[t].pop()

    place(0)
    return best


def _exhaustive_two(ratings: Sequence[float]) -> list[list[int]]:
    """``exhaustive`` for two teams, every split scored at once with numpy (about 0.15 µs a
    split against 2.2 for the general recursion). With equal sizes the first player is fixed in
    the first team, so each split is counted once."""
    n = len(ratings)
    big, small = team_sizes(n, 2)
    r = np.asarray(ratings, dtype=np.float64)
    fixed = big == small
    rest = range(1, n) if fixed else range(n)
    m = big - fixed  # players to choose besides the fixed one
    if m == 0:  # two players: one split
        combos = np.zeros((1, 0), dtype=np.intp)
    else:
        flat = itertools.chain.from_iterable(itertools.combinations(rest, m))
        combos = np.fromiter(flat, dtype=np.intp).reshape(-1, m)
    sums = r[combos].sum(axis=1) + (r[0] if fixed else 0.0)
    spread = np.abs(sums / big - (float(r.sum()) - sums) / small)
    best = combos[int(np.argmin(spread))].tolist()
    first = [0, *best] if fixed else best
    chosen = set(first)
    return [sorted(first), [i for i in range(n) if i not in chosen]]


def greedy(ratings: Sequence[float], k: int) -> list[list[int]]:
    """Strongest first, each player to the team with the lowest rating sum that still has room."""
    caps = team_sizes(len(ratings), k)
    teams: list[list[int]] = [[] for _ in range(k)]
    sums = [0.0] * k
    for i in sorted(range(len(ratings)), key=lambda j: (-ratings[j], j)):
        t = min((u for u in range(k) if len(teams[u]) < caps[u]), key=lambda u: (sums[u], u))
        teams[t].append(i)
        sums[t] += ratings[i]
    return teams


def improve(ratings: Sequence[float], teams: list[list[int]]) -> list[list[int]]:
    """Local search from ``teams``: apply the move that lowers the spread most, until none does.

    Moves: swap two players of different teams, or move a player from a team one larger to a
    smaller one (sizes then still differ by at most one). Only strict improvements are taken.
    Every swap between two teams is scored at once with numpy (the plain loop took ~18 ms for
    64 players in 8 teams; this takes about a tenth).
    """
    teams = [list(t) for t in teams]
    k = len(teams)
    r = np.asarray(ratings, dtype=np.float64)
    sums = [float(r[t].sum()) for t in teams]
    for _ in range(MAX_ROUNDS):
        sizes = [len(t) for t in teams]
        means = [s / c for s, c in zip(sums, sizes, strict=True)]
        best = max(means) - min(means)
        move: tuple[int, int, int, int] | None = None  # (team a, index in a, team b, index in b | -1)
        for a in range(k):
            ra = r[teams[a]]
            for b in range(a + 1, k):
                others = [means[t] for t in range(k) if t not in (a, b)]
                lo = min(others, default=math.inf)
                hi = max(others, default=-math.inf)
                d = r[teams[b]][None, :] - ra[:, None]  # gain of team a when i (row) and j swap
                ma = (sums[a] + d) / sizes[a]
                mb = (sums[b] - d) / sizes[b]
                spread = np.maximum(np.maximum(ma, mb), hi) - np.minimum(np.minimum(ma, mb), lo)
                flat = int(np.argmin(spread))
                xs, ys = divmod(flat, spread.shape[1])
                if spread[xs, ys] < best - _EPS:
                    best, move = float(spread[xs, ys]), (a, xs, b, ys)
                for src, dst in ((a, b), (b, a)):
                    if sizes[src] != sizes[dst] + 1:
                        continue
                    rs = r[teams[src]]
                    ms = (sums[src] - rs) / (sizes[src] - 1)
                    md = (sums[dst] + rs) / (sizes[dst] + 1)
                    spread1 = np.maximum(np.maximum(ms, md), hi) - np.minimum(np.minimum(ms, md), lo)
                    x1 = int(np.argmin(spread1))
                    if spread1[x1] < best - _EPS:
                        best, move = float(spread1[x1]), (src, x1, dst, -1)
        if move is None:
            break
        a, x, b, y = move
        i = teams[a][x]
        if y < 0:
            teams[a].pop(x)
            teams[b].append(i)
            sums[a] -= ratings[i]
            sums[b] += ratings[i]
        else:
            j = teams[b][y]
            teams[a][x], teams[b][y] = j, i
            sums[a] += ratings[j] - ratings[i]
            sums[b] += ratings[i] - ratings[j]
    return teams


def _finish(ratings: Sequence[float], teams: list[list[int]], method: str) -> Split:
    means = [sum(ratings[i] for i in t) / len(t) for t in teams]
    order = sorted(range(len(teams)), key=lambda t: (-means[t], min(teams[t])))
    return Split(
        teams=tuple(tuple(sorted(teams[t])) for t in order),
        means=tuple(means[t] for t in order),
        spread=max(means) - min(means),
        method=method,
    )


def win_probability(split: Split, predict_gap: Callable[[float], float]) -> float:
    """P that the strongest team beats the weakest: the §3.1 prediction for their mean gap."""
    return predict_gap(split.means[0] - split.means[-1])
