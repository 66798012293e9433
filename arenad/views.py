"""What a reader sees of a ladder: the rows and bodies both read protocols answer.

The NDJSON query op (``arenad.daemon.query``) and the HTTP API (``arenad.web.api``) show the same
player, the same leaderboard row and the same tier table; they are built here once, from an
``Engine`` and its ids, so the two can never disagree on what a field means (STYLE.md §13).
Pure like the core: no I/O, no clock; plain dicts of JSON values out (non-finite floats are left
for the encoder, which writes them as null).

``TokenBucket`` (the per-connection and per-client rate limit of both servers) lives here too,
as the one pure piece of request admission they share.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from arenad.core.engine import DISPLAY_K, Engine
from arenad.core.params import TIER_NAMES
from arenad.scopes import ScopeSet

#: Players a filtered walk down the ladder steps over at most before it answers with what it
#: found (each skipped entry costs about a microsecond): a request's cost stays bounded.
MAX_SKIP = 200_000


def display_rating(eng: Engine, i: int, k: float) -> float:
    """The display rating: the engine's own (mu - 3 sigma, its step per event bounded when
    ``[adr] display_cap``), or mu - k sigma when ``[query] display_k`` asks for another k."""
    return eng.display(i) if k == DISPLAY_K else eng.mu(i) - k * eng.sigma(i)


def player_body(eng: Engine, i: int, k: float, scope: str) -> dict[str, Any]:
    """Everything the query op ``get`` answers about player ``i``."""
    v = eng.view(i)
    p = eng.params
    tier = v.tier
    return {
        "scope": scope,
        "player": v.player,
        "mu": v.mu,
        "sigma": v.sigma,
        "display": display_rating(eng, i, k),
        "tier": tier,
        "placed": tier is not None,
        # Provisional = not placed yet (§6.1): n_min events (this season's, in a season scope
        # after a reset) and sigma <= sigma_place.
        "provisional": tier is None,
        "placement": {
            "events": eng.placement_events(i),
            "events_needed": p.n_min,
            "sigma": v.sigma,
            "sigma_needed": p.sigma_place,
        },
        "rank": v.rank,
        "percentile": eng.percentile(i),
        "events": v.n,
        "streak": v.streak,
        "trend": v.trend,
        "last_seen": v.last_t,
        "active": v.active,
        "players": len(eng),
    }


def ladder_rows(
    eng: Engine,
    ids: Iterable[int] | npt.NDArray[np.int64],
    k: float,
    above: Sequence[float] = (),
    names: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """One leaderboard row per id, in the order given; ``above``: the sorted ``-mu`` of players
    left out of the ranks shown (the web's hidden players), each one rated above a row moving
    it up a place; ``names``: the rows' names where the caller holds them already (equal to
    ``eng.names[i]``: a batch's own strings, which are in cache and private to a forked reader,
    where reading ``eng.names`` would incref, and so copy, a page shared with the daemon)."""
    if not isinstance(ids, np.ndarray):
        ids = list(ids)
    # The columns in one gather each (Engine.row_columns) rather than a PlayerView per row.
    mus, sigmas, displays, tiers, actives, ranks = eng.row_columns(ids)
    if above:
        # The same rule as arenad.web.reader.Public.rank (bisect_left is searchsorted's "left"),
        # from the columns already read, in one call rather than a bisect per row.
        lifted = np.searchsorted(np.asarray(above, dtype=np.float64), np.negative(mus), side="left")
        ranks = np.subtract(ranks, lifted).tolist()
    if k != DISPLAY_K:
        displays = [mu - k * sigma for mu, sigma in zip(mus, sigmas, strict=True)]
    if names is None:
        every = eng.names
        names = [every[i] for i in ids]
    return [
        {
            # Competition rank, as in "get": equal ratings share the better rank.
            "rank": rank_i,
            "player": name,
            "mu": mu,
            "sigma": sigma,
            "display": display,
            "tier": TIER_NAMES[tier - 1] if tier else None,
            "provisional": not tier,
            "active": bool(active),
        }
        for name, mu, sigma, display, tier, active, rank_i in zip(
            names, mus, sigmas, displays, tiers, actives, ranks, strict=True
        )
    ]


def walk_ladder(eng: Engine, keep: Callable[[int], bool], offset: int, n: int) -> tuple[list[int], bool]:
    """Ids of the ``n`` players after the first ``offset`` that ``keep`` accepts, best first, and
    whether the walk stopped early after stepping over ``MAX_SKIP`` refused players."""
    ids: list[int] = []
    skipped = 0
    seen = 0
    for i in eng.ladder_ids():
        if not keep(i):
            skipped += 1
            if skipped > MAX_SKIP:
                return ids, True
            continue
        seen += 1
        if seen > offset:
            ids.append(i)
            if len(ids) >= n:
                break
    return ids, False


def tiers_body(eng: Engine) -> dict[str, Any]:
    """The tier table: each tier's lower boundary (visible scale) and placed players."""
    info = eng.tier_info()
    # Tier k spans [B_k, B_{k-1}); the lowest tier has no lower boundary (B_15 = -inf).
    mins: list[float | None] = [*info.boundaries, None]
    placed = sum(info.counts)
    return {
        "tiers": [
            {"tier": name, "min_mu": low, "players": count}
            for name, low, count in zip(TIER_NAMES, mins, info.counts, strict=True)
        ],
        "placed": placed,
        "unplaced": len(eng) - placed,
        "calibrations": info.calibrations,
        "active": info.active,
        "players": len(eng),
    }


def engine_stats(eng: Engine) -> dict[str, Any]:
    """The engine's own figures of the query op ``stats``."""
    return {
        "players": len(eng),
        "active": eng.active_count,
        "active_mean": eng.active_mean(),
        "mean_sigma": eng.mean_sigma,
        "applied": eng.applied,
        "filtered": eng.filtered,
        "rejected": dict(eng.rejected),
        "clock": eng.clock,  # -inf before the first event: encoded as null
        "calibrations": eng.calibrations,
        "tier_changes": eng.tier_changes,
    }


def scopes_body(live: Engine | ScopeSet) -> dict[str, Any]:
    """Every scope with its players and whether it is closed, and the current season."""
    if isinstance(live, Engine):
        return {"scopes": [{"scope": "global", "players": len(live), "closed": False}], "season": None}
    return {
        "scopes": [
            {"scope": key, "players": len(e), "active": e.active_count, "closed": key in live.closed}
            for key, e in live.engines.items()
        ],
        "season": live.season,
    }


class TokenBucket:
    """Allows at most ``burst + rate * elapsed`` requests in any span of ``elapsed`` seconds.

    Pure: the caller passes the time (a monotonic clock). Starts full, so a new connection may
    send ``burst`` requests at once. ``rate`` 0 means no refill at all: only ``burst`` requests
    ever (the server does not make a bucket when ``rate_limit`` is 0, i.e. unlimited).
    """

    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"rate must be finite and >= 0, got {rate!r}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = now

    def take(self, now: float) -> float:
        """Spend one token: 0.0 if the request may go, else the seconds until a token is due."""
        self.tokens, self.last, wait = take_token(self.tokens, self.last, now, self.rate, self.burst)
        return wait


def take_token(
    tokens: float, last: float, now: float, rate: float, burst: float
) -> tuple[float, float, float]:
    """The token bucket's one rule: refill since ``last`` (a clock that steps back refills
    nothing), then spend a token. Returns the new tokens and last, and 0.0 if the request may
    go, else the seconds until a token is due (``TokenBucket``; the web readers' shared table)."""
    if now > last:
        tokens = min(burst, tokens + (now - last) * rate)
        last = now
    if tokens >= 1.0:
        return tokens - 1.0, last, 0.0
    return tokens, last, math.inf if rate <= 0 else (1.0 - tokens) / rate


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (JSON has no NaN or infinity): the
    fallback encoding of both read protocols (the query op and the web API)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj
