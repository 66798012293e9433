"""ADR parameters (paper §9) plus the few choices arenad had to add where the paper is silent.

Every field is validated on construction; a refusal names the key (as written in the ``[adr]``
TOML section) and the bad value. ``ADRParams.from_mapping`` is what the settings loader uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from arenad.errors import ConfigError, ConfigProblem

TIER_COUNT = 15
#: §6.2 tier order, highest first; index k-1 holds tier k.
TIER_NAMES: tuple[str, ...] = (
    "1H", "1M", "1L", "2H", "2M", "2L", "3H", "3M", "3L",
    "4H", "4M", "4L", "5H", "5M", "5L",
)  # fmt: skip

LoserRule = Literal["corrected", "printed"]
Link = Literal["arctan", "logistic"]
Preset = Literal["default", "paper"]
PoolRelease = Literal["transfer", "literal"]
PlayerCapPolicy = Literal["refuse_new"]

#: Largest ``max_players``: the engine packs two player ids into one 64-bit cooldown key.
PLAYER_ID_LIMIT = 1 << 32


def _uniform() -> tuple[float, ...]:
    return tuple(1.0 / TIER_COUNT for _ in range(TIER_COUNT))


@dataclass(frozen=True, slots=True)
class ADRParams:
    """All ADR parameters. Defaults are the paper's §9 table unless marked as an arenad choice."""

    # §2.2 / §4.2 / §7.1 skill
    mu0: float = 1000.0
    mu_min: float = 0.0
    mu_max: float = 4000.0
    # §4.3 uncertainty
    sigma0: float = 350.0
    sigma_min: float = 10.0
    sigma_max: float = 400.0
    gamma: float = 150.0  # paper §9: 100 (docs/adr.md "Newcomers faster, veterans slower")
    # §8.1 peak-shaped base learning rate (replaces the K_sigma form of §4.1)
    sigma_peak: float = 250.0  # paper §9: 200 (docs/adr.md "Defaults by measurement")
    eta_min: float = 0.0  # paper §9: 4 (docs/adr.md "Newcomers faster, veterans slower")
    eta_max: float = 40.0
    # §4.1 rate modifiers
    rho_s: float = 0.0  # paper §9: 0.15 (docs/adr.md "Defaults by measurement")
    s_max: int = 5
    rho_v: float = 0.3
    w_ref: float = 20.0
    gamma_phi: float = 0.0  # paper §9: 0.3
    lambda_phi: float = 0.2
    c_loss: float = 1.0  # paper §9: 0.8
    # §2.1 cooldown, seconds
    t_cooldown: float = 60.0
    # §3.2 diffusion: D = theta + lambda * mean sigma
    theta: float = 200.0  # paper §9: 400
    lambda_: float = 0.5
    # §5 decay: tau in days, sigma_drift per day
    tau: float = 30.0
    sigma_drift: float = 5.0
    # §8 returning players: t_return in days
    t_return: float = 60.0
    alpha: float = 0.7
    lambda_pool: float = 0.2
    nu_min: float | None = None  # None: -delta_max (§9)
    nu_max: float | None = None  # None: +delta_max (§9)
    delta_max: float = 60.0
    # §6 placement and tiers
    n_min: int = 15
    sigma_place: float = 180.0
    t_active: float = 7.0  # days
    n_active: int = 5
    p_min: int = 20
    h_req: float = 250.0  # paper §9: 400
    #: §6.4's threshold bends toward the tier targets p_k: a move that brings the two tiers'
    #: counts of active placed players nearer their targets (the source's excess over p_k * N
    #: beats the destination's by more than one player) needs h_req * (1 - tier_pull), any other
    #: move h_req * (1 + tier_pull). 0 = h_req for every move (the paper). A player still moves
    #: only to the tier its rating has reached. docs/adr.md "Tiers that lean toward their targets".
    tier_pull: float = 0.75
    beta: float = 0.2
    window_len: int = 20  # the paper's L
    tier_proportions: tuple[float, ...] = field(default_factory=_uniform)  # the paper's p_k
    day_seconds: float = 86400.0  # the paper's T_day, with event times in seconds

    # ---- arenad choices where the paper contradicts itself or is silent (docs/adr.md) ----
    #: §4.2 victim update: "corrected" = -eta_b (1 - P_ab), "printed" = -eta_b P_ab as printed.
    loser_rule: LoserRule = "corrected"
    #: Keep the active mean at mu0 by a uniform O(1) shift at each recalibration.
    anchor: bool = True
    #: §8.3 pool: "transfer" moves what is released out of the pool; "literal" never drains it.
    pool_release: PoolRelease = "transfer"
    #: Counted events a returning player spends under §8.2/§8.3 (0: n_min).
    return_events: int = 0
    #: Whether the victim's loss of a returning player goes through §8.2/§8.3 as well.
    pool_losses: bool = True
    #: Boundaries before the first calibration are normal quantiles around mu0 with this spread.
    initial_spread: float = 200.0
    #: Event-time seconds between recalibrations (§6.3), the anchor and cooldown pruning.
    recalibrate_interval: float = 300.0
    #: A recalibration also waits until this many kills were applied since the last one (0: time
    #: alone). On a sparse history (a few kills per interval) the O(P) recalibration otherwise
    #: runs every few kills and is most of a replay (docs/performance.md "Batch replay").
    recalibrate_min_events: int = 0
    #: An event older than the engine clock by at most this is applied at the clock; older: rejected.
    late_tolerance: float = 5.0
    #: Most players the engine tracks; an event that would add one beyond it is refused
    #: (docs/adr.md "A cap on tracked players"). A cap always exists: ids are invented for free.
    max_players: int = 2_000_000
    #: What happens at the cap: "refuse_new" rejects the event (reason ``player_cap``).
    player_cap_policy: PlayerCapPolicy = "refuse_new"
    #: §5 decay on/off. Off for event scopes (a tournament is a fixed window: seed 003).
    decay: bool = True
    #: Inactivity sweep (issue 6, docs/adr.md): players idle for more than ``idle_after`` days
    #: get the §5 decay applied at the sweep instead of only at their next event, so ghosts leave
    #: the top of the ladder and their tiers. 0 = off (the paper's lazy decay only).
    idle_after: float = 7.0  # paper: 0 (no sweep)
    #: Event-time seconds between two sweeps; a sweep runs at the first recalibration after it.
    sweep_interval: float = 86400.0

    # ---- calibration and safeguards beyond the paper (issue 14, docs/adr.md) --------------
    #: §3.1 link: "arctan" as printed (heavy tails: P = 0.98 needs a gap of 16 D), or
    #: "logistic" with the arctan's slope at 50/50, 1/(1 + exp(-4 x / (pi D))).
    link: Link = "logistic"
    #: Online maximum-likelihood multiplier c on the link's argument, for predictions only: after
    #: every kill (cooldown repeats included) one Newton step, c += (d log P / dc) / I, with I the
    #: Fisher information of the last ``calibration_memory`` kills (forgetting 1 - 1/memory),
    #: c in [1/8, 8]. 0 = off (c = 1, the paper's §3.1 probabilities).
    calibration_memory: float = 5000.0
    #: The calibration's warm-up: while ``calibration_warmup`` * n < ``calibration_memory`` (n the
    #: calibration steps so far) the forgetting is 1 - 1/max(20, warmup * n) instead of
    #: 1 - 1/memory, so a young c follows the ratings' spread as it grows instead of averaging
    #: over it (1: an effective memory of min(n, memory)). 0 = the memory from the first kill.
    calibration_warmup: float = 1.0
    #: c before the first kill (the ratings' spread is still small then: the memory alone puts c
    #: at 2.5-4.4 within the real logs' first 100-300 kills, 3.0 at an eighth of §10.7).
    #: Ignored while calibration_memory is 0.
    calibration_start: float = 3.0
    #: §5 decay starts this many days after a player's last counted event (0 = the paper:
    #: every gap decays, which pulls every active player toward the mean at 1/tau per day).
    decay_grace: float = 7.0
    #: §8.4 cap over the whole visible change of an event, §5 decay included (the paper caps
    #: only the update, so a return could move a rating by hundreds of points at once).
    cap_decay: bool = True
    #: The inactivity sweep drifts sigma too (true) or leaves §5's sigma drift to the player's
    #: next event (false), so the display rating mu - 3 sigma of a ghost does not sink and then
    #: jump back by 3 * (sigma_max - sigma) at its first kill back.
    sweep_sigma: bool = False
    #: Match placements (seed 001 §2): each (better, worse) pair of a finished match is an
    #: update at this weight divided by (players - 1). 0 = kills only (the paper).
    placement_weight: float = 1.0
    #: A placement pair ("a finishes above b") is predicted with its own online multiplier on
    #: top of the kill calibration, learnt like it (calibration_memory, calibration_warmup) from
    #: the pairs of each match ADR learns, before it learns them: a match's order is an outcome
    #: of many kills, so it is far more predictable than one kill at the same rating gap.
    #: Predictions only. false = pairs predicted as kills (the paper has no placements).
    #: docs/adr.md "Predicting a match's order".
    placement_calibration: bool = True
    #: The display rating mu - 3 sigma (seed 002's conservative rating) moves by at most
    #: delta_max per event, like the rating (§8.4): sigma collapsing at a player's first kill
    #: back would otherwise move it by 3 * (its drop). false: exactly mu - 3 sigma (the paper).
    display_cap: bool = True
    #: §2.1 repeats inside the cooldown: 0 = dropped (the paper); w > 0 = learnt at weight
    #: w * (time since the pair's last counted kill) / t_cooldown.
    repeat_weight: float = 0.0
    #: Counted kills of the same victim in a row (§2.1 extended past the cooldown): the k-th
    #: repeat of an attacker's last victim learns at (1 - P) + P / (1 + k / farm_damping), both
    #: sides of the pair, P the kill's probability (an expected kill is damped, an upset is
    #: not); a kill of anyone else, or the victim killing back, ends the run. 0 = every counted
    #: kill at full weight (the paper). docs/adr.md "Farming past the cooldown".
    farm_damping: float = 10.0

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError(problems)

    # -- derived ---------------------------------------------------------------------------
    @property
    def pool_low(self) -> float:
        """§8.3 nu_min, defaulting to -delta_max."""
        return -self.delta_max if self.nu_min is None else self.nu_min

    @property
    def pool_high(self) -> float:
        """§8.3 nu_max, defaulting to +delta_max."""
        return self.delta_max if self.nu_max is None else self.nu_max

    @property
    def returning_events(self) -> int:
        return self.return_events if self.return_events > 0 else max(1, self.n_min)

    # -- validation ------------------------------------------------------------------------
    def problems(self) -> list[ConfigProblem]:
        """Every invalid value, each with its TOML key; empty when the set is valid."""
        out: list[ConfigProblem] = []

        def bad(name: str, message: str) -> None:
            out.append(ConfigProblem(f"adr.{_toml_key(name)}", getattr(self, name), message))

        for f in fields(self):
            value = getattr(self, f.name)
            kind = _KINDS.get(f.name)
            if kind is float:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    bad(f.name, "must be a number")
                elif not _finite(value):
                    bad(f.name, "must be finite")
            elif kind is int:
                if isinstance(value, bool) or not isinstance(value, int):
                    bad(f.name, "must be an integer")
            elif kind is bool and not isinstance(value, bool):
                bad(f.name, "must be true or false")
            elif f.name in ("nu_min", "nu_max") and value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    bad(f.name, "must be a number (or left out for -/+ delta_max)")
                elif not _finite(value):
                    bad(f.name, "must be finite")
        # Range checks read a view where each wrongly typed value is replaced by its default,
        # so one type error does not hide the range errors of the other keys.
        mistyped = {_FIELD_OF[p.key.removeprefix("adr.")] for p in out}
        v = _Checked(self, mistyped)

        def need(cond: bool, name: str, message: str) -> None:
            if not cond and name not in mistyped:
                bad(name, message)

        need(v.mu_min < v.mu_max, "mu_max", "must be greater than mu_min")
        need(v.mu_min <= v.mu0 <= v.mu_max, "mu0", "must lie in [mu_min, mu_max]")
        need(v.sigma_min > 0, "sigma_min", "must be > 0")
        need(v.sigma_min <= v.sigma_max, "sigma_max", "must be >= sigma_min")
        need(
            v.sigma_min <= v.sigma0 <= v.sigma_max,
            "sigma0",
            "must lie in [sigma_min, sigma_max]",
        )
        need(v.gamma > 0, "gamma", "must be > 0")
        need(v.sigma_peak > 0, "sigma_peak", "must be > 0")
        need(v.eta_min >= 0, "eta_min", "must be >= 0")
        need(v.eta_max >= v.eta_min, "eta_max", "must be >= eta_min")
        for name in ("rho_s", "rho_v", "gamma_phi", "lambda_", "sigma_drift", "t_cooldown"):
            need(getattr(v, name) >= 0, name, "must be >= 0")
        need(v.s_max >= 0, "s_max", "must be >= 0")
        need(v.w_ref > 0, "w_ref", "must be > 0")
        need(0 < v.lambda_phi <= 1, "lambda_phi", "must lie in (0, 1]")
        need(0 < v.c_loss <= 1, "c_loss", "must lie in (0, 1]")
        need(v.theta > 0, "theta", "must be > 0")
        need(v.tau > 0, "tau", "must be > 0 (days)")
        need(v.t_return > 0, "t_return", "must be > 0 (days)")
        need(0 <= v.alpha <= 1, "alpha", "must lie in [0, 1]")
        need(0 < v.lambda_pool <= 1, "lambda_pool", "must lie in (0, 1]")
        need(v.delta_max > 0, "delta_max", "must be > 0")
        need(v.pool_low <= 0, "nu_min", "must be <= 0")
        need(v.pool_high >= 0, "nu_max", "must be >= 0")
        need(v.n_min >= 0, "n_min", "must be >= 0")
        need(
            v.sigma_min <= v.sigma_place,
            "sigma_place",
            "must be >= sigma_min, or no player could ever be placed",
        )
        need(v.t_active > 0, "t_active", "must be > 0 (days)")
        need(v.n_active >= 1, "n_active", "must be >= 1")
        need(v.p_min >= 1, "p_min", "must be >= 1")
        need(v.h_req >= 0, "h_req", "must be >= 0")
        need(0 <= v.tier_pull < 1, "tier_pull", "must lie in [0, 1) (0: the paper's one threshold)")
        need(0 < v.beta <= 1, "beta", "must lie in (0, 1]")
        need(1 <= v.window_len <= 10_000, "window_len", "must lie in [1, 10000]")
        need(v.day_seconds > 0, "day_seconds", "must be > 0")
        need(v.loser_rule in ("corrected", "printed"), "loser_rule", 'must be "corrected" or "printed"')
        need(v.pool_release in ("transfer", "literal"), "pool_release", 'must be "transfer" or "literal"')
        need(v.return_events >= 0, "return_events", "must be >= 0 (0 means n_min)")
        need(v.initial_spread > 0, "initial_spread", "must be > 0")
        need(v.recalibrate_interval > 0, "recalibrate_interval", "must be > 0 (seconds)")
        need(v.recalibrate_min_events >= 0, "recalibrate_min_events", "must be >= 0 (0: time alone)")
        need(v.late_tolerance >= 0, "late_tolerance", "must be >= 0 (seconds)")
        need(v.idle_after >= 0, "idle_after", "must be >= 0 (days; 0 turns the inactivity sweep off)")
        need(v.sweep_interval > 0, "sweep_interval", "must be > 0 (seconds)")
        need(v.link in ("arctan", "logistic"), "link", 'must be "arctan" or "logistic"')
        need(
            v.calibration_memory == 0 or v.calibration_memory >= 1,
            "calibration_memory",
            "must be 0 (off) or >= 1 (kills)",
        )
        need(
            v.calibration_warmup >= 0,
            "calibration_warmup",
            "must be >= 0 (0: the calibration's memory from the first kill)",
        )
        need(
            0.125 <= v.calibration_start <= 8.0,
            "calibration_start",
            "must lie in [0.125, 8] (the calibration's range)",
        )
        need(v.decay_grace >= 0, "decay_grace", "must be >= 0 (days)")
        need(0 <= v.placement_weight <= 1, "placement_weight", "must lie in [0, 1] (0: kills only)")
        need(0 <= v.repeat_weight <= 1, "repeat_weight", "must lie in [0, 1] (0: the paper's filter)")
        need(v.farm_damping >= 0, "farm_damping", "must be >= 0 (0: no damping, the paper)")
        need(
            2 <= v.max_players <= PLAYER_ID_LIMIT,
            "max_players",
            f"must lie in [2, {PLAYER_ID_LIMIT}] (there is no unlimited setting)",
        )
        need(
            v.player_cap_policy == "refuse_new",
            "player_cap_policy",
            'must be "refuse_new" (the only policy offered, docs/adr.md)',
        )
        p = v.tier_proportions
        if not isinstance(p, tuple) or len(p) != TIER_COUNT:
            bad("tier_proportions", f"must be a list of {TIER_COUNT} numbers (1H first)")
        elif any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in p):
            bad("tier_proportions", "every entry must be a number")
        elif any(not _finite(x) or x < 0 for x in p):
            bad("tier_proportions", "every entry must be finite and >= 0")
        elif abs(math.fsum(p) - 1.0) > 1e-6:
            bad("tier_proportions", f"must sum to 1 (sums to {math.fsum(p)!r})")
        return out

    # -- construction from TOML --------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], section: str = "adr") -> ADRParams:
        """Build from a TOML table; unknown keys and bad values are all reported at once."""
        known = {_toml_key(f.name): f.name for f in fields(cls)}
        problems: list[ConfigProblem] = []
        kwargs: dict[str, Any] = {}
        preset = data.get("preset", "default")
        if preset == "paper":
            kwargs.update(PAPER)
        elif preset != "default":
            problems.append(ConfigProblem(f"{section}.preset", preset, 'must be "default" or "paper"'))
        for key, raw in data.items():
            if key == "preset":
                continue
            name = known.get(key)
            if name is None:
                problems.append(ConfigProblem(f"{section}.{key}", raw, "unknown key"))
                continue
            value = raw
            if name == "tier_proportions" and isinstance(raw, list):
                value = tuple(raw)
            if (
                _KINDS.get(name) is float
                and isinstance(raw, int)
                and not isinstance(raw, bool)
                and _finite(raw)
            ):
                value = float(raw)
            kwargs[name] = value
        try:
            params = cls(**kwargs)
        except ConfigError as e:
            for p in e.problems:
                p_key = p.key.replace("adr.", f"{section}.", 1)
                problems.append(ConfigProblem(p_key, p.value, p.message))
        if problems:
            raise ConfigError(problems)
        return params

    @classmethod
    def paper(cls, **overrides: Any) -> ADRParams:
        """The paper's §9 configuration (``[adr] preset = "paper"``, model ``adr-paper``)."""
        return cls(**{**PAPER, **overrides})

    def to_mapping(self) -> dict[str, Any]:
        """The TOML form (keys as in ``[adr]``), omitting unset optional keys."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            out[_toml_key(f.name)] = list(v) if isinstance(v, tuple) else v
        return out


def _finite(x: float) -> bool:
    # TOML integers are unbounded: one beyond the float range is not a finite rating value.
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


class _Checked:
    """Field access for range checks: mistyped fields read as their defaults."""

    def __init__(self, params: ADRParams, mistyped: set[str]) -> None:
        self._params = params
        self._mistyped = mistyped

    def __getattr__(self, name: str) -> Any:
        if name in self._mistyped:
            return _DEFAULTS[name]
        if name == "pool_low":
            low = self.nu_min
            return -self.delta_max if low is None else low
        if name == "pool_high":
            high = self.nu_max
            return self.delta_max if high is None else high
        return getattr(self._params, name)


def _toml_key(name: str) -> str:
    # `lambda` is a Python keyword, so the field carries a trailing underscore.
    return "lambda" if name == "lambda_" else name


_KINDS: dict[str, type] = {}
for _f in fields(ADRParams):
    if _f.type in ("float", float):
        _KINDS[_f.name] = float
    elif _f.type in ("int", int):
        _KINDS[_f.name] = int
    elif _f.type in ("bool", bool):
        _KINDS[_f.name] = bool

_FIELD_OF: dict[str, str] = {_toml_key(f.name): f.name for f in fields(ADRParams)}
_DEFAULTS: dict[str, Any] = {
    f.name: (f.default_factory() if f.default_factory is not MISSING else f.default)
    for f in fields(ADRParams)
}


#: The paper's §9 values (and its mechanisms alone) for every field whose default arenad chose
#: by measurement (docs/adr.md "Defaults by measurement"): ``preset = "paper"`` starts from these.
PAPER: dict[str, Any] = {
    "gamma": 100.0,
    "eta_min": 4.0,
    "sigma_peak": 200.0,
    "h_req": 400.0,
    "tier_pull": 0.0,
    "rho_s": 0.15,
    "gamma_phi": 0.3,
    "c_loss": 0.8,
    "theta": 400.0,
    "idle_after": 0.0,
    "link": "arctan",
    "calibration_memory": 0.0,
    "calibration_warmup": 0.0,
    "calibration_start": 1.0,
    "decay_grace": 0.0,
    "cap_decay": False,
    "sweep_sigma": True,
    "display_cap": False,
    "placement_weight": 0.0,
    "placement_calibration": False,
    "repeat_weight": 0.0,
    "farm_damping": 0.0,
}
