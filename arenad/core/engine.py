"""The ADR engine: every section of the paper as one pure, single-writer state machine.

No I/O, no clock: time comes in with each event. One ``apply`` call is the whole hot path of
arenad, so it is written as one flat function over struct-of-arrays state (``array`` columns,
indexed by a dense player id). That layout keeps a player at a few hundred bytes and lets
recalibration look at every rating at once through numpy without copying.

The order of one update is fixed (issue 2, "the order of one update") so that every
implementation of arenad agrees:

1. new players join with the §2.2 initial state;
2. a player is *returning* when its previous counted event is more than T_return days old;
3. one snapshot of the active mean, then §5 decay of attacker and victim;
4. P_ab (§3.1) from the decayed ratings and D(t) (§3.2) with the decayed sigmas;
5. learning rates (§4.1 with the §8.1 base); the victim's times c_loss;
6. raw changes, §8.2 weight and §8.3 pool for returning players, §8.4 cap, §4.2 clip;
7. §4.3 sigma, §4.4 trend, §4.5 streak/window/count, then §6.1 placement and §6.4 accumulators.

Internally a rating is stored as ``r``; the visible rating is ``mu = r + offset``. The offset is
the scale anchor (docs/adr.md): a uniform shift that keeps the active mean at mu0 in O(1).
"""

from __future__ import annotations

import heapq
import math
import sys
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from itertools import compress
from math import atan, exp, fsum, isfinite, sqrt
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from arenad.core.ladder import Ladder, PyLadder
from arenad.core.params import PLAYER_ID_LIMIT, TIER_COUNT, TIER_NAMES, ADRParams

if TYPE_CHECKING:
    from arenad.core._ladder import Ladder as NativeLadder

try:
    # The update kernel (docs/performance.md): the common case of ``apply`` in C, built with the
    # C ladder; ``_apply_py`` is the reference it is checked against and the fallback.
    from arenad.core._ladder import Kernel as _Kernel
except ImportError:  # pragma: no cover - only where the C extension could not be built
    _Kernel = None  # type: ignore[assignment,misc]

#: Whether the C update kernel was built (Engine(native=None) uses it then).
KERNEL = _Kernel is not None

try:  # the name lookup without writes (Engine.ids_of); the Python comprehension is its reference
    from arenad.core._ladder import ids_of as _c_ids_of
except ImportError:  # pragma: no cover - only where the C extension could not be built
    _c_ids_of = None  # type: ignore[assignment]

# The ladder keys a player by its negated internal rating (exact, ties in first-seen order); the
# §2.1 cooldown keys an ordered pair by attacker_id << 32 | victim_id, so ids stay below 2**32
# (ADRParams.max_players is validated against PLAYER_ID_LIMIT).
_ID_BITS = PLAYER_ID_LIMIT.bit_length() - 1

_INF = math.inf
_INV_PI = 1.0 / math.pi
#: The logistic link's slope factor: 1/(1 + e^(-4x/(pi D))) has the arctan's slope 1/(pi D) at 0.
_K4PI = 4.0 / math.pi
#: The online calibration multiplier stays in [1/8, 8] (ADRParams.calibration_memory).
CAL_MIN = 0.125
CAL_MAX = 8.0
#: Fisher information the calibration starts with: about a dozen even kills' worth, so the first
#: steps are large but not wild (docs/adr.md "Online calibration").
CAL_PRIOR = 1.0
#: The shortest memory of the calibration's warm-up (ADRParams.calibration_warmup): the first
#: kills have z near 0 and almost no information, so a memory of 1 or 2 would divide by ~0.
CAL_WARMUP_MIN = 20.0
#: The display rating is mu - DISPLAY_K sigma (seed 002's conservative rating).
DISPLAY_K = 3.0
#: Predictions the engine keeps for its own live quality (Engine.recent_predictions).
QUALITY_WINDOW = 8192


def link_p(z: float, logistic: bool) -> float:
    """§3.1 P from z = (r_a - r_b) / D: the printed arctan, or the logistic of the same slope.

    The kernel (``_kernel.c``) computes the same expression in the same order.
    """
    if logistic:
        u = _K4PI * z
        if u < -700.0:
            u = -700.0
        return 1.0 / (1.0 + exp(-u))
    return 0.5 + _INV_PI * atan(z)


def calibration_step(
    state: tuple[float, float, float], grad: float, fisher: float, keep: float, k: dict[str, Any]
) -> tuple[float, float, float]:
    """One online calibration step (docs/adr.md "Online calibration"): ``state`` (c, its
    information, the steps taken) after a prediction whose ``calibrated`` pieces are ``grad``
    and ``fisher``. The information forgets at ``keep`` (1 - 1/calibration_memory), faster
    during the warm-up (ADRParams.calibration_warmup: 1 - 1/max(20, warmup * n)); a Newton
    step, c kept in [CAL_MIN, CAL_MAX]. The kill calibration and the placement pairs' take the same step; the
    kernel's ``predicted`` does the same operations for kills."""
    c, info, n = state
    n += 1.0
    warm = k["cal_warm"]
    if warm:
        m = warm * n
        if m < CAL_WARMUP_MIN:
            m = CAL_WARMUP_MIN
        if m < k["cal_mem"]:
            keep = 1.0 - 1.0 / m
    info = info * keep + fisher
    if info > 0.0:  # none yet (a memory of one kill, a certain prediction): no step
        c += grad / info
        c = CAL_MIN if c < CAL_MIN else CAL_MAX if c > CAL_MAX else c
    return c, info, n


def calibrated(cal: float, z: float, logistic: bool) -> tuple[float, float, float]:
    """(P, d log P / d cal, Fisher information) with the multiplier ``cal`` on z.

    The pieces of one online maximum-likelihood step on a kill, whose outcome is always "the
    attacker killed the victim" (docs/adr.md "Online calibration"). P is the prediction made
    *before* the step. The information is that of a Bernoulli outcome, (dP/dc)^2 / (P (1 - P)).
    The kernel (``_kernel.c``) computes the same expressions in the same order.
    """
    cz = cal * z
    if logistic:
        u = _K4PI * cz
        if u < -700.0:
            u = -700.0
        p = 1.0 / (1.0 + exp(-u))
        q = p * (1.0 - p)
        dp = q * _K4PI * z
    else:
        p = 0.5 + _INV_PI * atan(cz)
        q = p * (1.0 - p)
        dp = _INV_PI * z / (1.0 + cz * cz)
    if q > 0.0:
        return p, dp / p, dp * dp / q
    return p, 0.0, 0.0


#: Below this many players the population sum is exact (math.fsum); numpy's pairwise sum above.
_FSUM_BELOW = 4096


def _inverted_cdf_index(n: int, levels: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    """Positions in sorted order of ``np.quantile(x, levels, method="inverted_cdf")`` for n values.

    numpy's own rule (Hyndman & Fan's definition 1), in the same float operations: j = n*q - 1,
    rounded up unless it is whole, never below 0. Selecting these order statistics in place is
    what lets plan_recalibration skip np.quantile's copy of the data.
    """
    j = n * levels - 1
    low = np.floor(j)
    index = np.where(j - low == 0, low, low + 1).astype(np.intp)
    index[index < 0] = 0
    return index


@lru_cache(maxsize=64)
def _levels_of(proportions: tuple[float, ...]) -> tuple[float, ...]:
    """§6.3 quantile levels 1 - q_k of the 14 boundaries, clipped to [0, 1]."""
    out: list[float] = []
    acc = 0.0
    for x in proportions[: TIER_COUNT - 1]:
        acc += x
        v = 1.0 - acc
        out.append(0.0 if v < 0.0 else 1.0 if v > 1.0 else v)
    return tuple(out)


def _inverted_cdf_positions(n: int, levels: Sequence[float]) -> list[int]:
    """``_inverted_cdf_index`` in Python floats: the same operations on the same doubles."""
    out: list[int] = []
    for q in levels:
        j = n * q - 1
        low = math.floor(j)
        index = low if j - low == 0 else low + 1
        out.append(index if index > 0 else 0)
    return out


class Outcome(IntEnum):
    """What ``Engine.apply`` did with one kill."""

    APPLIED = 0
    FILTERED = 1  # §2.1 repeat kill inside the cooldown: no state changed
    SELF_KILL = 2  # attacker == victim: not a pairwise kill (§11 item 2)
    NON_FINITE_TIME = 3
    OUT_OF_ORDER = 4  # older than the engine clock by more than late_tolerance
    PLAYER_CAP = 5  # would add a player beyond max_players: refused, no state changed


_APPLIED = Outcome.APPLIED
_FILTERED = Outcome.FILTERED

#: Reject reason names, as counted in summaries and metrics.
REJECT_REASONS: dict[Outcome, str] = {
    Outcome.SELF_KILL: "self_kill",
    Outcome.NON_FINITE_TIME: "non_finite_time",
    Outcome.OUT_OF_ORDER: "out_of_order",
    Outcome.PLAYER_CAP: "player_cap",
}


@dataclass(frozen=True, slots=True)
class PlayerView:
    """A player's visible state, as stored (decay is applied lazily at the player's next event)."""

    player: str
    mu: float
    sigma: float
    streak: int
    trend: float
    pool: float
    n: int
    last_t: float | None
    tier: str | None
    rank: int
    returning_left: int
    active: bool
    #: The display rating (mu - 3 sigma, its step bounded by ADRParams.display_cap).
    display: float = math.nan


@dataclass(frozen=True, slots=True)
class RecalibrationPlan:
    """What a recalibration will set (internal rating units), computed without mutating."""

    now: float
    offset: float
    r_lo: float
    r_hi: float
    sum_r_all: float
    sum_r_active: float
    sum_sigma: float
    bounds: list[float] | None  # new B_1..B_14, or None when |A| < P_min


@dataclass(frozen=True, slots=True)
class TierInfo:
    """Current boundaries (visible scale, B_1..B_14) and placed players per tier."""

    boundaries: tuple[float, ...]
    counts: tuple[int, ...]
    calibrations: int
    active: int


def kernel_constants(p: ADRParams) -> dict[str, Any]:
    """Every parameter the update needs, derived once, by name: ``Engine._kc``.

    The C kernel reads the ones it uses from this dict by name at start-up (``_kernel.c``
    ``constants[]``; a missing name or a wrong type refuses the kernel), so adding or reordering
    an entry needs no edit there. ``Engine._k`` is its values in this order, _apply_py's one
    unpack (its names are these keys, an unused one with a leading underscore: a test checks it);
    the last ten only the kernel's event reads (the Python path reads ``params`` for those, but
    ``h_toward``, ``h_away`` and ``tier_p``, which ``Engine._tier_threshold`` reads here too).
    """
    return {
        "t_return_s": p.t_return * p.day_seconds,
        "returning_events": p.returning_events,
        "tau_s": p.tau * p.day_seconds,
        "drift_s": p.sigma_drift / p.day_seconds,
        "smax": p.sigma_max,
        "smin": p.sigma_min,
        "theta": p.theta,
        "lam": p.lambda_,
        "speak": p.sigma_peak,
        "speak2": p.sigma_peak * p.sigma_peak,
        "eta_min": p.eta_min,
        "span": p.eta_max - p.eta_min,
        "wlen": p.window_len,
        "rho_s": p.rho_s,
        "s_max": p.s_max,
        "rho_v_w": p.rho_v / p.w_ref,
        "gamma_phi": p.gamma_phi,
        "c_loss": p.c_loss,
        "corrected": p.loser_rule == "corrected",
        "pool_losses": p.pool_losses,
        "dmax": p.delta_max,
        "inv_g2": 1.0 / (p.gamma * p.gamma),
        "lp": p.lambda_phi,
        "keep_phi": 1.0 - p.lambda_phi,
        "n_act": p.n_active,
        "n_min": p.n_min,
        "decay_on": p.decay,
        "logistic": p.link == "logistic",
        "cal_keep": 1.0 - 1.0 / p.calibration_memory if p.calibration_memory else 0.0,
        "cal_warm": p.calibration_warmup,
        "cal_mem": p.calibration_memory,
        "grace_s": p.decay_grace * p.day_seconds,
        "cap_decay": p.cap_decay,
        "sweep_sigma": p.sweep_sigma,
        "repeat_w": p.repeat_weight,
        "display_cap": p.display_cap,
        "farm_k": p.farm_damping,
        # read by the kernel only
        "late_tolerance": p.late_tolerance,
        "t_cooldown": p.t_cooldown,
        "sigma_place": p.sigma_place,
        "h_req": p.h_req,
        # tier_pull's two thresholds (equal to h_req at 0) and the targets its counts are held to
        "h_toward": p.h_req * (1.0 - p.tier_pull),
        "h_away": p.h_req * (1.0 + p.tier_pull),
        "tier_p": (0.0, *p.tier_proportions),
        "max_players": p.max_players,
        "recal_min_events": p.recalibrate_min_events,
        "active_window_s": p.t_active * p.day_seconds,
    }


def initial_boundaries(params: ADRParams) -> list[float]:
    """B_1..B_14 before the first calibration (arenad choice, docs/adr.md §6.3).

    The quantiles the §6.3 rule would give for a normal population around mu0 with spread
    ``initial_spread``, so a placed player gets a sensible tier before P_min players are active.
    """
    nd = NormalDist(params.mu0, params.initial_spread)
    out: list[float] = []
    q = 0.0
    for k in range(TIER_COUNT - 1):
        q += params.tier_proportions[k]
        u = min(max(1.0 - q, 1e-9), 1.0 - 1e-9)
        out.append(nd.inv_cdf(u))
    return out


class Engine:
    """The whole ADR state of one ladder, updated one kill at a time."""

    # Slots: the C kernel reads and writes these attributes at fixed offsets on every event
    # (a dict lookup each would be ~16 % of the daemon's time per event, perf).
    __slots__ = (
        "_active",
        "_aring",
        "_bounds",
        "_cal",
        "_cal_info",
        "_cal_n",
        "_cooldown",
        "_cooldown_log",
        "_disp",
        "_expiry",
        "_feed_many",
        "_feed_native",
        "_h",
        "_k",
        "_kc",
        "_kernel",
        "_ladder",
        "_ladder_ok",
        "_last",
        "_max_players",
        "_n",
        "_n0",
        "_n_active",
        "_native",
        "_neg_bounds",
        "_pcal",
        "_pcal_info",
        "_pcal_n",
        "_phi",
        "_pool",
        "_prey",
        "_qn",
        "_qring",
        "_r",
        "_r_hi",
        "_r_lo",
        "_ret",
        "_score_many",
        "_scratch",
        "_sigma",
        "_streak",
        "_sum_r_active",
        "_sum_r_all",
        "_sum_sigma",
        "_tier",
        "_tier_active",
        "_tier_counts",
        "_wring",
        "_wslot",
        "_wsum",
        "applied",
        "calibrations",
        "clock",
        "filtered",
        "ids",
        "last_delta_attacker",
        "last_delta_victim",
        "late_applied",
        "names",
        "next_recalibration",
        "next_sweep",
        "offset",
        "params",
        "recal_applied",
        "rejected",
        "run_records",
        "scope",
        "sweeps",
        "tier_changes",
    )  # fmt: skip

    #: The C kernel's contract, declared once (``_kernel.c`` reads these at start-up and refuses
    #: to run on a column or attribute not declared here, or a column of another type code): the
    #: per-player array columns it reads and writes, with their ``array`` type codes ...
    KERNEL_COLUMNS: ClassVar[dict[str, str]] = {
        "_r": "d", "_sigma": "d", "_streak": "q", "_phi": "d", "_pool": "d", "_n": "q",
        "_last": "d", "_wsum": "d", "_ret": "l", "_h": "d", "_wslot": "I", "_wring": "d",
        "_aring": "d", "_disp": "d", "_prey": "q",
    }  # fmt: skip
    #: ... and the other attributes it reads or sets in place (its constants are ``_kc``).
    KERNEL_ATTRIBUTES: ClassVar[tuple[str, ...]] = (
        "clock", "late_applied", "filtered", "_n_active", "_sum_r_active", "_sum_r_all",
        "_sum_sigma", "_r_lo", "_r_hi", "last_delta_attacker", "last_delta_victim", "applied",
        "names", "ids", "_cooldown", "_cooldown_log", "_expiry", "_active", "_ladder", "_tier",
        "_bounds", "_cal", "_cal_info", "_cal_n", "_qring", "_qn", "recal_applied", "next_recalibration",
        "_ladder_ok", "_neg_bounds", "_tier_counts", "_tier_active", "tier_changes",
    )  # fmt: skip

    def __init__(self, params: ADRParams | None = None, *, native: bool | None = None) -> None:
        """``native``: run ``apply``'s common case in the C kernel (default: when it was built)."""
        p = params if params is not None else ADRParams()
        self.params = p
        self._max_players = p.max_players
        self.names: list[str] = []
        self.ids: dict[str, int] = {}
        # Per-player columns (struct of arrays).
        self._r = array("d")
        self._sigma = array("d")
        self._streak = array("q")
        # Each attacker's last counted victim and the run of kills on it ("farm_damping"):
        # (victim id + 1) << 16 | run (run saturating at 0xFFFF), 0 for none. One column, so a
        # player costs 8 bytes more, not 16.
        self._prey = array("q")
        self._phi = array("d")
        self._pool = array("d")
        self._n = array("q")
        self._last = array("d")
        self._wsum = array("d")
        self._ret = array("l")
        # §6.4 accumulators in one signed column: > 0 promotion energy, < 0 demotion energy
        # (the paper resets one whenever the other grows, so they are never both non-zero).
        self._h = array("d")
        # The display rating mu - 3 sigma, kept per player in internal units so that its step per
        # event is bounded (ADRParams.display_cap); the anchor shifts it with the ratings.
        self._disp = array("d")
        self._tier = bytearray()  # 0 = unplaced, k = tier k (1..15)
        self._active = bytearray()
        # §2.2 sliding window: a ring of window_len |changes| per player, in a pool of blocks
        # given out at a player's second counted event. Until then the window holds at most one
        # value, which is _wsum itself, and most players of a large population (one-off
        # visitors) never get a second one: 4 bytes instead of 8 * window_len (docs/performance.md).
        self._wslot = array("I")  # 1 + the player's block in _wring; 0 = none yet
        self._wring = array("d")
        self._aring = array("d")  # n_active slots per player: times of the last counted events
        self._ladder = Ladder()
        # Whether _ladder is kept in step with the ratings; False after defer_ladder (a batch
        # with no reader) until the first read rebuilds it (_index).
        self._ladder_ok = True
        # Population aggregates kept in step with every update (recomputed exactly at recalibration).
        self._sum_r_all = 0.0
        self._sum_r_active = 0.0
        self._n_active = 0
        self._sum_sigma = 0.0
        # plan_recalibration's buffer for the active ratings, kept between recalibrations.
        self._scratch: npt.NDArray[np.float64] | None = None
        self._expiry: list[tuple[float, int]] = []  # one heap entry per active player
        # Tiers: _bounds[k] is B_k in internal units; B_0 = +inf and B_15 = -inf are sentinels.
        b = initial_boundaries(p)
        self._bounds: list[float] = [_INF, *b, -_INF]
        self._neg_bounds: list[float] = [-x for x in b]
        self._tier_counts = [0] * (TIER_COUNT + 1)
        # Active placed players per tier, exact at every event (tier_pull's counts: the targets
        # p_k are shares of the active placed players, as the §6.3 boundaries are quantiles of
        # the active ones); index 0 holds their total, so a threshold reads three numbers.
        self._tier_active = [0] * (TIER_COUNT + 1)
        self.calibrations = 0
        self.offset = 0.0  # visible mu = r + offset
        self._r_lo = p.mu_min
        self._r_hi = p.mu_max
        # §2.1 cooldown: (attacker_id << 32 | victim_id) -> time of the last counted kill. Both
        # are None while the C kernel holds the cooldown in its own table (it adopts them at its
        # first event); _cooldown_py() gives them back to Python, which every reader calls.
        self._cooldown: dict[int, float] | None = {}
        self._cooldown_log: deque[tuple[float, int]] | None = deque()  # (time, pair) in time order
        self.clock = -_INF
        self.next_recalibration = -_INF
        #: ``applied`` at the last recalibration (ADRParams.recalibrate_min_events).
        self.recal_applied = 0
        # Counters.
        self.applied = 0
        self.filtered = 0
        self.rejected: dict[str, int] = {}
        self.late_applied = 0
        self.tier_changes = 0
        # The derived parameters by name (the C kernel reads this dict at start-up), and as a
        # tuple in the same order for _apply_py's one unpack (tests/core/test_native_kernel.py
        # checks that the unpack names are these names).
        self._kc: dict[str, Any] = kernel_constants(p)
        self._k: tuple[Any, ...] = tuple(self._kc.values())
        #: The online calibration multiplier on the link's argument (predictions only).
        self._cal = p.calibration_start if p.calibration_memory else 1.0
        self._cal_info = CAL_PRIOR  # the Fisher information behind _cal
        self._cal_n = 0.0  # calibration steps taken (the warm-up's n)
        # The placement pairs' multiplier on top of _cal (ADRParams.placement_calibration), its
        # information and steps, kept by the same rule from the pairs of the matches learnt.
        self._pcal = 1.0
        self._pcal_info = CAL_PRIOR
        self._pcal_n = 0.0
        # The last QUALITY_WINDOW predictions (attacker kills victim, before learning) and how
        # many were made: ADR's own live quality, scored without any shadow model.
        self._qring = array("d", bytes(8 * QUALITY_WINDOW))
        self._qn = 0
        # Season placement (issue 6): after a season reset a player places again per §6.1 on
        # the events it has played since (n - n0). None until a reset, so other ladders pay nothing.
        self._n0: array[int] | None = None
        # Inactivity sweep (ADRParams.idle_after): the next event time a sweep is due.
        self.next_sweep = -_INF
        self.sweeps = 0
        # Visible change of the last applied update (the §8.4/§4.2-bounded update, not decay).
        self.last_delta_attacker = 0.0
        self.last_delta_victim = 0.0
        #: The leaderboard this engine is (arenad.scopes sets it; a label only).
        self.scope = "global"
        if native is None:
            native = _Kernel is not None
        elif native and _Kernel is None:
            raise RuntimeError("the C update kernel was not built (docs/performance.md)")
        # The kernel reads and writes this object's own columns and sums (its one state of its own,
        # the cooldown, goes back to Python whenever Python reads it: _cooldown_py), so
        # the two paths can alternate event by event: rejects always take Python's.
        kernel = _Kernel(self, _APPLIED, _FILTERED) if native and _Kernel is not None else None
        self._kernel = kernel
        self._native = None if kernel is None else kernel.apply
        #: ``run(records, start, stop) -> (next, applied, filtered)``: journal records
        #: ``(seq, t, attacker, victim, server, id)`` applied in C from ``start`` while each is a
        #: plain kill the kernel takes and no recalibration is due (``feed``'s rule); it stops
        #: before ``stop`` and before the first record that needs Python. None without the kernel.
        self.run_records = None if kernel is None else kernel.run
        # The batch paths (docs/performance.md "Batch replay"): ``feed`` in C while no
        # recalibration is due, over one event or over parallel lists of events.
        self._feed_native = None if kernel is None else kernel.feed
        self._feed_many = None if kernel is None else kernel.feed_many
        self._score_many = None if kernel is None else kernel.score_many

    # ------------------------------------------------------------------ players
    def __len__(self) -> int:
        return len(self.names)

    def _add_player(self, name: str) -> int:
        i = len(self.names)
        p = self.params
        self.names.append(name)
        self.ids[name] = i
        r0 = p.mu0 - self.offset
        self._r.append(r0)
        self._sigma.append(p.sigma0)
        self._streak.append(0)
        self._prey.append(0)
        self._phi.append(0.0)
        self._pool.append(0.0)
        self._n.append(0)
        self._last.append(-_INF)
        self._wsum.append(0.0)
        self._ret.append(0)
        self._h.append(0.0)
        self._disp.append(r0 - DISPLAY_K * p.sigma0)
        self._tier.append(0)
        self._active.append(0)
        self._wslot.append(0)
        self._aring.extend(_zeros(p.n_active))
        if self._n0 is not None:
            self._n0.append(0)
        if self._ladder_ok:
            self._ladder.add(-r0, i)
        self._sum_r_all += r0
        self._sum_sigma += p.sigma0
        return i

    def seed_player(
        self, name: str, *, mu: float, sigma: float, n: int, last_t: float, streak: int = 0
    ) -> int:
        """Start a player from a given state (experiments such as §10.6, and imports).

        The activity ring is filled as if the player's recent events all happened at ``last_t``.
        """
        if name in self.ids:
            raise ValueError(f"player {name!r} already exists")
        if len(self.names) >= self._max_players:
            raise ValueError(f"cannot seed {name!r}: max_players={self._max_players} players are tracked")
        p = self.params
        if not (p.mu_min <= mu <= p.mu_max and p.sigma_min <= sigma <= p.sigma_max and n >= 0):
            raise ValueError(f"state out of bounds for {name!r}: mu={mu!r} sigma={sigma!r} n={n!r}")
        i = self._add_player(name)
        r = mu - self.offset
        if self._ladder_ok:
            self._ladder.move(-self._r[i], -r, i)
        self._sum_r_all += r - self._r[i]
        self._sum_sigma += sigma - self._sigma[i]
        self._r[i] = r
        self._sigma[i] = sigma
        self._disp[i] = r - DISPLAY_K * sigma
        self._n[i] = n
        self._streak[i] = streak
        self._last[i] = last_t if n else -_INF
        if n:
            na = p.n_active
            for j in range(na):
                self._aring[i * na + j] = last_t
            if n >= na:
                self._activate(i, n, last_t, r)
        return i

    # ------------------------------------------------------------------ the hot path
    def apply(self, attacker: str, victim: str, t: float) -> Outcome:
        """Rate one kill: ``attacker`` killed ``victim`` at ``t`` (seconds)."""
        native = self._native
        if native is not None:
            out: Outcome | None = native(attacker, victim, t)
            if out is not None:
                return out
        return self._apply_py(attacker, victim, t)

    def _cooldown_py(self) -> tuple[dict[int, float], deque[tuple[float, int]]]:
        """The §2.1 cooldown map and log as Python objects, taken back from the C kernel when it
        holds them (the same entries in the same order: the kernel adopts them again at its next
        event). Every Python reader of the cooldown goes through this."""
        if self._cooldown is None and self._kernel is not None:
            self._kernel.cooldown_release()
        cooldown, log = self._cooldown, self._cooldown_log
        if cooldown is None or log is None:
            raise RuntimeError("the cooldown is held by no one")
        return cooldown, log

    @property
    def native(self) -> bool:
        """Whether ``apply`` runs its common case in the C kernel."""
        return self._native is not None

    def _apply_py(self, attacker: str, victim: str, t: float) -> Outcome:
        """``apply`` in Python: the reference for the C kernel (``_kernel.c`` mirrors it step by
        step, bit for bit) and the path of every newcomer, reject, and engine without it."""
        if attacker == victim:
            return self._reject(Outcome.SELF_KILL)
        if not isfinite(t):
            return self._reject(Outcome.NON_FINITE_TIME)
        clock = self.clock
        ids = self.ids
        a = ids.get(attacker)
        b = ids.get(victim)
        # The player cap (docs/adr.md): an event that would track a player beyond max_players is
        # refused before anything changes, the clock included, so a capped engine equals an
        # uncapped one fed the same stream without the refused events.
        if (a is None or b is None) and len(self.names) + (a is None) + (b is None) > self._max_players:
            if t < clock - self.params.late_tolerance:
                return self._reject(Outcome.OUT_OF_ORDER)
            return self._reject(Outcome.PLAYER_CAP)
        if t < clock:
            if t < clock - self.params.late_tolerance:
                return self._reject(Outcome.OUT_OF_ORDER)
            # A slightly late event is applied at the engine clock, so time never runs backwards
            # for decay, activity or the cooldown (docs/adr.md "out-of-order timestamps").
            t = clock
            self.late_applied += 1
        # Every valid event moves the clock, a filtered one too: its time is real.
        self.clock = t
        cooldown = self._cooldown
        log = self._cooldown_log
        if cooldown is None or log is None:  # held by the C kernel (an int time, say)
            cooldown, log = self._cooldown_py()
        if a is not None and b is not None:
            # §2.1 cooldown, before anything changes (a pair with a newcomer has no history).
            last_kill = cooldown.get((a << _ID_BITS) | b)
            if last_kill is not None and t - last_kill < self.params.t_cooldown:
                self._repeat(a, b, t, t - last_kill)
                self.filtered += 1
                return _FILTERED
        else:
            # Step 1: newcomers join the tracked set now.
            if a is None:
                a = self._add_player(attacker)
            if b is None:
                b = self._add_player(victim)
        pair = (a << _ID_BITS) | b
        cooldown[pair] = t
        # Forget pairs whose last counted kill left the cooldown window, a few per event: the
        # log is in time order, so this keeps the map at "pairs seen in the last t_cooldown"
        # without ever pausing to sweep it.
        log.append((t, pair))
        horizon = t - self.params.t_cooldown
        for _ in range(4):
            if not log or log[0][0] > horizon:
                break
            old_t, old_pair = log.popleft()
            if cooldown.get(old_pair) == old_t:
                del cooldown[old_pair]
        # Every parameter the update needs, derived once in __init__ (one unpack is much
        # cheaper than thirty attribute lookups on the hot path).
        (
            t_return_s, returning_events, tau_s, drift_s, smax, smin, theta, lam, speak, speak2,
            eta_min, span, wlen, rho_s, s_max, rho_v_w, gamma_phi, c_loss, corrected, pool_losses,
            dmax, inv_g2, lp, keep_phi, n_act, n_min, decay_on,
            logistic, cal_keep, _cal_warm, _cal_mem, grace_s, cap_decay, sweep_sigma, _repeat_w,
            display_cap, farm_k,
            _late_tolerance, _t_cooldown, _sigma_place, _h_req, _h_toward, _h_away, _tier_p,
            _max_players, _recal_min_events, _active_window_s,
        ) = self._k  # fmt: skip
        r_arr = self._r
        s_arr = self._sigma
        last_arr = self._last
        n_arr = self._n
        ret = self._ret
        na = n_arr[a]
        nb = n_arr[b]
        ra_old = ra = r_arr[a]
        rb_old = rb = r_arr[b]
        sa_old = sa = s_arr[a]
        sb_old = sb = s_arr[b]
        la = last_arr[a]
        lb = last_arr[b]

        # Step 2: returning players (§8.2/§8.3 apply for the next `returning_events` events).
        # `_last` is the time decay was applied up to, which an inactivity sweep moves on; the
        # time of the last counted event is the newest slot of the activity ring.
        aring = self._aring
        ret_a = ret[a]
        ret_b = ret[b]
        ev_a = aring[a * n_act + (na - 1) % n_act] if na else la
        ev_b = aring[b * n_act + (nb - 1) % n_act] if nb else lb
        if na and t - ev_a > t_return_s:
            ret_a = returning_events
            ret[a] = ret_a
        if nb and t - ev_b > t_return_s:
            ret_b = returning_events
            ret[b] = ret_b

        # Step 3: one snapshot of the active mean (§2.3, fallback to all players), then §5 decay.
        expiry = self._expiry
        if expiry and expiry[0][0] <= t:
            self._expire(t)
        n_active = self._n_active
        n_players = len(self.names)
        mean = self._sum_r_active / n_active if n_active else self._sum_r_all / n_players
        # The decay clock starts at the last decay point, or with a grace period (decay_grace)
        # that long after the last counted event; sigma drifts from the last decay point, or
        # from the last counted event when sweeps leave sigma alone (sweep_sigma = false).
        # (A sweep at this very time has moved the last decay point to t: sigma's drift, which
        # such a sweep leaves to the event, is still due from the last counted event.)
        if decay_on and na:
            if t > la:
                start = ev_a + grace_s
                if start < la:
                    start = la
                if t > start:
                    ra = mean + (ra - mean) * exp(-(t - start) / tau_s)
            since = la if sweep_sigma else ev_a
            if t > since:
                sa += drift_s * (t - since)
                if sa > smax:
                    sa = smax
        if decay_on and nb:
            if t > lb:
                start = ev_b + grace_s
                if start < lb:
                    start = lb
                if t > start:
                    rb = mean + (rb - mean) * exp(-(t - start) / tau_s)
            since = lb if sweep_sigma else ev_b
            if t > since:
                sb += drift_s * (t - since)
                if sb > smax:
                    sb = smax

        # Step 4: §3.1 kill probability with §3.2 diffusion over all tracked players.
        sum_sigma = self._sum_sigma - sa_old - sb_old + sa + sb
        z = (ra - rb) / (theta + lam * sum_sigma / n_players)
        p_ab = link_p(z, logistic)
        surprise = 1.0 - p_ab
        self._predicted(z, logistic, cal_keep)

        # Step 5: §4.1 learning rates with the §8.1 peak-shaped base.
        wsum = self._wsum
        streak = self._streak
        phi = self._phi
        sk = streak[a]
        eta_a = (
            (eta_min + span * (2.0 * sa * speak) / (sa * sa + speak2))
            * (1.0 + rho_s * (sk if sk < s_max else s_max))
            / (1.0 + rho_v_w * ((wsum[a] / (na if na < wlen else wlen)) if na else 0.0))
        )
        phi_a = phi[a]
        if phi_a > 0.0:
            eta_a *= 1.0 + gamma_phi * phi_a
        sk = streak[b]
        eta_b = (
            (eta_min + span * (2.0 * sb * speak) / (sb * sb + speak2))
            * (1.0 + rho_s * (sk if sk < s_max else s_max))
            / (1.0 + rho_v_w * ((wsum[b] / (nb if nb < wlen else wlen)) if nb else 0.0))
            * c_loss
        )
        phi_b = phi[b]
        if phi_b > 0.0:
            eta_b *= 1.0 + gamma_phi * phi_b
        # Farming past the cooldown (docs/adr.md): the run of this attacker's counted kills on
        # this victim, and its damping of both sides; the victim killing back ends its own run.
        prey = self._prey
        run = 0
        last = prey[a]
        if last >> 16 == b + 1:
            run = (last & 0xFFFF) + 1
            if run > 0xFFFF:
                run = 0xFFFF
        prey[a] = ((b + 1) << 16) | run
        if prey[b] >> 16 == a + 1:
            prey[b] = 0
        if run and farm_k != 0.0:
            # Damped in proportion to how expected the kill was: a run of upsets (a returning
            # player beating a favourite again and again, §10.6) is evidence, not a farm.
            damp = surprise + p_ab / (1.0 + run / farm_k)
            eta_a *= damp
            eta_b *= damp

        # Step 6: §4.2 raw change (victim: the corrected rule unless configured "printed"),
        # §8.2/§8.3 for returning players and draining pools, §8.4 cap, §4.2 clip.
        da = eta_a * surprise
        db = -eta_b * (surprise if corrected else p_ab)
        pool = self._pool
        if ret_a or pool[a] != 0.0:
            da = self._pooled(a, da, sa)
        if (ret_b and pool_losses) or (not ret_b and pool[b] != 0.0):
            db = self._pooled(b, db, sb)
        if da > dmax:
            da = dmax
        elif da < -dmax:
            da = -dmax
        if db > dmax:
            db = dmax
        elif db < -dmax:
            db = -dmax
        lo = self._r_lo
        hi = self._r_hi
        ra_new = ra + da
        if ra_new > hi:
            ra_new = hi
        elif ra_new < lo:
            ra_new = lo
        rb_new = rb + db
        if rb_new > hi:
            rb_new = hi
        elif rb_new < lo:
            rb_new = lo
        da = ra_new - ra
        db = rb_new - rb
        self.last_delta_attacker = da
        self.last_delta_victim = db
        if cap_decay:
            # §8.4 over the whole visible change: decay plus update (docs/adr.md).
            if ra_new > ra_old + dmax:
                ra_new = ra_old + dmax
            elif ra_new < ra_old - dmax:
                ra_new = ra_old - dmax
            if rb_new > rb_old + dmax:
                rb_new = rb_old + dmax
            elif rb_new < rb_old - dmax:
                rb_new = rb_old - dmax

        # Step 7: §4.3 two-stage sigma from the final visible change.
        sa_new = 1.0 / sqrt(1.0 / (sa * sa + da * da) + inv_g2)
        if sa_new < smin:
            sa_new = smin
        elif sa_new > smax:
            sa_new = smax
        sb_new = 1.0 / sqrt(1.0 / (sb * sb + db * db) + inv_g2)
        if sb_new < smin:
            sb_new = smin
        elif sb_new > smax:
            sb_new = smax
        # §4.4 trend with the same P_ab.
        phi_a = keep_phi * phi_a + lp * surprise
        phi[a] = phi_a if phi_a < 1.0 else 1.0
        phi_b = keep_phi * phi_b - lp * surprise
        phi[b] = phi_b if phi_b > -1.0 else -1.0
        # §4.5 streak, window, count, last event time.
        streak[a] += 1
        streak[b] = 0
        wring = self._wring
        wslot = self._wslot
        da = abs(da)
        db = abs(db)
        if na:
            base = (wslot[a] or self._new_window(a)) - 1
            slot = base * wlen + na % wlen
            wsum[a] += da - wring[slot]
            wring[slot] = da
            if na % wlen == wlen - 1:  # re-sum once per lap so rounding never accumulates
                wsum[a] = fsum(wring[base * wlen : (base + 1) * wlen])
        else:
            wsum[a] += da  # the first change is the whole window (its slot 0 is wsum, above)
        if nb:
            base = (wslot[b] or self._new_window(b)) - 1
            slot = base * wlen + nb % wlen
            wsum[b] += db - wring[slot]
            wring[slot] = db
            if nb % wlen == wlen - 1:
                wsum[b] = fsum(wring[base * wlen : (base + 1) * wlen])
        else:
            wsum[b] += db
        n_arr[a] = na + 1
        n_arr[b] = nb + 1
        last_arr[a] = t
        last_arr[b] = t
        if ret_a:
            ret[a] = ret_a - 1
        if ret_b:
            ret[b] = ret_b - 1

        # Store, keeping the aggregates and the ladder index in step.
        r_arr[a] = ra_new
        r_arr[b] = rb_new
        s_arr[a] = sa_new
        s_arr[b] = sb_new
        # The display mu - 3 sigma: its step bounded by delta_max while the player is returning
        # (§8) or its display is still catching up after a return (ADRParams.display_cap).
        disp = self._disp
        d = disp[a]
        if display_cap and (ret_a or d != ra_old - DISPLAY_K * sa_old):
            step = ra_new - DISPLAY_K * sa_new - d
            disp[a] = d + (dmax if step > dmax else -dmax if step < -dmax else step)
        else:
            disp[a] = ra_new - DISPLAY_K * sa_new
        d = disp[b]
        if display_cap and (ret_b or d != rb_old - DISPLAY_K * sb_old):
            step = rb_new - DISPLAY_K * sb_new - d
            disp[b] = d + (dmax if step > dmax else -dmax if step < -dmax else step)
        else:
            disp[b] = rb_new - DISPLAY_K * sb_new
        self._sum_sigma = sum_sigma - sa - sb + sa_new + sb_new
        self._sum_r_all += ra_new - ra_old + rb_new - rb_old
        active = self._active
        active_a = active[a]
        active_b = active[b]
        if active_a or active_b:
            self._sum_r_active += (ra_new - ra_old if active_a else 0.0) + (
                rb_new - rb_old if active_b else 0.0
            )
        if self._ladder_ok:
            move = self._ladder.move
            if ra_new != ra_old:
                move(-ra_old, -ra_new, a)
            if rb_new != rb_old:
                move(-rb_old, -rb_new, b)
        # §2.3 activity ring: the time of this counted event.
        aring[a * n_act + na % n_act] = t
        aring[b * n_act + nb % n_act] = t
        if not active_a and na + 1 >= n_act:
            self._activate(a, na + 1, t, ra_new)
        if not active_b and nb + 1 >= n_act:
            self._activate(b, nb + 1, t, rb_new)
        # §6.1 placement and §6.4 accumulators; the common case (a placed player still inside
        # its tier with empty accumulators) is decided here without a call.
        tier = self._tier
        bounds = self._bounds
        acc = self._h
        k = tier[a]
        if k and bounds[k] <= ra_new < bounds[k - 1]:
            if acc[a]:
                acc[a] = 0.0
        elif k or na + 1 >= n_min:
            self._tiers_after_event(a, ra_new, sa_new)
        k = tier[b]
        if k and bounds[k] <= rb_new < bounds[k - 1]:
            if acc[b]:
                acc[b] = 0.0
        elif k or nb + 1 >= n_min:
            self._tiers_after_event(b, rb_new, sb_new)
        self.applied += 1
        return _APPLIED

    def _new_window(self, i: int) -> int:
        """Give player ``i`` its §2.2 ring block at its second counted event; returns 1 + block.

        Until now its window held the first |change| alone, in slot 0, and that value is _wsum
        (0 + x, exactly), so the ring starts as [wsum, 0, ...]: what a full ring would hold.
        """
        wlen = self.params.window_len
        block = len(self._wring) // wlen
        self._wring.extend(_zeros(wlen))
        self._wring[block * wlen] = self._wsum[i]
        self._wslot[i] = block + 1
        return block + 1

    def _predicted(self, z: float, logistic: bool, cal_keep: float) -> None:
        """Record the calibrated prediction of this kill and take one calibration step: a Newton
        step on the log-likelihood with the information of the remembered kills (cal_keep = 1 -
        1/calibration_memory; 0 = calibration off), forgetting faster during the warm-up
        (ADRParams.calibration_warmup). The kernel's ``predicted`` does the same operations."""
        p, grad, fisher = calibrated(self._cal, z, logistic)
        qn = self._qn
        self._qring[qn % QUALITY_WINDOW] = p
        self._qn = qn + 1
        k = self._kc
        if k["cal_mem"]:  # not cal_keep: a memory of one kill keeps nothing (0) and still steps
            self._cal, self._cal_info, self._cal_n = calibration_step(
                (self._cal, self._cal_info, self._cal_n), grad, fisher, cal_keep, k
            )

    def _repeat(self, a: int, b: int, t: float, since: float) -> None:
        """A §2.1 repeat inside the cooldown: predicted and calibrated on, and learnt at the
        decaying weight ``repeat_weight * since / t_cooldown`` when that is set (0: the paper)."""
        k = self._kc
        n_players = len(self.names)
        z = (self._r[a] - self._r[b]) / (k["theta"] + k["lam"] * self._sum_sigma / n_players)
        self._predicted(z, k["logistic"], k["cal_keep"])
        w = k["repeat_w"]
        if w:
            self._learn_pair(a, b, t, w * since / self.params.t_cooldown, z)

    def _redisplay(self, i: int, old_target: float) -> None:
        """Player i's display after a change outside an event (sweep, clamp, season, pair), by
        the rule of ``_apply_py``: bounded while returning or catching up, else mu - 3 sigma.
        ``old_target`` is mu - 3 sigma (internal units) before the change."""
        target = self._r[i] - DISPLAY_K * self._sigma[i]
        d = self._disp[i]
        if self.params.display_cap and (self._ret[i] or d != old_target):
            dmax = self.params.delta_max
            step = target - d
            self._disp[i] = d + (dmax if step > dmax else -dmax if step < -dmax else step)
        else:
            self._disp[i] = target

    def display(self, i: int) -> float:
        """Player i's visible display rating: mu - 3 sigma, step-bounded (ADRParams.display_cap)."""
        return self._disp[i] + self.offset

    def _learn_pair(self, a: int, b: int, t: float, weight: float, z: float) -> None:
        """A weighted pairwise result that is not a counted kill (a placement pair, a repeat):
        the §4.2 change at ``weight`` times the §8.1 base rate from stored ratings, §8.4 cap and
        §4.2 clip, then §4.3 sigma. Counts, streaks, trends, windows, activity and the cooldown
        stay as they are; tiers follow at the players' next events."""
        p = self.params
        r = self._r
        s = self._sigma
        k = self._kc
        surprise = 1.0 - link_p(z, k["logistic"])
        lo = self._r_lo
        hi = self._r_hi
        dmax = p.delta_max
        changes = []
        for i, sign in ((a, 1.0), (b, -1.0)):
            sg = s[i]
            eta = k["eta_min"] + k["span"] * (2.0 * sg * k["speak"]) / (sg * sg + k["speak2"])
            d = sign * weight * eta * surprise
            d = dmax if d > dmax else -dmax if d < -dmax else d
            new = r[i] + d
            new = hi if new > hi else lo if new < lo else new
            changes.append((i, new))
        for i, new in changes:
            old = r[i]
            was = old - DISPLAY_K * s[i]
            d = new - old
            sg = 1.0 / sqrt(1.0 / (s[i] * s[i] + d * d) + k["inv_g2"])
            sg = p.sigma_min if sg < p.sigma_min else p.sigma_max if sg > p.sigma_max else sg
            self._sum_sigma += sg - s[i]
            s[i] = sg
            if new != old:
                r[i] = new
                self._sum_r_all += d
                if self._active[i]:
                    self._sum_r_active += d
                if self._ladder_ok:
                    self._ladder.move(-old, -new, i)
            self._redisplay(i, was)

    def apply_placement(self, placements: Sequence[Sequence[str]], t: float) -> int:
        """Learn a finished match (seed 001 §2): every (better, worse) pair of players in
        different groups at ``placement_weight / (players - 1)``, from the ratings before the
        match. A player seen for the first time joins (§2.2), as at a kill, while the player cap
        leaves room; one placed twice is a ValueError (the decoders refuse such a match). The
        clock does not move and nothing is counted: a match is not a kill (docs/adr.md).
        Returns the pairs learnt (0 when placement_weight is 0 or the time is too late)."""
        p = self.params
        flat = [x for g in placements for x in g]
        if len(set(flat)) != len(flat):
            raise ValueError("a player is placed twice in one match")
        w = p.placement_weight
        if not w or len(flat) < 2 or not isfinite(t) or t < self.clock - p.late_tolerance:
            return 0
        ids = self.ids
        # The pairs' predictions as they were scored before the match (predict_placement):
        # at the D of the ladder before any newcomer joins, between players already known (a
        # pair with a newcomer was the prior 0.5, which no multiplier changes).
        known = len(self.names)
        scale = self._prediction_scale()
        for x in flat:
            if x not in ids and len(self.names) < self._max_players:
                self._add_player(x)
        groups = [[ids[x] for x in g if x in ids] for g in placements]
        size = sum(len(g) for g in groups)
        if size < 2:
            return 0
        weight = w / (size - 1)
        k = self._kc
        d = k["theta"] + k["lam"] * self._sum_sigma / len(self.names)
        r = self._r
        pairs = [
            (i, j, (r[i] - r[j]) / d)
            for n, g in enumerate(groups)
            for worse in groups[n + 1 :]
            for i in g
            for j in worse
        ]
        if p.placement_calibration and k["cal_mem"]:
            # Each pair's prediction (made before the match is learnt, as predict_placement
            # makes it) is one step of the pairs' own multiplier on top of the kill calibration.
            logistic = k["logistic"]
            cal = self._cal
            state = (self._pcal, self._pcal_info, self._pcal_n)
            for i, j, _ in pairs:
                if i < known and j < known:
                    _, grad, fisher = calibrated(state[0], cal * ((r[i] - r[j]) / scale), logistic)
                    state = calibration_step(state, grad, fisher, k["cal_keep"], k)
            self._pcal, self._pcal_info, self._pcal_n = state
        for i, j, z in pairs:
            self._learn_pair(i, j, t, weight, z)
        return len(pairs)

    def recent_predictions(self) -> tuple[npt.NDArray[np.float64], int]:
        """(the last predictions oldest first, how many were ever made): P(attacker kills
        victim) with the calibration, made before each kill (cooldown repeats included) was
        learnt. A kill is always a positive; see ``arenad.daemon.shadows`` for the orientation."""
        qn = self._qn
        buf = np.frombuffer(self._qring, dtype=np.float64)
        if qn <= QUALITY_WINDOW:
            return buf[:qn].copy(), qn
        pos = qn % QUALITY_WINDOW
        return np.concatenate((buf[pos:], buf[:pos])), qn

    @property
    def calibration(self) -> float:
        """The online calibration multiplier (1.0 when calibration_memory is 0)."""
        return self._cal

    def _pooled(self, i: int, delta: float, sigma: float) -> float:
        """§8.2 evidence weight and §8.3 pool for player ``i``; returns the visible change."""
        p = self.params
        pool = self._pool
        nu = pool[i]
        lam = p.lambda_pool
        if self._ret[i]:
            eff = delta * p.sigma0 / (sigma + p.sigma0)  # §8.2
            kept = nu * (1.0 - lam) if p.pool_release == "transfer" else nu
            new_nu = kept + p.alpha * eff
            lo = p.pool_low
            hi = p.pool_high
            pool[i] = lo if new_nu < lo else hi if new_nu > hi else new_nu
            return (1.0 - p.alpha) * eff + lam * nu
        if p.pool_release == "literal":
            return delta  # the printed pool only acts while returning; what is left stays frozen
        # After the returning phase the rest of the pool keeps draining at lambda_pool per event;
        # a remainder under 0.01 points is released whole so the pool reaches exactly zero.
        release = lam * nu
        rest = nu - release
        if -0.01 < rest < 0.01:
            release = nu
            rest = 0.0
        pool[i] = rest
        return delta + release

    def _activate(self, i: int, n: int, t: float, r_now: float) -> None:
        """§2.3: join the active set if the n_active-th latest of ``n`` events is recent enough."""
        na = self.params.n_active
        horizon = self._aring[i * na + n % na] + self.params.t_active * self.params.day_seconds
        if horizon > t:
            self._active[i] = 1
            self._n_active += 1
            k = self._tier[i]
            if k:
                self._tier_active[k] += 1
                self._tier_active[0] += 1
            self._sum_r_active += r_now
            heapq.heappush(self._expiry, (horizon, i))

    def _expire(self, t: float) -> None:
        """§2.3: drop players whose n_active-th latest event left the look-back window."""
        heap = self._expiry
        na = self.params.n_active
        window = self.params.t_active * self.params.day_seconds
        ring = self._aring
        n_arr = self._n
        while heap and heap[0][0] <= t:
            _, i = heapq.heappop(heap)
            horizon = ring[i * na + n_arr[i] % na] + window
            if horizon > t:  # renewed since this entry was pushed
                heapq.heappush(heap, (horizon, i))
            else:
                self._active[i] = 0
                self._n_active -= 1
                k = self._tier[i]
                if k:
                    self._tier_active[k] -= 1
                    self._tier_active[0] -= 1
                self._sum_r_active -= self._r[i]

    def _tiers_after_event(self, i: int, r: float, sigma: float) -> None:
        p = self.params
        k = self._tier[i]
        if k == 0:
            # §6.1 placement: enough evidence (this season's, after a reset) and low enough
            # uncertainty.
            n = self._n[i] if self._n0 is None else self._n[i] - self._n0[i]
            if n >= p.n_min and sigma <= p.sigma_place:
                k = 1 + bisect_left(self._neg_bounds, -r)
                self._tier[i] = k
                self._tier_counts[k] += 1
                if self._active[i]:
                    self._tier_active[k] += 1
                    self._tier_active[0] += 1
                self._h[i] = 0.0
            return
        # §6.4 promotion / demotion accumulators against the current tier's own boundaries.
        upper = self._bounds[k - 1]
        lower = self._bounds[k]
        h = self._h[i]
        # Below the lower of tier_pull's thresholds no move is due whichever applies, so the
        # counts are read (_tier_threshold) only for an accumulator that reached it.
        toward = self._kc["h_toward"]
        if r >= upper:
            h = (h if h > 0.0 else 0.0) + (r - upper)
            if h >= toward and h >= self._tier_threshold(self._active[i], k, k - 1):
                self._move_tier(i, k, k - 1)
            else:
                self._h[i] = h
        elif r < lower:
            h = (-h if h < 0.0 else 0.0) + (lower - r)
            if h >= toward and h >= self._tier_threshold(self._active[i], k, k + 1):
                self._move_tier(i, k, k + 1)
            else:
                self._h[i] = -h
        else:
            self._h[i] = 0.0

    def _tier_threshold(self, active: int, old: int, new: int) -> float:
        """The §6.4 accumulator a move from tier ``old`` to its neighbour ``new`` needs
        (``ADRParams.tier_pull``): for an active player, the lower threshold when the move brings
        the two tiers' active placed counts nearer their targets, i.e. when the source's excess
        over p_k * N beats the destination's by more than one player (moving one player changes
        their squared excesses by 2 - 2 * that difference), and the higher one otherwise; h_req
        for an inactive one (a ghost the sweep moves changes no count, and a pull would hold it
        in a short-handed tier). Both are h_req at tier_pull = 0. The C kernel computes the same
        numbers in the same order (tier_need)."""
        k = self._kc
        toward: float = k["h_toward"]
        away: float = k["h_away"]
        if toward == away:
            return toward
        if not active:
            h_req: float = k["h_req"]
            return h_req
        c = self._tier_active
        n = c[0]  # the total of active placed players
        tp = k["tier_p"]
        x = (c[old] - tp[old] * n) - (c[new] - tp[new] * n)
        return toward if x > 1.0 else away

    def _move_tier(self, i: int, old: int, new: int) -> None:
        self._tier[i] = new
        self._tier_counts[old] -= 1
        self._tier_counts[new] += 1
        if self._active[i]:
            self._tier_active[old] -= 1
            self._tier_active[new] += 1
        self._h[i] = 0.0
        self.tier_changes += 1

    def _reject(self, outcome: Outcome) -> Outcome:
        reason = REJECT_REASONS[outcome]
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        return outcome

    def recalibration_due_before(self, attacker: str, victim: str, t: float) -> bool:
        """Whether ``feed`` would recalibrate before applying this event.

        Recalibration runs *before* the first valid event at or after each scheduled time, so
        any two consumers of the same event stream (replay, the daemon) recalibrate at the same
        points. A rejected event never triggers one (one refused by the player cap included).
        The daemon asks this first so that it can run ``recalibrate`` in a worker thread and keep
        serving queries meanwhile.
        """
        if not (
            t >= self.next_recalibration
            and self.applied - self.recal_applied >= self.params.recalibrate_min_events
            and attacker != victim
            and isfinite(t)
            and t >= self.clock - self.params.late_tolerance
        ):
            return False
        ids = self.ids
        newcomers = (attacker not in ids) + (victim not in ids)
        return len(self.names) + newcomers <= self._max_players

    def feed(self, attacker: str, victim: str, t: float) -> Outcome:
        """``apply`` preceded by any recalibration that is due at ``t``: the replay contract."""
        fast = self._feed_native
        if fast is not None:
            out: Outcome | None = fast(attacker, victim, t)  # no recalibration due: the kernel
            if out is not None:
                return out
        if self.recalibration_due_before(attacker, victim, t):
            self.recalibrate(t)
        return self.apply(attacker, victim, t)

    def feed_many(
        self, attackers: list[str], victims: list[str], times: list[float]
    ) -> tuple[int, int, list[Outcome]]:
        """``feed`` over parallel lists, in order: (applied, filtered, the other outcomes).

        The kernel takes runs of events while no recalibration is due; each event it hands back
        goes through ``feed`` here, so the result is exactly feeding the events one by one
        (tests/core/test_batch.py)."""
        n = len(times)
        if not (len(attackers) == len(victims) == n):
            raise ValueError("feed_many needs three lists of the same length")
        many = self._feed_many
        applied = filtered = 0
        others: list[Outcome] = []
        k = 0
        while k < n:
            if many is not None:
                k, a, f = many(attackers, victims, times, k, n)
                applied += a
                filtered += f
                if k >= n:
                    break
            out = self.feed(attackers[k], victims[k], times[k])
            if out is _APPLIED:
                applied += 1
            elif out is _FILTERED:
                filtered += 1
            else:
                others.append(out)
            k += 1
        return applied, filtered, others

    def score_many(
        self,
        attackers: list[str],
        victims: list[str],
        times: list[float],
        learn: bytes,
        out: npt.NDArray[np.float64],
        *,
        start: int = 0,
        stop: int | None = None,
    ) -> int:
        """Walk-forward over kills: ``out[k]`` = the prediction of kill k (``ADRModel.predict``:
        ``predict`` for two tracked players, 0.5 otherwise), then kill k is fed when
        ``learn[k]``. Equal to predicting and feeding one by one; returns ``stop``."""
        end = len(times) if stop is None else stop
        many = self._score_many
        k = start
        while k < end:
            if many is not None:
                k, pending = many(attackers, victims, times, learn, out, k, end)
                if k >= end:
                    break
                if pending:  # predicted already; the kernel handed the update back
                    self.feed(attackers[k], victims[k], times[k])
                    k += 1
                    continue
            ids = self.ids
            i = ids.get(attackers[k])
            j = ids.get(victims[k])
            out[k] = 0.5 if i is None or j is None else self.predict(i, j)
            if learn[k]:
                self.feed(attackers[k], victims[k], times[k])
            k += 1
        return end

    # ------------------------------------------------------------------ recalibration
    def recalibration_due(self, t: float) -> bool:
        """True when event time ``t`` has reached the next scheduled recalibration."""
        return t >= self.next_recalibration

    def recalibrate(self, t: float | None = None) -> None:
        """§6.3 boundaries and the scale anchor at event time ``t``, all in one call.

        Replay and the daemon recalibrate at the same event-time points (every
        ``recalibrate_interval`` seconds of event time) so that both reach the same state. The
        daemon runs the same three steps with the middle one in a worker thread.
        """
        now = self.begin_recalibration(t)
        if now is not None:
            self.finish_recalibration(self.plan_recalibration(now))

    def begin_recalibration(self, t: float | None = None) -> float | None:
        """Step 1 (mutates): move the clock, schedule the next one, expire activity (§2.3).

        Returns the recalibration time, or None when there is nobody to calibrate.
        """
        now = self.clock if t is None else max(t, self.clock)
        # Recalibrating at `now` means time has reached `now`: activity expires as of then, so
        # the clock moves too (later late events are applied at it).
        if math.isfinite(now):
            self.clock = now
        self.next_recalibration = now + self.params.recalibrate_interval
        self.recal_applied = self.applied
        if not self.names:
            return None
        if self._expiry and self._expiry[0][0] <= now:
            self._expire(now)
        p = self.params
        if p.idle_after > 0 and now >= self.next_sweep:
            self.next_sweep = now + p.sweep_interval
            self.sweep(now)
        return now

    def sweep(self, now: float) -> int:
        """Inactivity sweep: the §5 decay, applied now to every player idle for > idle_after days.

        The decay is the one ``apply`` would apply at the player's next event (toward the current
        active mean, sigma drifting up), so a ghost's rating leaves the top of the ladder without
        waiting for a next event that may never come. ``_last`` moves to ``now``, so the next
        event decays only the remainder; "returning" (§8) still counts from the last real event
        (the activity ring). Placed players whose rating left their tier band go through the §6.4
        accumulators, the same hysteresis as after an event. Returns how many players changed.
        Runs at a recalibration point, so a replay of the same events sweeps at the same times.
        """
        p = self.params
        size = len(self.names)
        if not p.decay or not size:
            return 0
        self.sweeps += 1
        day = p.day_seconds
        last = np.frombuffer(self._last, dtype=np.float64)
        count = np.frombuffer(self._n, dtype=np.int64)
        idle = np.flatnonzero((count > 0) & (last < now - p.idle_after * day))
        if not idle.size:
            return 0
        r = np.frombuffer(self._r, dtype=np.float64)
        sig = np.frombuffer(self._sigma, dtype=np.float64)
        mean = self._sum_r_active / self._n_active if self._n_active else self._sum_r_all / size
        dt = now - last[idle]
        if p.decay_grace > 0:
            # The same grace as at an event: decay runs from decay_grace after the last counted
            # event (the activity ring's newest slot), or from the last decay point if later.
            na = p.n_active
            ring = np.frombuffer(self._aring, dtype=np.float64)
            newest = ring[idle * na + (count[idle] - 1) % na]
            dt = np.maximum(0.0, now - np.maximum(last[idle], newest + p.decay_grace * day))
            del ring
        old_r = r[idle]
        new_r = np.clip(mean + (old_r - mean) * np.exp(-dt / (p.tau * day)), self._r_lo, self._r_hi)
        if p.cap_decay:
            new_r = np.clip(new_r, old_r - p.delta_max, old_r + p.delta_max)  # §8.4 over decay
        old_s = sig[idle]
        if p.sweep_sigma:
            new_s = np.minimum(p.sigma_max, old_s + (p.sigma_drift / day) * (now - last[idle]))
        else:
            new_s = old_s  # §5's sigma drift waits for the next event (ADRParams.sweep_sigma)
        r[idle] = new_r
        sig[idle] = new_s
        last[idle] = now
        # The display by _redisplay's rule, for all swept players at once: bounded while
        # returning or catching up (display_cap), else mu - 3 sigma exactly.
        disp = np.frombuffer(self._disp, dtype=np.float64)
        target = new_r - DISPLAY_K * new_s
        if p.display_cap:
            shown = disp[idle]
            returning = np.frombuffer(self._ret, dtype=np.int64)[idle] != 0
            bounded = returning | (shown != old_r - DISPLAY_K * old_s)
            step = np.clip(target - shown, -p.delta_max, p.delta_max)
            target = np.where(bounded, shown + step, target)
        disp[idle] = target
        changed = new_r != old_r
        self._sum_r_all += float(np.sum(new_r - old_r))
        self._sum_sigma += float(np.sum(new_s - old_s))
        act = np.frombuffer(self._active, dtype=np.uint8)[idle].astype(bool)
        if act.any():
            self._sum_r_active += float(np.sum(new_r[act] - old_r[act]))
        del r, sig, last, count, disp  # release the buffers: the columns must stay resizable
        moved_ids = idle[changed].tolist()
        moved_old = old_r[changed].tolist()
        rr = self._r
        if not self._ladder_ok:
            pass  # rebuilt from the ratings when first read
        elif len(moved_ids) > size // 4:
            self._ladder = self._ladder_from_ratings()
        else:
            move = self._ladder.move
            for i, old in zip(moved_ids, moved_old, strict=True):
                move(-old, -rr[i], i)
        tier = self._tier
        bounds = self._bounds
        for i in moved_ids:
            k = tier[i]
            if k and not bounds[k] <= rr[i] < bounds[k - 1]:
                self._tiers_after_event(i, rr[i], self._sigma[i])
        return len(moved_ids)

    # ------------------------------------------------------------------ seasons
    def band_anchor(self, k: int) -> float:
        """The centre of tier band ``k`` (1..15) in internal units (seed 001 §4.1 mu_target).

        Tier k spans [B_k, B_{k-1}). The top band has no upper and the bottom band no lower
        boundary: each is taken as wide as its neighbour (1H as wide as 1M, 5L as 5M), so its
        centre lies half that width beyond its one boundary (docs/adr.md "Season resets").
        """
        b = self._bounds
        if k == 1:
            return b[1] + (b[1] - b[2]) / 2.0
        if k == TIER_COUNT:
            return b[TIER_COUNT - 1] - (b[TIER_COUNT - 2] - b[TIER_COUNT - 1]) / 2.0
        return (b[k] + b[k - 1]) / 2.0

    def season_reset(self, alpha: float, lam: float) -> None:
        """Seed 001 §4.1 season reset of every player, then placement restarts (§6.1).

        sigma <- min(sigma_max, alpha sigma); mu <- (1 - lam) mu + lam mu_anchor, mu_anchor the
        centre of the player's tier band (an unplaced player: the band its rating lies in). Every
        player becomes unplaced with empty accumulators and places again after n_min events of
        the new season with sigma <= sigma_place. Ratings, streaks, trends and the cooldown
        otherwise carry over; the boundaries stay and keep recalibrating.
        """
        if not (alpha >= 1.0 and 0.0 <= lam <= 1.0 and isfinite(alpha)):
            raise ValueError(f"season reset needs alpha >= 1 and lambda in [0, 1], got {alpha!r}, {lam!r}")
        p = self.params
        size = len(self.names)
        rr = self._r
        ss = self._sigma
        tier = self._tier
        neg = self._neg_bounds
        anchors = [self.band_anchor(k) for k in range(1, TIER_COUNT + 1)]
        lo, hi = self._r_lo, self._r_hi
        smax = p.sigma_max
        for i in range(size):
            was = rr[i] - DISPLAY_K * ss[i]
            k = tier[i] or 1 + bisect_left(neg, -rr[i])
            r = (1.0 - lam) * rr[i] + lam * anchors[k - 1]
            rr[i] = lo if r < lo else hi if r > hi else r
            s = alpha * ss[i]
            ss[i] = s if s < smax else smax
            self._redisplay(i, was)
        self._tier = bytearray(size)
        self._tier_counts = [0] * (TIER_COUNT + 1)
        self._tier_active = [0] * (TIER_COUNT + 1)
        self._h = array("d", bytes(8 * size))
        self._n0 = array("q", self._n)
        self._ladder = self._ladder_from_ratings()
        self._ladder_ok = True
        self._resum()

    def _resum(self) -> None:
        """Population sums recomputed exactly from the columns."""
        r = np.frombuffer(self._r, dtype=np.float64)
        mask = np.frombuffer(self._active, dtype=np.uint8).astype(bool)
        self._sum_r_all = math.fsum(r.tolist()) if len(r) < _FSUM_BELOW else float(np.sum(r))
        self._sum_r_active = float(np.sum(r[mask])) if self._n_active else 0.0
        self._sum_sigma = float(np.sum(np.frombuffer(self._sigma, dtype=np.float64)))

    def placement_events(self, i: int) -> int:
        """Events that count toward §6.1 placement: all of them, or this season's after a reset."""
        return self._n[i] if self._n0 is None else self._n[i] - self._n0[i]

    def copy(self) -> Engine:
        """An independent engine in exactly this state (a season carries over from it)."""
        return Engine.from_state(self.export_state(), self.params, native=self.native)

    def plan_recalibration(self, now: float) -> RecalibrationPlan:
        """Step 2 (reads only, numpy; safe in a worker thread while others only read).

        The same numbers, bit for bit, as ``plan_recalibration_reference`` (the plain numpy
        version, and the path for the rare cases below), without temporaries the size of the
        population: each of those is fresh memory whose page faults cost more than the arithmetic
        (the daemon pins glibc's mmap threshold, alloc.py), 2.9 ms against 0.9-1.0 ms at 100k
        players, and in the daemon the loop waits for the GIL while this runs
        (docs/performance.md, "Query latency under ingest"). The active ratings go to a buffer
        kept between calls; the §6.3 quantiles select order statistics in it in place.
        """
        p = self.params
        if len(self._r) < _FSUM_BELOW:
            return self.plan_recalibration_small(now)
        r = np.frombuffer(self._r, dtype=np.float64)
        mask = np.frombuffer(self._active, dtype=np.bool_)  # the column holds only 0 and 1
        k = int(np.count_nonzero(mask))
        # Few players (fsum), nobody active (the quantiles would be over everyone) or counts out
        # of step: the plain version.
        if len(r) < _FSUM_BELOW or k == 0 or k != self._n_active:
            return self.plan_recalibration_reference(now)
        active = self._active_buffer(k)
        np.compress(mask, r, out=active)
        offset, r_lo, r_hi = self.offset, self._r_lo, self._r_hi
        if p.anchor:
            offset = p.mu0 - float(np.mean(active))
            r_lo = p.mu_min - offset
            r_hi = p.mu_max - offset
            # Anyone beyond the shifted bounds would be clamped first: the plain version, which
            # sums the clamped ratings. Otherwise clamping changes nothing and r is summed as is.
            if not (float(r.min()) >= r_lo and float(r.max()) <= r_hi):
                return self.plan_recalibration_reference(now)
        bounds: list[float] | None = None
        sum_r_active = float(np.sum(active))  # before the selection below reorders the buffer
        if k >= p.p_min:
            index = _inverted_cdf_index(k, self._tier_levels())
            active.partition(index)
            bounds = self._smoothed_bounds(active[index].tolist())
        return RecalibrationPlan(
            now=now,
            offset=offset,
            r_lo=r_lo,
            r_hi=r_hi,
            sum_r_all=float(np.sum(r)),
            sum_r_active=sum_r_active,
            sum_sigma=float(np.sum(np.frombuffer(self._sigma, dtype=np.float64))),
            bounds=bounds,
        )

    def plan_recalibration_small(self, now: float) -> RecalibrationPlan:
        """``plan_recalibration`` below _FSUM_BELOW players, in plain Python: the same rules as
        ``plan_recalibration_reference`` with every sum exact (math.fsum) and the §6.3 order
        statistics of ``np.quantile(method="inverted_cdf")`` picked from a sorted list.

        numpy's fixed cost per call (about 30 calls) was 0.45 ms a recalibration at 200 players,
        which on a sparse history (a recalibration every few kills) was 98 % of a replay; this is
        about 25 µs. tests/core/test_recalibration_plan.py checks it against the reference.
        """
        p = self.params
        r: list[float] = self._r.tolist()
        active = self._active
        has_active = self._n_active > 0
        offset, r_lo, r_hi = self.offset, self._r_lo, self._r_hi
        if p.anchor:
            basis = list(compress(r, active)) if has_active else r
            offset = p.mu0 - math.fsum(basis) / len(basis)
            r_lo = p.mu_min - offset
            r_hi = p.mu_max - offset
            if min(r) < r_lo or max(r) > r_hi:  # as they will be once the shift has clamped them
                r = [r_lo if x < r_lo else r_hi if x > r_hi else x for x in r]
        active_r = list(compress(r, active)) if has_active else r
        bounds: list[float] | None = None
        k = len(active_r)
        if k >= p.p_min:
            ordered = sorted(active_r)
            bounds = self._smoothed_bounds([ordered[j] for j in _inverted_cdf_positions(k, self._levels())])
        return RecalibrationPlan(
            now=now,
            offset=offset,
            r_lo=r_lo,
            r_hi=r_hi,
            sum_r_all=math.fsum(r),
            sum_r_active=math.fsum(active_r) if has_active else 0.0,
            sum_sigma=math.fsum(self._sigma),
            bounds=bounds,
        )

    def _levels(self) -> tuple[float, ...]:
        """``_tier_levels`` in Python floats (np.cumsum adds in order, as _levels_of does)."""
        return _levels_of(self.params.tier_proportions)

    def _active_buffer(self, k: int) -> npt.NDArray[np.float64]:
        """A view of ``k`` doubles of the kept buffer, grown by a quarter when too small."""
        buf = self._scratch
        if buf is None or len(buf) < k:
            buf = self._scratch = np.empty(k + k // 4 + 1024, dtype=np.float64)
        return buf[:k]

    def _smoothed_bounds(self, target: list[float]) -> list[float]:
        """§6.3 EMA smoothing of new boundaries B_1..B_14 toward ``target``. The first
        calibration replaces the prior boundaries outright (docs/adr.md)."""
        beta = 1.0 if self.calibrations == 0 else self.params.beta
        old = self._bounds[1:TIER_COUNT]
        return [(1.0 - beta) * o + beta * g for o, g in zip(old, target, strict=True)]

    def _tier_levels(self) -> npt.NDArray[np.float64]:
        """§6.3: the quantile levels 1 - q_k of the 14 tier boundaries."""
        q = np.cumsum(np.asarray(self.params.tier_proportions, dtype=np.float64))[: TIER_COUNT - 1]
        return np.clip(1.0 - q, 0.0, 1.0)

    def plan_recalibration_reference(self, now: float) -> RecalibrationPlan:
        """``plan_recalibration`` in plain numpy: the reference it is tested against, and its path
        for few players, nobody active, or ratings the new bounds clamp."""
        p = self.params
        r = np.frombuffer(self._r, dtype=np.float64)
        sigma = np.frombuffer(self._sigma, dtype=np.float64)
        mask = np.frombuffer(self._active, dtype=np.uint8).astype(bool)
        has_active = self._n_active > 0
        offset, r_lo, r_hi = self.offset, self._r_lo, self._r_hi
        if p.anchor:
            offset = p.mu0 - float(np.mean(r[mask] if has_active else r))
            r_lo = p.mu_min - offset
            r_hi = p.mu_max - offset
            # The ratings as they will be once the shift has clamped the few beyond the bounds.
            r = np.clip(r, r_lo, r_hi)
        active_r = r[mask] if has_active else r
        bounds: list[float] | None = None
        if len(active_r) >= p.p_min:
            # §6.3: B_k = F^-1(1 - q_k) over the active population, then EMA smoothing.
            bounds = self._smoothed_bounds(
                np.quantile(active_r, self._tier_levels(), method="inverted_cdf").tolist()
            )
        # Exact sums, so incremental rounding never accumulates between recalibrations.
        return RecalibrationPlan(
            now=now,
            offset=offset,
            r_lo=r_lo,
            r_hi=r_hi,
            sum_r_all=math.fsum(r.tolist()) if len(r) < _FSUM_BELOW else float(np.sum(r)),
            sum_r_active=float(np.sum(r[mask])) if has_active else 0.0,
            sum_sigma=float(np.sum(sigma)),
            bounds=bounds,
        )

    def finish_recalibration(self, plan: RecalibrationPlan) -> None:
        """Step 3 (mutates): apply the shift, clamp, sums and boundaries of a plan."""
        if self.params.anchor:
            self.offset = plan.offset
            self._r_lo = plan.r_lo
            self._r_hi = plan.r_hi
            self._clamp_to_bounds()
        self._sum_r_all = plan.sum_r_all
        self._sum_r_active = plan.sum_r_active
        self._sum_sigma = plan.sum_sigma
        if plan.bounds is not None:
            self._bounds = [_INF, *plan.bounds, -_INF]
            self._neg_bounds = [-x for x in plan.bounds]
            self.calibrations += 1

    def _clamp_to_bounds(self) -> None:
        """After an anchor shift, pull any rating outside [mu_min, mu_max] back onto the bound.

        Only the ends of the ladder can be out of bounds, so this touches just those players.
        """
        r = self._r
        if not self._ladder_ok:
            # A deferred index is rebuilt only when someone is out of bounds (rarely).
            rr = np.frombuffer(r, dtype=np.float64)
            out = bool(rr.size) and (rr.max() > self._r_hi or rr.min() < self._r_lo)
            del rr  # release the buffer: the column must stay resizable
            if not out:
                return
        ladder = self._index()
        for hi_side in (True, False):
            while ladder:
                _, i = ladder.first() if hi_side else ladder.last()
                old = r[i]
                target = self._r_hi if hi_side else self._r_lo
                if (old <= target) if hi_side else (old >= target):
                    break
                r[i] = target
                self._redisplay(i, old - DISPLAY_K * self._sigma[i])
                ladder.move(-old, -target, i)
                self._sum_r_all += target - old
                if self._active[i]:
                    self._sum_r_active += target - old

    # ------------------------------------------------------------------ queries
    def mu(self, i: int) -> float:
        return self._r[i] + self.offset

    def sigma(self, i: int) -> float:
        return self._sigma[i]

    def ids_of(self, names: Sequence[str]) -> npt.NDArray[np.int64]:
        """Each name's id, -1 where the name was never seen.

        In C where built: a forked web reader (docs/web.md "Readers") shares this index with the
        daemon copy-on-write, and a Python lookup increfs the int it finds, a write that copies
        the page it lies on; the C lookup only reads. The comprehension is its reference."""
        if _c_ids_of is not None:
            return np.frombuffer(_c_ids_of(self.ids, names), dtype=np.int64)
        get = self.ids.get
        return np.array([get(n, -1) for n in names], dtype=np.int64)

    def row_columns(
        self, ids: Sequence[int] | npt.NDArray[np.int64]
    ) -> tuple[list[float], list[float], list[float], list[int], list[int], list[int]]:
        """For each id: mu, sigma, the display rating, the tier index (0 unplaced), active (0/1)
        and the competition rank, as ``mu``, ``sigma``, ``display``, ``rank``... would give them.

        One numpy gather per column instead of an accessor call per player and column: a
        256-player batch answer or a 500-row leaderboard reads six columns at random places of
        a million-player ladder, and the calls, not the reads, were most of its cost."""
        if not len(ids):
            return [], [], [], [], [], []
        # int64: Ladder.ranks takes the ids as a buffer of them.
        idx = (
            np.asarray(ids, dtype=np.int64)
            if isinstance(ids, np.ndarray)
            else np.fromiter(ids, dtype=np.int64, count=len(ids))
        )
        # Views of the columns, dropped before returning: an array that exports its buffer
        # cannot grow, and a newcomer must be able to join at the next event.
        r = np.frombuffer(self._r, dtype=np.float64)[idx]
        sigma = np.frombuffer(self._sigma, dtype=np.float64)[idx].tolist()
        disp = (np.frombuffer(self._disp, dtype=np.float64)[idx] + self.offset).tolist()
        tier = np.frombuffer(self._tier, dtype=np.uint8)[idx].tolist()
        active = np.frombuffer(self._active, dtype=np.uint8)[idx].tolist()
        # With the ids, an unchanged ladder (a forked reader's) answers from its rank column.
        rank = self._index().ranks((-r).tolist(), idx)
        return (r + self.offset).tolist(), sigma, disp, tier, active, rank

    def tier_index(self, name: str) -> int:
        """Tier of a player by name: 1..15, 0 when unplaced or unknown."""
        i = self.ids.get(name)
        return 0 if i is None else self._tier[i]

    def tier_of(self, i: int) -> str | None:
        k = self._tier[i]
        return TIER_NAMES[k - 1] if k else None

    def rank(self, i: int) -> int:
        """1-based ladder position; equal ratings share the better rank (competition ranking)."""
        return self._index().count_below(-self._r[i]) + 1

    def percentile(self, i: int) -> float:
        """Share of tracked players rated strictly below this one, plus half of the ties, in %."""
        key = -self._r[i]
        ladder = self._index()
        above = ladder.count_below(key)
        through = ladder.count_at_most(key)
        total = len(self.names)
        below = total - through
        if total <= 1:
            return 100.0
        return 100.0 * (below + 0.5 * (through - above - 1)) / (total - 1)

    def top(self, n: int, offset: int = 0) -> list[int]:
        """Player ids of ladder positions offset+1 .. offset+n, best first."""
        if n <= 0 or offset < 0:
            return []
        return list(self._index().islice(offset, offset + n))

    def around(self, i: int, n: int) -> list[int]:
        """Up to ``n`` players above and ``n`` below player ``i``, with ``i`` itself, best first."""
        ladder = self._index()
        pos = ladder.index(-self._r[i], i)
        return list(ladder.islice(max(0, pos - n), pos + n + 1))

    def ladder_ids(self) -> Iterator[int]:
        """Every player id, best first."""
        yield from self._index()

    def defer_ladder(self) -> None:
        """Stop keeping the ladder index in step event by event, for a batch that reads no rank
        until it ends (``arenad replay``, a tuning evaluation): re-keying two players per kill is
        about a sixth of the kernel's time at 100,000 players. The first read (rank, top, the
        state file, a recalibration that finds a rating out of bounds) rebuilds the index from
        the ratings and keeps it in step again. Entries are ordered by rating, then id, so the
        rebuilt index is the one that would have been kept (tests/core/test_engine.py)."""
        self._ladder_ok = False

    def keep_ladder(self) -> None:
        """End ``defer_ladder`` now: the index is rebuilt (if it was deferred) and kept in step
        again, so that no later query pays for the rebuild."""
        self._index()

    def _index(self) -> PyLadder | NativeLadder:
        """The ladder index, rebuilt first if it was deferred (``defer_ladder``)."""
        if not self._ladder_ok:
            self._ladder = self._ladder_from_ratings()
            self._ladder_ok = True
        return self._ladder

    def _ladder_from_ratings(self) -> PyLadder | NativeLadder:
        """A ladder index built from the ratings: (-r, id) in the index's order, rating then id,
        sorted by numpy and handed over as two columns (``Ladder.from_sorted``, which checks the
        order): a million players in ~0.1 s, against 0.6 s through a list of (key, id) tuples
        that the index sorted again, and 2.5 s for it to sort them unsorted."""
        keys = -np.frombuffer(self._r, dtype=np.float64)
        order = np.lexsort((np.arange(keys.size), keys))
        return Ladder.from_sorted(keys[order], order.astype(np.int64, copy=False))

    def view(self, i: int) -> PlayerView:
        return PlayerView(
            player=self.names[i],
            mu=self._r[i] + self.offset,
            sigma=self._sigma[i],
            streak=self._streak[i],
            trend=self._phi[i],
            pool=self._pool[i],
            n=self._n[i],
            last_t=self.last_event_time(i),
            tier=self.tier_of(i),
            rank=self.rank(i),
            returning_left=self._ret[i],
            active=bool(self._active[i]),
            display=self._disp[i] + self.offset,
        )

    def last_event_time(self, i: int) -> float | None:
        """Time of player ``i``'s last counted event (the newest slot of its activity ring)."""
        n = self._n[i]
        if not n:
            return None
        na = self.params.n_active
        return self._aring[i * na + (n - 1) % na]

    def is_active(self, i: int) -> bool:
        return bool(self._active[i])

    def predict(self, i: int, j: int) -> float:
        """§3.1 P(i kills j) from stored ratings, the current D(t), the link and the online
        calibration multiplier (docs/adr.md)."""
        return self.predict_gap(self._r[i] - self._r[j])

    def predict_placement(self, i: int, j: int) -> float:
        """P(i finishes a match above j): ``predict`` with the placement pairs' own multiplier
        on top of the kill calibration (ADRParams.placement_calibration; 1 while it is off)."""
        gap = (self._r[i] - self._r[j]) / self._prediction_scale()
        return link_p(self._pcal * (self._cal * gap), self._kc["logistic"])

    def _prediction_scale(self) -> float:
        """§3.2 D(t) = theta + lambda * mean sigma, as every prediction takes it."""
        return self.params.theta + self.params.lambda_ * self.mean_sigma

    @property
    def placement_calibration(self) -> float:
        """The placement pairs' multiplier on top of ``calibration`` (1.0 while off)."""
        return self._pcal

    def predict_gap(self, gap: float) -> float:
        """§3.1 P that a player rated ``gap`` above another kills them: ``predict`` for a rating
        difference rather than two players (team balance compares team means this way)."""
        return link_p(self._cal * (gap / self._prediction_scale()), self._kc["logistic"])

    def position(self, i: int) -> int:
        """0-based place of player ``i`` in the ladder order (``ladder_ids``; ties in id order)."""
        return self._ladder.index(-self._r[i], i)

    def standing(self, i: int) -> tuple[int, int]:
        """(players rated strictly above ``i``, players rated equal to ``i`` with ``i`` itself):
        the counts ``rank`` and ``percentile`` are made of."""
        key = -self._r[i]
        above = self._ladder.count_below(key)
        return above, self._ladder.count_at_most(key) - above

    @property
    def mean_sigma(self) -> float:
        return self._sum_sigma / len(self.names) if self.names else self.params.sigma0

    @property
    def active_count(self) -> int:
        return self._n_active

    def tier_info(self) -> TierInfo:
        return TierInfo(
            boundaries=tuple(b + self.offset for b in self._bounds[1:TIER_COUNT]),
            counts=tuple(self._tier_counts[1:]),
            calibrations=self.calibrations,
            active=self._n_active,
        )

    def active_mean(self) -> float:
        """Visible mean rating of the active set (all players when none is active)."""
        if not self.names:
            return self.params.mu0
        if self._n_active:
            return self._sum_r_active / self._n_active + self.offset
        return self._sum_r_all / len(self.names) + self.offset

    def ladder_is_consistent(self) -> bool:
        """Index and ratings agree: one entry per player, in non-increasing rating order."""
        ids = list(self._index())
        if sorted(ids) != list(range(len(self.names))):
            return False
        r = self._r
        return all(r[ids[j]] >= r[ids[j + 1]] for j in range(len(ids) - 1))

    # ------------------------------------------------------------------ state export / import
    #: Bumped whenever the exported layout changes; import refuses other versions.
    STATE_VERSION = 3

    def export_state(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this engine is, as plain values.

        Columns go out as raw bytes (machine byte order, recorded), so an export of a million
        players is a handful of memory copies. Restoring gives an engine whose future updates
        are bit-identical to this one's: running sums and the expiry heap are kept verbatim.
        """
        cooldown, _ = self._cooldown_py()
        return {
            "version": self.STATE_VERSION,
            "byteorder": sys.byteorder,
            "params": self.params.to_mapping(),
            "names": list(self.names),
            "columns": {name: getattr(self, attr).tobytes() for name, attr in _COLUMNS.items()},
            "tier": bytes(self._tier),
            "active": bytes(self._active),
            "expiry_t": array("d", [h for h, _ in self._expiry]).tobytes(),
            "expiry_i": array("q", [i for _, i in self._expiry]).tobytes(),
            "cooldown_k": array("q", cooldown.keys()).tobytes(),
            "cooldown_t": array("d", cooldown.values()).tobytes(),
            "bounds": self._bounds[1:TIER_COUNT],
            "scalars": {
                "offset": self.offset,
                "r_lo": self._r_lo,
                "r_hi": self._r_hi,
                "clock": self.clock,
                "next_recalibration": self.next_recalibration,
                "recal_applied": self.recal_applied,
                "calibrations": self.calibrations,
                "sum_r_all": self._sum_r_all,
                "sum_r_active": self._sum_r_active,
                "n_active": self._n_active,
                "sum_sigma": self._sum_sigma,
                "applied": self.applied,
                "filtered": self.filtered,
                "late_applied": self.late_applied,
                "tier_changes": self.tier_changes,
                "last_delta_attacker": self.last_delta_attacker,
                "last_delta_victim": self.last_delta_victim,
                "calibration": self._cal,
                "calibration_info": self._cal_info,
                "calibration_steps": self._cal_n,
                "placement_calibration": self._pcal,
                "placement_calibration_info": self._pcal_info,
                "placement_calibration_steps": self._pcal_n,
            },
            "rejected": dict(self.rejected),
            "season": None if self._n0 is None else {"n0": self._n0.tobytes()},
            "sweep": {"next": self.next_sweep, "count": self.sweeps},
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], params: ADRParams | None = None, *, native: bool | None = None
    ) -> Engine:
        """Rebuild an engine from ``export_state``; ``params`` may change the non-structural ones.

        Raises ``ValueError`` when the state is from another layout version, another byte order,
        or when ``window_len`` / ``n_active`` differ (they shape the per-player rings).
        """
        version = state.get("version")
        if version == 2:  # window rings as one full block per player (before the block pool)
            state = _pooled_windows(state)
        elif version != cls.STATE_VERSION:
            raise ValueError(f"state version {version!r}, expected {cls.STATE_VERSION} (or 2)")
        if state.get("byteorder") != sys.byteorder:
            raise ValueError(f"state written on a {state.get('byteorder')}-endian machine")
        saved = ADRParams.from_mapping(state["params"])
        p = params if params is not None else saved
        for key in ("window_len", "n_active"):
            if getattr(p, key) != getattr(saved, key):
                raise ValueError(
                    f"adr.{key} changed from {getattr(saved, key)} to {getattr(p, key)}: the saved "
                    "per-player rings have the old length; replay the event history instead"
                )
        eng = cls(p, native=native)
        names: list[str] = state["names"]
        eng.names = list(names)
        eng.ids = {name: i for i, name in enumerate(names)}
        for name, attr in _COLUMNS.items():
            col = getattr(eng, attr)
            if name in ("disp", "prey") and name not in state["columns"]:
                continue  # a state from before the display or prey column: filled in below
            col.frombytes(state["columns"][name])
        if "prey" not in state["columns"]:
            eng._prey = array("q", bytes(8 * len(names)))  # no runs: every next kill a first
        if "disp" not in state["columns"]:
            eng._disp = array("d", (r - DISPLAY_K * s for r, s in zip(eng._r, eng._sigma, strict=True)))
        eng._tier = bytearray(state["tier"])
        eng._active = bytearray(state["active"])
        size = len(names)
        # Per-player columns; _wring is the window pool, checked against the players' blocks.
        lengths = {attr: len(getattr(eng, attr)) for attr in _COLUMNS.values() if attr != "_wring"}
        _check_window_pool(eng._wslot, len(eng._wring), p.window_len)
        lengths["_aring"] //= p.n_active
        lengths["_tier"] = len(eng._tier)
        lengths["_active"] = len(eng._active)
        if any(n != size for n in lengths.values()):
            raise ValueError(f"state columns disagree with {size} players: {lengths}")
        expiry_t = array("d")
        expiry_t.frombytes(state["expiry_t"])
        expiry_i = array("q")
        expiry_i.frombytes(state["expiry_i"])
        eng._expiry = list(zip(expiry_t, expiry_i, strict=True))
        keys = array("q")
        keys.frombytes(state["cooldown_k"])
        times = array("d")
        times.frombytes(state["cooldown_t"])
        eng._cooldown = dict(zip(keys, times, strict=True))
        eng._cooldown_log = deque(sorted((t, k) for k, t in eng._cooldown.items()))
        bounds = [float(b) for b in state["bounds"]]
        eng._bounds = [_INF, *bounds, -_INF]
        eng._neg_bounds = [-b for b in bounds]
        sc = state["scalars"]
        eng.offset = sc["offset"]
        eng._r_lo = sc["r_lo"]
        eng._r_hi = sc["r_hi"]
        eng.clock = sc["clock"]
        eng.next_recalibration = sc["next_recalibration"]
        eng.recal_applied = int(sc.get("recal_applied", 0))
        eng.calibrations = sc["calibrations"]
        eng._sum_r_all = sc["sum_r_all"]
        eng._sum_r_active = sc["sum_r_active"]
        eng._n_active = sc["n_active"]
        eng._sum_sigma = sc["sum_sigma"]
        eng.applied = sc["applied"]
        eng.filtered = sc["filtered"]
        eng.late_applied = sc["late_applied"]
        eng.tier_changes = sc["tier_changes"]
        eng.last_delta_attacker = sc["last_delta_attacker"]
        eng.last_delta_victim = sc["last_delta_victim"]
        # absent before issue 14: c = 1; with the calibration off now, c = 1 as in a new engine
        # (a saved c would otherwise scale every prediction forever, never stepping again)
        eng._cal = float(sc.get("calibration", 1.0)) if p.calibration_memory else 1.0
        eng._cal_info = float(sc.get("calibration_info", CAL_PRIOR))
        # Absent before the warm-up: a state that has a calibration has passed its warm-up.
        eng._cal_n = float(sc.get("calibration_steps", _INF if "calibration" in sc else 0.0))
        # absent before the placement calibration: pairs start at 1, as in a new engine; and
        # with it off now (or no calibration at all), a saved multiplier is not applied
        if p.placement_calibration and p.calibration_memory:
            eng._pcal = float(sc.get("placement_calibration", 1.0))
            eng._pcal_info = float(sc.get("placement_calibration_info", CAL_PRIOR))
            eng._pcal_n = float(sc.get("placement_calibration_steps", 0.0))
        eng.rejected = dict(state["rejected"])
        season = state.get("season")
        if season is not None:
            n0 = array("q")
            n0.frombytes(season["n0"])
            if len(n0) != size:
                raise ValueError(f"state season column has {len(n0)} players, expected {size}")
            eng._n0 = n0
        sweep = state.get("sweep") or {}
        eng.next_sweep = float(sweep.get("next", -_INF))
        eng.sweeps = int(sweep.get("count", 0))
        # The placed players per tier, and the active ones (their total at index 0), counted
        # from the columns in numpy: a Python loop over a million tiers was most of this step.
        tier = np.frombuffer(eng._tier, dtype=np.uint8)
        on = np.frombuffer(eng._active, dtype=np.bool_)  # the column holds only 0 and 1
        counts = np.bincount(tier, minlength=TIER_COUNT + 1).tolist()
        active_counts = np.bincount(tier[on], minlength=TIER_COUNT + 1).tolist()
        del tier, on  # release the buffers: the columns must stay resizable
        counts[0] = 0
        active_counts[0] = sum(active_counts[1:])
        eng._tier_counts = counts
        eng._tier_active = active_counts
        eng._ladder = eng._ladder_from_ratings()
        return eng


#: Exported per-player columns: state-file name -> Engine attribute.
_COLUMNS: dict[str, str] = {
    "r": "_r",
    "sigma": "_sigma",
    "streak": "_streak",
    "phi": "_phi",
    "pool": "_pool",
    "n": "_n",
    "last": "_last",
    "wsum": "_wsum",
    "ret": "_ret",
    "h": "_h",
    "disp": "_disp",
    "prey": "_prey",
    "wslot": "_wslot",
    "wring": "_wring",
    "aring": "_aring",
}

_ZERO_CACHE: dict[int, array[float]] = {}


def _check_window_pool(wslot: array[int], pool: int, wlen: int) -> None:
    """Every block of the pool belongs to exactly one player (a state file is outside input)."""
    used = np.sort(np.frombuffer(wslot, dtype=np.uint32)) if wslot else np.zeros(0, dtype=np.uint32)
    used = used[used > 0]
    blocks = pool // wlen
    if blocks * wlen != pool or not np.array_equal(used, np.arange(1, blocks + 1, dtype=np.uint32)):
        raise ValueError(f"state window pool ({pool} slots) and the players' blocks disagree")


def _pooled_windows(state: dict[str, Any]) -> dict[str, Any]:
    """A version-2 state (one window_len ring per player) in the version-3 layout (a block pool).

    A player keeps a block when its ring is not [wsum, 0, ...] bit for bit; the others hold at
    most their first change, which _wsum already is.
    """
    wlen = ADRParams.from_mapping(state["params"]).window_len
    cols = dict(state["columns"])
    wsum = np.frombuffer(cols["wsum"], dtype=np.float64)
    rings = np.frombuffer(cols["wring"], dtype=np.float64).reshape(len(wsum), wlen)
    implicit = np.zeros_like(rings)
    implicit[:, 0] = wsum
    keep = (rings.view(np.uint64) != implicit.view(np.uint64)).any(axis=1)
    slots = np.zeros(len(wsum), dtype=np.uint32)
    slots[keep] = np.arange(1, int(keep.sum()) + 1, dtype=np.uint32)
    cols["wslot"] = slots.tobytes()
    cols["wring"] = np.ascontiguousarray(rings[keep]).tobytes()
    return {**state, "version": Engine.STATE_VERSION, "columns": cols}


def _zeros(n: int) -> array[float]:
    z = _ZERO_CACHE.get(n)
    if z is None:
        z = _ZERO_CACHE[n] = array("d", bytes(8 * n))
    return z
