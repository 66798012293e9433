"""Unit and property tests of ``arenad.core.params.ADRParams`` (paper §9 and arenad's additions).

Keys are written as in the ``[adr]`` TOML section (``lambda``, not ``lambda_``). Every table below is
checked for completeness against ``dataclasses.fields(ADRParams)``, so a new field without tests fails.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.params import PAPER, TIER_COUNT, TIER_NAMES, ADRParams
from arenad.errors import ArenadError, ConfigError, ConfigProblem

Via = Literal["constructor", "from_mapping"]
VIAS: tuple[Via, ...] = ("constructor", "from_mapping")

INF = math.inf
NAN = math.nan
TINY = math.nextafter(0.0, INF)  # smallest positive float: "just inside" every "> 0" rule


def below(x: float) -> float:
    """The largest float strictly less than ``x``."""
    return math.nextafter(x, -INF)


def above(x: float) -> float:
    """The smallest float strictly greater than ``x``."""
    return math.nextafter(x, INF)


def toml_key(field_name: str) -> str:
    return "lambda" if field_name == "lambda_" else field_name


def field_name(key: str) -> str:
    return "lambda_" if key == "lambda" else key


ALL_KEYS: frozenset[str] = frozenset(toml_key(f.name) for f in dataclasses.fields(ADRParams))

FLOAT_KEYS: tuple[str, ...] = (
    "mu0", "mu_min", "mu_max", "sigma0", "sigma_min", "sigma_max", "gamma", "sigma_peak",
    "eta_min", "eta_max", "rho_s", "rho_v", "w_ref", "gamma_phi", "lambda_phi", "c_loss",
    "t_cooldown", "theta", "lambda", "tau", "sigma_drift", "t_return", "alpha", "lambda_pool",
    "delta_max", "sigma_place", "t_active", "h_req", "beta", "day_seconds", "initial_spread",
    "recalibrate_interval", "late_tolerance", "idle_after", "sweep_interval",
    "calibration_memory", "calibration_warmup", "calibration_start", "decay_grace",
    "placement_weight", "repeat_weight", "farm_damping", "tier_pull",
)  # fmt: skip
OPTIONAL_FLOAT_KEYS: tuple[str, ...] = ("nu_min", "nu_max")
INT_KEYS: tuple[str, ...] = (
    "s_max", "n_min", "n_active", "p_min", "window_len", "return_events", "max_players",
    "recalibrate_min_events",
)  # fmt: skip
BOOL_KEYS: tuple[str, ...] = (
    "anchor", "pool_losses", "decay", "cap_decay", "sweep_sigma", "display_cap", "placement_calibration",
)  # fmt: skip
CHOICE_KEYS: dict[str, tuple[str, ...]] = {
    "loser_rule": ("corrected", "printed"),
    "pool_release": ("transfer", "literal"),
    "player_cap_policy": ("refuse_new",),
    "link": ("arctan", "logistic"),
}
LIST_KEYS: tuple[str, ...] = ("tier_proportions",)


def build(via: Via, overrides: Mapping[str, Any]) -> ADRParams:
    """Build from TOML-keyed overrides, either through the constructor or through ``from_mapping``."""
    if via == "from_mapping":
        return ADRParams.from_mapping(dict(overrides))
    kwargs: dict[str, Any] = {
        field_name(k): tuple(v) if k == "tier_proportions" and isinstance(v, list) else v
        for k, v in overrides.items()
    }
    return ADRParams(**kwargs)


def problems_of(via: Via, overrides: Mapping[str, Any]) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as info:
        build(via, overrides)
    return info.value.problems


def same_value(a: object, b: object) -> bool:
    """Same type and equal (nan counts as equal to nan).

    A list given for ``tier_proportions`` is reported as the tuple it became.
    """
    if isinstance(a, tuple) and isinstance(b, list):
        a = list(a)
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a is b or a == b


def assert_only_problem(
    via: Via, overrides: Mapping[str, Any], key: str, fragment: str, also: frozenset[str] = frozenset()
) -> None:
    """Building fails naming ``adr.<key>`` with the bad value and ``fragment`` (plus only ``also`` keys)."""
    with pytest.raises(ConfigError) as info:
        build(via, overrides)
    err = info.value
    keys = [p.key for p in err.problems]
    assert sorted(keys) == sorted(f"adr.{k}" for k in {key, *also}), err.problems
    (problem,) = (p for p in err.problems if p.key == f"adr.{key}")
    assert same_value(problem.value, overrides[key]), (problem.value, overrides[key])
    assert fragment in problem.message, problem.message
    assert f"adr.{key}" in str(err)
    assert fragment in str(err)


# ---------------------------------------------------------------------------------------------
# The paper's §9 table
# ---------------------------------------------------------------------------------------------

#: (TOML key, the paper's symbol, the paper's recommended value), in the order of the §9 table.
PAPER_TABLE: tuple[tuple[str, str, float], ...] = (
    ("mu0", "μ0", 1000),
    ("mu_min", "μmin", 0),
    ("mu_max", "μmax", 4000),
    ("sigma0", "σ0", 350),
    ("sigma_min", "σmin", 10),
    ("sigma_max", "σmax", 400),
    ("gamma", "γ", 100),
    ("sigma_peak", "σpeak", 200),
    ("eta_min", "ηmin", 4),
    ("eta_max", "ηmax", 40),
    ("rho_s", "ρs", 0.15),
    ("s_max", "Smax", 5),
    ("rho_v", "ρv", 0.3),
    ("w_ref", "Wref", 20),
    ("gamma_phi", "γφ", 0.3),
    ("lambda_phi", "λφ", 0.2),
    ("c_loss", "closs", 0.8),
    ("t_cooldown", "Tcooldown (seconds)", 60),
    ("theta", "θ", 400),
    ("lambda", "λ", 0.5),
    ("tau", "τ (days)", 30),
    ("sigma_drift", "σdrift (per day)", 5),
    ("t_return", "Treturn (days)", 60),
    ("alpha", "α", 0.7),
    ("lambda_pool", "λpool", 0.2),
    ("delta_max", "Δmax", 60),
    ("n_min", "Nmin", 15),
    ("sigma_place", "σplace", 180),
    ("t_active", "Tactive (days)", 7),
    ("n_active", "Nactive", 5),
    ("p_min", "Pmin", 20),
    ("h_req", "Hreq", 400),
    ("beta", "β", 0.2),
    ("window_len", "L", 20),
)
#: Keys the paper's table does not give a number for (ν bounds are derived, the rest are below).
NOT_IN_PAPER_TABLE: frozenset[str] = frozenset(
    {
        "nu_min", "nu_max", "tier_proportions", "day_seconds",
        # arenad choices (docs/adr.md)
        "loser_rule", "anchor", "pool_release", "return_events", "pool_losses",
        "initial_spread", "recalibrate_interval", "late_tolerance", "max_players",
        "player_cap_policy", "decay", "idle_after", "sweep_interval", "recalibrate_min_events",
        # issue 14: calibration and safeguards (docs/adr.md "Defaults by measurement")
        "link", "calibration_memory", "calibration_warmup", "calibration_start", "decay_grace",
        "cap_decay", "sweep_sigma", "display_cap", "placement_weight", "repeat_weight", "farm_damping",
        "tier_pull", "placement_calibration",
    }
)  # fmt: skip


class TestPaperDefaults:
    """The defaults are the paper's §9 table; derived and arenad-only defaults are as documented."""

    def test_tables_cover_every_key(self) -> None:
        keys = [k for k, _, _ in PAPER_TABLE]
        assert len(keys) == len(set(keys))
        assert set(keys) | NOT_IN_PAPER_TABLE == ALL_KEYS
        assert not set(keys) & NOT_IN_PAPER_TABLE

    @pytest.mark.parametrize(("key", "symbol", "value"), PAPER_TABLE, ids=[k for k, _, _ in PAPER_TABLE])
    def test_default_is_paper_value(self, key: str, symbol: str, value: float) -> None:
        actual = getattr(ADRParams.paper(), field_name(key))
        assert actual == value, f"{key} ({symbol}): default {actual!r}, paper {value!r}"
        expected_type = int if key in INT_KEYS else float
        assert type(actual) is expected_type

    def test_explicit_headline_values(self) -> None:
        p = ADRParams.paper()
        assert (p.mu0, p.mu_min, p.mu_max) == (1000, 0, 4000)
        assert (p.sigma0, p.sigma_min, p.sigma_max, p.gamma, p.sigma_peak) == (350, 10, 400, 100, 200)
        assert (p.eta_min, p.eta_max) == (4, 40)
        assert (p.theta, p.lambda_, p.tau, p.sigma_drift) == (400, 0.5, 30, 5)
        assert (p.t_return, p.alpha, p.lambda_pool, p.delta_max) == (60, 0.7, 0.2, 60)
        assert (p.n_min, p.sigma_place, p.t_active, p.n_active, p.p_min) == (15, 180, 7, 5, 20)
        assert (p.h_req, p.beta, p.window_len) == (400, 0.2, 20)

    def test_pool_bounds_derive_from_delta_max(self) -> None:
        p = ADRParams()
        assert p.nu_min is None
        assert p.nu_max is None
        assert p.pool_low == -60.0 == -p.delta_max
        assert p.pool_high == 60.0 == p.delta_max

    def test_pool_bounds_follow_a_changed_delta_max(self) -> None:
        p = ADRParams(delta_max=25.0)
        assert (p.pool_low, p.pool_high) == (-25.0, 25.0)

    def test_explicit_pool_bounds_override_delta_max(self) -> None:
        p = ADRParams(nu_min=-10.0, nu_max=30.0)
        assert (p.pool_low, p.pool_high) == (-10.0, 30.0)

    def test_tier_proportions_default_uniform_over_15_tiers(self) -> None:
        p = ADRParams()
        assert TIER_COUNT == 15
        assert len(TIER_NAMES) == 15
        assert TIER_NAMES[0] == "1H"
        assert TIER_NAMES[-1] == "5L"
        assert len(p.tier_proportions) == 15
        assert all(x == pytest.approx(1 / 15) for x in p.tier_proportions)
        assert math.fsum(p.tier_proportions) == pytest.approx(1.0)

    def test_day_is_86400_seconds(self) -> None:
        assert ADRParams().day_seconds == 86400.0

    def test_arenad_choices_defaults(self) -> None:
        p = ADRParams()
        assert p.loser_rule == "corrected"
        assert p.anchor is True
        assert p.pool_release == "transfer"
        assert p.return_events == 0
        assert p.returning_events == p.n_min == 15
        assert p.pool_losses is True
        assert p.initial_spread == 200.0
        assert p.recalibrate_interval == 300.0
        assert p.late_tolerance == 5.0
        assert p.max_players == 2_000_000
        assert p.player_cap_policy == "refuse_new"
        assert p.decay is True
        assert p.idle_after == 7.0  # the inactivity sweep is on (paper: off)
        assert p.sweep_interval == 86400.0

    def test_defaults_by_measurement(self) -> None:
        """The defaults that differ from the paper (docs/adr.md) and the paper one name away."""
        p = ADRParams()
        assert (p.theta, p.rho_s, p.gamma_phi, p.c_loss) == (200.0, 0.0, 0.0, 1.0)
        assert (p.sigma_peak, p.h_req, p.placement_weight) == (250.0, 250.0, 1.0)
        assert (p.link, p.decay_grace, p.cap_decay, p.sweep_sigma) == ("logistic", 7.0, True, False)
        assert p.calibration_memory > 0
        assert p.repeat_weight == 0.0  # repeats inside the cooldown stay dropped (burst gain 0)
        assert (p.gamma, p.eta_min, p.farm_damping) == (150.0, 0.0, 10.0)
        assert p.tier_pull == 0.75
        assert p.placement_calibration is True
        paper = ADRParams.paper()
        assert {k: getattr(paper, k) for k in PAPER} == PAPER
        assert all(
            getattr(p, k) != v for k, v in PAPER.items() if k not in ("repeat_weight", "placement_weight")
        )
        assert ADRParams.from_mapping({"preset": "paper"}) == paper
        assert ADRParams.from_mapping({"preset": "paper", "theta": 300}) == ADRParams.paper(theta=300.0)
        assert ADRParams.from_mapping({"preset": "default"}) == p

    @pytest.mark.parametrize("bad", ["Paper", "", 1, True, None])
    def test_unknown_preset_is_named(self, bad: object) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({"preset": bad, "theta": -1})
        keys = [q.key for q in info.value.problems]
        assert keys == ["adr.preset", "adr.theta"]

    def test_defaults_have_no_problems(self) -> None:
        assert ADRParams().problems() == []


# ---------------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------------

NOT_A_NUMBER: tuple[Any, ...] = ("1.0", "", True, False, None, [1.0], {"v": 1.0}, 1j)
NOT_A_NUMBER_BUT_NONE: tuple[Any, ...] = tuple(v for v in NOT_A_NUMBER if v is not None)
NOT_AN_INT: tuple[Any, ...] = ("5", True, False, None, 5.0, 5.5, NAN, INF, [5])
NOT_A_BOOL: tuple[Any, ...] = (1, 0, 1.0, "true", "false", None, [True])
NON_FINITE: tuple[float, ...] = (NAN, INF, -INF)


def _ids(values: tuple[Any, ...]) -> list[str]:
    return [f"{type(v).__name__}:{v!r}" for v in values]


class TestTypeTables:
    """Every key belongs to exactly one type table, so every key gets its type tests."""

    def test_type_tables_partition_all_keys(self) -> None:
        groups = [FLOAT_KEYS, OPTIONAL_FLOAT_KEYS, INT_KEYS, BOOL_KEYS, tuple(CHOICE_KEYS), LIST_KEYS]
        flat = [k for g in groups for k in g]
        assert len(flat) == len(set(flat))
        assert set(flat) == ALL_KEYS

    def test_type_tables_match_defaults(self) -> None:
        p = ADRParams()
        for key in FLOAT_KEYS:
            assert type(getattr(p, field_name(key))) is float, key
        for key in INT_KEYS:
            assert type(getattr(p, key)) is int, key
        for key in BOOL_KEYS:
            assert type(getattr(p, key)) is bool, key
        for key, choices in CHOICE_KEYS.items():
            assert getattr(p, key) in choices, key


@pytest.mark.parametrize("via", VIAS)
class TestFloatFieldTypes:
    """A float field refuses non-numbers (bools included) and non-finite numbers, naming its key."""

    @pytest.mark.parametrize("bad", NOT_A_NUMBER, ids=_ids(NOT_A_NUMBER))
    @pytest.mark.parametrize("key", FLOAT_KEYS)
    def test_wrong_type(self, via: Via, key: str, bad: object) -> None:
        assert_only_problem(via, {key: bad}, key, "must be a number")

    @pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "inf", "-inf"])
    @pytest.mark.parametrize("key", FLOAT_KEYS)
    def test_non_finite(self, via: Via, key: str, bad: float) -> None:
        assert_only_problem(via, {key: bad}, key, "must be finite")


@pytest.mark.parametrize("via", VIAS)
class TestOptionalFloatFieldTypes:
    """nu_min/nu_max refuse non-numbers and non-finite numbers; leaving them out is allowed."""

    @pytest.mark.parametrize("bad", NOT_A_NUMBER_BUT_NONE, ids=_ids(NOT_A_NUMBER_BUT_NONE))
    @pytest.mark.parametrize("key", OPTIONAL_FLOAT_KEYS)
    def test_wrong_type(self, via: Via, key: str, bad: object) -> None:
        assert_only_problem(via, {key: bad}, key, "must be a number (or left out for -/+ delta_max)")

    @pytest.mark.parametrize("key", OPTIONAL_FLOAT_KEYS)
    def test_none_means_left_out(self, via: Via, key: str) -> None:
        p = build(via, {key: None, "delta_max": 42.0})
        assert getattr(p, key) is None
        assert (p.pool_low, p.pool_high) == (-42.0, 42.0)
        assert key not in p.to_mapping()

    @pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "inf", "-inf"])
    @pytest.mark.parametrize("key", OPTIONAL_FLOAT_KEYS)
    def test_non_finite(self, via: Via, key: str, bad: float) -> None:
        assert_only_problem(via, {key: bad}, key, "must be finite")


@pytest.mark.parametrize("via", VIAS)
class TestIntFieldTypes:
    """An int field refuses floats (even integral ones), bools, strings and None, naming its key."""

    @pytest.mark.parametrize("bad", NOT_AN_INT, ids=_ids(NOT_AN_INT))
    @pytest.mark.parametrize("key", INT_KEYS)
    def test_wrong_type(self, via: Via, key: str, bad: object) -> None:
        assert_only_problem(via, {key: bad}, key, "must be an integer")


@pytest.mark.parametrize("via", VIAS)
class TestBoolFieldTypes:
    """A bool field accepts only true/false, not 0/1 or strings."""

    @pytest.mark.parametrize("bad", NOT_A_BOOL, ids=_ids(NOT_A_BOOL))
    @pytest.mark.parametrize("key", BOOL_KEYS)
    def test_wrong_type(self, via: Via, key: str, bad: object) -> None:
        assert_only_problem(via, {key: bad}, key, "must be true or false")

    @pytest.mark.parametrize("value", [True, False])
    @pytest.mark.parametrize("key", BOOL_KEYS)
    def test_both_values_accepted(self, via: Via, key: str, value: bool) -> None:
        assert getattr(build(via, {key: value}), key) is value


NOT_A_CHOICE: tuple[Any, ...] = (
    1,
    None,
    True,
    "",
    "Corrected",
    "PRINTED",
    " transfer",
    "literally",
    ["printed"],
)


@pytest.mark.parametrize("via", VIAS)
class TestChoiceFieldValues:
    """The choice keys (loser_rule, pool_release, player_cap_policy) accept only their spellings."""

    @pytest.mark.parametrize("bad", NOT_A_CHOICE, ids=_ids(NOT_A_CHOICE))
    @pytest.mark.parametrize("key", tuple(CHOICE_KEYS))
    def test_bad_choice(self, via: Via, key: str, bad: object) -> None:
        choices = CHOICE_KEYS[key]
        expected = " or ".join(f'"{c}"' for c in choices)
        assert_only_problem(via, {key: bad}, key, f"must be {expected}")

    @pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in CHOICE_KEYS.items() for v in vs], ids=str)
    def test_good_choice(self, via: Via, key: str, value: str) -> None:
        assert getattr(build(via, {key: value}), key) == value


# ---------------------------------------------------------------------------------------------
# Range rules
# ---------------------------------------------------------------------------------------------

#: Each row: the key at fault, the full set of overrides (chosen so only that rule fails), and a
#: fragment of the expected message. The bad value is ``overrides[key]``.
RANGE_ERRORS: list[Any] = []
#: Each row: overrides on the boundary of (or just inside) a rule, which must build.
RANGE_OK: list[Any] = []


def _bad(key: str, fragment: str, case: str, *also: str, **overrides: Any) -> None:
    overrides = {toml_key(k): v for k, v in overrides.items()}
    assert key in overrides
    RANGE_ERRORS.append(pytest.param(key, overrides, fragment, frozenset(also), id=f"{key}-{case}"))


def _ok(key: str, case: str, **overrides: Any) -> None:
    overrides = {toml_key(k): v for k, v in overrides.items()}
    RANGE_OK.append(pytest.param(key, overrides, id=f"{key}-{case}"))


# mu: mu_min < mu_max, mu0 in [mu_min, mu_max]
_bad("mu_max", "greater than mu_min", "equal", mu_min=0.0, mu_max=0.0, mu0=0.0)
_bad("mu_max", "greater than mu_min", "below", "mu0", mu_min=5.0, mu_max=below(5.0), mu0=5.0)
_ok("mu_max", "just-above-min", mu_min=0.0, mu_max=TINY, mu0=0.0)
_ok("mu_min", "negative", mu_min=-500.0)
_bad("mu0", "must lie in [mu_min, mu_max]", "below-min", mu0=below(0.0))
_bad("mu0", "must lie in [mu_min, mu_max]", "above-max", mu0=above(4000.0))
_ok("mu0", "at-min", mu0=0.0)
_ok("mu0", "at-max", mu0=4000.0)
# sigma: 0 < sigma_min <= sigma_max, sigma0 in [sigma_min, sigma_max], sigma_place >= sigma_min
_bad("sigma_min", "must be > 0", "zero", sigma_min=0.0)
_bad("sigma_min", "must be > 0", "negative", sigma_min=-1.0)
_ok("sigma_min", "tiny", sigma_min=TINY)
_bad(
    "sigma_max",
    "must be >= sigma_min",
    "below-min",
    "sigma0",
    sigma_min=10.0,
    sigma_max=below(10.0),
    sigma0=5.0,
)
_ok("sigma_max", "equal-min", sigma_min=10.0, sigma_max=10.0, sigma0=10.0)
_bad("sigma0", "must lie in [sigma_min, sigma_max]", "below-min", sigma0=below(10.0))
_bad("sigma0", "must lie in [sigma_min, sigma_max]", "above-max", sigma0=above(400.0))
_ok("sigma0", "at-min", sigma0=10.0)
_ok("sigma0", "at-max", sigma0=400.0)
_bad("sigma_place", "must be >= sigma_min", "below-min", sigma_place=below(10.0))
_ok("sigma_place", "at-min", sigma_place=10.0)
_ok("sigma_place", "above-sigma-max", sigma_place=1000.0)
# eta: 0 <= eta_min <= eta_max
_bad("eta_min", "must be >= 0", "negative", eta_min=below(0.0))
_ok("eta_min", "zero", eta_min=0.0)
_bad("eta_max", "must be >= eta_min", "below-min", eta_min=4.0, eta_max=below(4.0))
_ok("eta_max", "equal-min", eta_min=4.0, eta_max=4.0)
# plain lower bounds
for _k in ("rho_s", "rho_v", "gamma_phi", "lambda_", "sigma_drift", "t_cooldown", "h_req"):
    _bad(toml_key(_k), "must be >= 0", "negative", **{_k: below(0.0)})
    _ok(toml_key(_k), "zero", **{_k: 0.0})
_bad("late_tolerance", "must be >= 0 (seconds)", "negative", late_tolerance=below(0.0))
_ok("late_tolerance", "zero", late_tolerance=0.0)
for _k, _frag in (
    ("gamma", "must be > 0"),
    ("sigma_peak", "must be > 0"),
    ("w_ref", "must be > 0"),
    ("theta", "must be > 0"),
    ("tau", "must be > 0 (days)"),
    ("t_return", "must be > 0 (days)"),
    ("delta_max", "must be > 0"),
    ("t_active", "must be > 0 (days)"),
    ("day_seconds", "must be > 0"),
    ("initial_spread", "must be > 0"),
    ("recalibrate_interval", "must be > 0 (seconds)"),
):
    _bad(_k, _frag, "zero", **{_k: 0.0})
    _bad(_k, _frag, "negative-zero", **{_k: -0.0})
    _ok(_k, "tiny", **{_k: TINY})
# fractions
for _k in ("lambda_phi", "c_loss", "lambda_pool", "beta"):
    _bad(_k, "must lie in (0, 1]", "zero", **{_k: 0.0})
    _bad(_k, "must lie in (0, 1]", "above-one", **{_k: above(1.0)})
    _ok(_k, "tiny", **{_k: TINY})
    _ok(_k, "one", **{_k: 1.0})
_bad("alpha", "must lie in [0, 1]", "negative", alpha=below(0.0))
_bad("alpha", "must lie in [0, 1]", "above-one", alpha=above(1.0))
_ok("alpha", "zero", alpha=0.0)
_ok("alpha", "one", alpha=1.0)
# pool bounds: nu_min <= 0 <= nu_max (defaults -/+ delta_max)
_bad("nu_min", "must be <= 0", "positive", nu_min=TINY)
_bad("nu_max", "must be >= 0", "negative", nu_max=-TINY)
_ok("nu_min", "zero", nu_min=0.0)
_ok("nu_min", "far", nu_min=-1e9)
_ok("nu_max", "zero", nu_max=0.0)
_ok("nu_max", "far", nu_max=1e9)
# integers
_bad("s_max", "must be >= 0", "negative", s_max=-1)
_ok("s_max", "zero", s_max=0)
_bad("n_min", "must be >= 0", "negative", n_min=-1)
_ok("n_min", "zero", n_min=0)
_bad("n_active", "must be >= 1", "zero", n_active=0)
_ok("n_active", "one", n_active=1)
_bad("p_min", "must be >= 1", "zero", p_min=0)
_ok("p_min", "one", p_min=1)
_bad("window_len", "must lie in [1, 10000]", "zero", window_len=0)
_bad("window_len", "must lie in [1, 10000]", "above-max", window_len=10_001)
_ok("window_len", "one", window_len=1)
_ok("window_len", "max", window_len=10_000)
_bad("return_events", "must be >= 0 (0 means n_min)", "negative", return_events=-1)
_ok("return_events", "zero", return_events=0)
_ok("return_events", "one", return_events=1)
_bad("max_players", "must lie in [2, 4294967296]", "one", max_players=1)
_bad("max_players", "there is no unlimited setting", "zero", max_players=0)
_bad("max_players", "must lie in [2, 4294967296]", "above-id-space", max_players=(1 << 32) + 1)
_ok("max_players", "two", max_players=2)
_ok("max_players", "id-space", max_players=1 << 32)
_bad("idle_after", "must be >= 0 (days; 0 turns the inactivity sweep off)", "negative", idle_after=-TINY)
_ok("idle_after", "zero", idle_after=0.0)
_ok("idle_after", "tiny", idle_after=TINY)
_bad("sweep_interval", "must be > 0 (seconds)", "zero", sweep_interval=0.0)
_ok("sweep_interval", "tiny", sweep_interval=TINY)
_bad("calibration_memory", "must be 0 (off) or >= 1 (kills)", "negative", calibration_memory=-TINY)
_bad("calibration_memory", "must be 0 (off) or >= 1 (kills)", "below-one", calibration_memory=below(1.0))
_ok("calibration_memory", "zero", calibration_memory=0.0)
_ok("calibration_memory", "one", calibration_memory=1.0)
_bad("calibration_warmup", "must be >= 0", "negative", calibration_warmup=-TINY)
_ok("calibration_warmup", "zero", calibration_warmup=0.0)
_bad("calibration_start", "must lie in [0.125, 8]", "below", calibration_start=below(0.125))
_bad("calibration_start", "must lie in [0.125, 8]", "above", calibration_start=above(8.0))
_ok("calibration_start", "lowest", calibration_start=0.125)
_ok("calibration_start", "highest", calibration_start=8.0)
_bad("decay_grace", "must be >= 0 (days)", "negative", decay_grace=-TINY)
_ok("decay_grace", "zero", decay_grace=0.0)
_bad("placement_weight", "must lie in [0, 1] (0: kills only)", "negative", placement_weight=-TINY)
_bad("placement_weight", "must lie in [0, 1] (0: kills only)", "above-one", placement_weight=above(1.0))
_ok("placement_weight", "one", placement_weight=1.0)
_bad("repeat_weight", "must lie in [0, 1] (0: the paper's filter)", "negative", repeat_weight=-TINY)
_bad("repeat_weight", "must lie in [0, 1] (0: the paper's filter)", "above-one", repeat_weight=above(1.0))
_ok("repeat_weight", "one", repeat_weight=1.0)
_bad("farm_damping", "must be >= 0 (0: no damping, the paper)", "negative", farm_damping=-TINY)
_ok("farm_damping", "zero", farm_damping=0.0)
_ok("farm_damping", "tiny", farm_damping=TINY)
_bad("tier_pull", "must lie in [0, 1) (0: the paper's one threshold)", "negative", tier_pull=-TINY)
_bad("tier_pull", "must lie in [0, 1) (0: the paper's one threshold)", "one", tier_pull=1.0)
_ok("tier_pull", "zero", tier_pull=0.0)
_ok("tier_pull", "just-below-one", tier_pull=below(1.0))
_bad("link", 'must be "arctan" or "logistic"', "other", link="probit")
_bad("recalibrate_min_events", "must be >= 0 (0: time alone)", "negative", recalibrate_min_events=-1)
_ok("recalibrate_min_events", "zero", recalibrate_min_events=0)
# choices and bools (their "range" is the set of allowed values)
_bad("loser_rule", 'must be "corrected" or "printed"', "other", loser_rule="both")
_bad("pool_release", 'must be "transfer" or "literal"', "other", pool_release="drain")
_bad("player_cap_policy", 'must be "refuse_new"', "evict-idle", player_cap_policy="evict_idle")
for _k, _vs in CHOICE_KEYS.items():
    for _v in _vs:
        _ok(_k, _v, **{_k: _v})
for _k in BOOL_KEYS:
    _ok(_k, "false", **{_k: False})
_ok("tier_proportions", "one-hot", tier_proportions=[1.0] + [0.0] * (TIER_COUNT - 1))


class TestRangeTables:
    """Every key with a range rule has an error row, and every key has an allowed boundary row."""

    def test_every_ranged_key_has_an_error_row(self) -> None:
        covered = {row.values[0] for row in RANGE_ERRORS}
        # bools have no range; tier_proportions has its own class; mu_min's only rule is mu_max's
        assert covered == ALL_KEYS - set(BOOL_KEYS) - {"tier_proportions", "mu_min"}

    def test_every_key_has_an_allowed_row(self) -> None:
        assert {row.values[0] for row in RANGE_OK} == ALL_KEYS


@pytest.mark.parametrize("via", VIAS)
class TestRangeRules:
    """A value just outside its allowed range fails under its own key; the boundary itself builds."""

    @pytest.mark.parametrize(("key", "overrides", "fragment", "also"), RANGE_ERRORS)
    def test_just_outside_fails(
        self, via: Via, key: str, overrides: dict[str, Any], fragment: str, also: frozenset[str]
    ) -> None:
        assert_only_problem(via, overrides, key, fragment, also)

    @pytest.mark.parametrize(("key", "overrides"), RANGE_OK)
    def test_boundary_builds(self, via: Via, key: str, overrides: dict[str, Any]) -> None:
        p = build(via, overrides)
        for k, v in overrides.items():
            got = getattr(p, field_name(k))
            assert (list(got) if isinstance(got, tuple) else got) == v, k
        assert p.problems() == []


# ---------------------------------------------------------------------------------------------
# tier_proportions
# ---------------------------------------------------------------------------------------------

UNIFORM: list[float] = [1.0 / TIER_COUNT] * TIER_COUNT


def _with(index: int, value: object) -> list[object]:
    out: list[object] = list(UNIFORM)
    out[index] = value
    return out


@pytest.mark.parametrize("via", VIAS)
class TestTierProportions:
    """tier_proportions must be 15 finite non-negative numbers summing to 1 (within 1e-6)."""

    @pytest.mark.parametrize(
        "bad",
        [[], UNIFORM[:-1], [*UNIFORM, 0.0], [1.0], [0.5, 0.5]],
        ids=["empty", "14", "16", "1", "2"],
    )
    def test_wrong_length(self, via: Via, bad: list[float]) -> None:
        assert_only_problem(
            via, {"tier_proportions": bad}, "tier_proportions", "must be a list of 15 numbers"
        )

    @pytest.mark.parametrize("bad", ["uniform", 1.0, None, {"1H": 1.0}], ids=["str", "float", "none", "dict"])
    def test_not_a_list(self, via: Via, bad: object) -> None:
        assert_only_problem(
            via, {"tier_proportions": bad}, "tier_proportions", "must be a list of 15 numbers"
        )

    @pytest.mark.parametrize(
        "entry", ["0.1", None, True, False, [0.1]], ids=["str", "none", "true", "false", "list"]
    )
    @pytest.mark.parametrize("index", [0, 7, TIER_COUNT - 1])
    def test_non_number_entry(self, via: Via, entry: object, index: int) -> None:
        bad = _with(index, entry)
        assert_only_problem(
            via, {"tier_proportions": bad}, "tier_proportions", "every entry must be a number"
        )

    @pytest.mark.parametrize("index", [0, 7, TIER_COUNT - 1])
    def test_negative_entry(self, via: Via, index: int) -> None:
        # sums to 1 overall, so only the sign is wrong
        bad = [0.0] * TIER_COUNT
        bad[index] = -0.5
        bad[(index + 1) % TIER_COUNT] = 1.5
        assert math.fsum(bad) == 1.0
        assert_only_problem(via, {"tier_proportions": bad}, "tier_proportions", "finite and >= 0")

    def test_tiny_negative_entry(self, via: Via) -> None:
        bad = _with(3, -TINY)
        assert_only_problem(via, {"tier_proportions": bad}, "tier_proportions", "finite and >= 0")

    @pytest.mark.parametrize("entry", NON_FINITE, ids=["nan", "inf", "-inf"])
    def test_non_finite_entry(self, via: Via, entry: float) -> None:
        bad = _with(4, entry)
        assert_only_problem(via, {"tier_proportions": bad}, "tier_proportions", "finite and >= 0")

    @pytest.mark.parametrize(
        "bad",
        [[0.1] * TIER_COUNT, [0.0] * TIER_COUNT, [1.0] * TIER_COUNT, _with(0, 1.0 / TIER_COUNT + 2e-6)],
        ids=["sum-1.5", "sum-0", "sum-15", "sum-1+2e-6"],
    )
    def test_not_summing_to_one(self, via: Via, bad: list[float]) -> None:
        assert_only_problem(via, {"tier_proportions": bad}, "tier_proportions", "must sum to 1")

    def test_sum_message_reports_the_sum(self, via: Via) -> None:
        (problem,) = problems_of(via, {"tier_proportions": [0.1] * TIER_COUNT})
        assert "1.5" in problem.message

    @pytest.mark.parametrize(
        "good",
        [
            UNIFORM,
            [1] + [0] * (TIER_COUNT - 1),
            [0.0] * (TIER_COUNT - 1) + [1.0],
            _with(0, 1.0 / TIER_COUNT + 5e-7),
            [0.2, 0.2, 0.2, 0.2, 0.2] + [0.0] * 10,
        ],
        ids=["uniform", "int-one-hot", "last-tier", "sum-within-tolerance", "five-tiers"],
    )
    def test_valid(self, via: Via, good: list[float]) -> None:
        p = build(via, {"tier_proportions": good})
        assert isinstance(p.tier_proportions, tuple)
        assert list(p.tier_proportions) == good

    def test_constructor_requires_a_tuple(self, via: Via) -> None:
        if via == "from_mapping":
            assert ADRParams.from_mapping({"tier_proportions": UNIFORM}).tier_proportions == tuple(UNIFORM)
            return
        with pytest.raises(ConfigError) as info:
            ADRParams(tier_proportions=UNIFORM)  # type: ignore[arg-type]
        assert [p.key for p in info.value.problems] == ["adr.tier_proportions"]


# ---------------------------------------------------------------------------------------------
# from_mapping / to_mapping
# ---------------------------------------------------------------------------------------------

#: A valid integer for every float key; ``from_mapping`` must take it and store a float.
INT_FOR_FLOAT: dict[str, int] = {
    "mu0": 1000, "mu_min": 0, "mu_max": 4000, "sigma0": 350, "sigma_min": 10, "sigma_max": 400,
    "gamma": 100, "sigma_peak": 200, "eta_min": 4, "eta_max": 40, "rho_s": 0, "rho_v": 1,
    "w_ref": 20, "gamma_phi": 0, "lambda_phi": 1, "c_loss": 1, "t_cooldown": 60, "theta": 400,
    "lambda": 1, "tau": 30, "sigma_drift": 5, "t_return": 60, "alpha": 1, "lambda_pool": 1,
    "delta_max": 60, "sigma_place": 180, "t_active": 7, "h_req": 400, "beta": 1,
    "day_seconds": 86400, "initial_spread": 150, "recalibrate_interval": 300, "late_tolerance": 5,
    "idle_after": 14, "sweep_interval": 86400, "calibration_memory": 0, "decay_grace": 3,
    "placement_weight": 1, "repeat_weight": 0, "calibration_warmup": 2, "calibration_start": 1,
    "farm_damping": 5, "tier_pull": 0,
}  # fmt: skip


class TestFromMapping:
    """from_mapping reads the [adr] TOML table: TOML keys, int->float, every problem at once."""

    def test_empty_mapping_gives_defaults(self) -> None:
        assert ADRParams.from_mapping({}) == ADRParams()

    def test_int_table_covers_float_keys(self) -> None:
        assert set(INT_FOR_FLOAT) == set(FLOAT_KEYS)

    @pytest.mark.parametrize(("key", "value"), sorted(INT_FOR_FLOAT.items()))
    def test_ints_accepted_for_float_fields(self, key: str, value: int) -> None:
        p = ADRParams.from_mapping({key: value})
        got = getattr(p, field_name(key))
        assert got == value
        assert type(got) is float

    @pytest.mark.parametrize(("key", "value"), [("nu_min", -60), ("nu_max", 60), ("nu_min", 0)])
    def test_ints_accepted_for_pool_bounds(self, key: str, value: int) -> None:
        p = ADRParams.from_mapping({key: value})
        assert getattr(p, key) == value

    def test_constructor_accepts_ints_for_float_fields(self) -> None:
        p = ADRParams(mu0=1200, gamma=50)
        assert (p.mu0, p.gamma) == (1200, 50)

    def test_lambda_is_the_toml_key_of_lambda_(self) -> None:
        p = ADRParams.from_mapping({"lambda": 0.25})
        assert p.lambda_ == 0.25
        m = p.to_mapping()
        assert m["lambda"] == 0.25
        assert "lambda_" not in m

    def test_lambda_underscore_is_unknown(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({"lambda_": 0.25})
        (problem,) = info.value.problems
        assert problem == ConfigProblem("adr.lambda_", 0.25, "unknown key")

    def test_lambda_error_uses_toml_key(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams(lambda_=-1.0)
        assert [p.key for p in info.value.problems] == ["adr.lambda"]

    def test_unknown_key_reported(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({"sigma_zero": 350.0})
        assert info.value.problems == [ConfigProblem("adr.sigma_zero", 350.0, "unknown key")]
        assert "adr.sigma_zero" in str(info.value)
        assert "unknown key" in str(info.value)

    def test_several_unknown_keys_all_reported(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({"foo": 1, "mu0": 1000.0, "bar": "x", "pool_low": -5.0})
        assert sorted(p.key for p in info.value.problems) == ["adr.bar", "adr.foo", "adr.pool_low"]

    @pytest.mark.parametrize("key", ["pool_low", "pool_high", "returning_events", "problems", "MU0", "mu0 "])
    def test_properties_and_misspellings_are_unknown(self, key: str) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({key: 1.0})
        assert [(p.key, p.message) for p in info.value.problems] == [(f"adr.{key}", "unknown key")]

    def test_several_bad_ranges_all_reported(self) -> None:
        bad = {"mu0": -1.0, "gamma": 0.0, "beta": 2.0, "window_len": 0, "alpha": 1.5, "p_min": 0}
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping(bad)
        got = {p.key: p.value for p in info.value.problems}
        assert got == {f"adr.{k}": v for k, v in bad.items()}
        for k in bad:
            assert f"adr.{k}" in str(info.value)

    def test_several_bad_types_all_reported(self) -> None:
        bad: dict[str, object] = {"mu0": "1000", "s_max": 1.5, "anchor": 1, "tau": NAN, "gamma": True}
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping(bad)
        got = {p.key: p.value for p in info.value.problems}
        assert set(got) == {f"adr.{k}" for k in bad}
        assert all(same_value(got[f"adr.{k}"], v) for k, v in bad.items())

    def test_every_float_key_bad_at_once(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping(dict.fromkeys(FLOAT_KEYS, "x"))
        assert sorted(p.key for p in info.value.problems) == sorted(f"adr.{k}" for k in FLOAT_KEYS)

    def test_several_bad_tier_and_range_reported(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({"tier_proportions": [0.5], "h_req": -1.0, "loser_rule": "x"})
        assert {p.key for p in info.value.problems} == {"adr.tier_proportions", "adr.h_req", "adr.loser_rule"}

    def test_unknown_and_bad_value_reported_together(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({"bogus": 1, "gamma": 0.0})
        assert {p.key for p in info.value.problems} == {"adr.bogus", "adr.gamma"}

    @pytest.mark.parametrize(
        "bad",
        [
            {"mu0": "x", "gamma": 0.0},
            {"delta_max": "x", "nu_min": 1.0},
            {"nu_min": "x", "beta": 0.0},
            {"sigma_min": True, "sigma0": 5.0},
            {"s_max": 1.5, "window_len": 0, "anchor": "yes", "tau": -1.0},
            {"lambda": None, "tier_proportions": [0.5]},
        ],
        ids=["mu0-gamma", "delta_max-nu_min", "nu_min-beta", "sigma_min-sigma0", "four", "lambda-tiers"],
    )
    def test_type_and_range_errors_reported_together(self, bad: dict[str, object]) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping(bad)
        assert sorted(p.key for p in info.value.problems) == sorted(f"adr.{k}" for k in bad)

    @pytest.mark.parametrize("via", VIAS)
    def test_pool_bound_error_reported_alongside_another(self, via: Via) -> None:
        keys = {p.key for p in problems_of(via, {"gamma": 0.0, "nu_min": 1.0, "nu_max": -1.0})}
        assert keys == {"adr.gamma", "adr.nu_min", "adr.nu_max"}

    @pytest.mark.parametrize("via", VIAS)
    def test_huge_int_is_a_config_error(self, via: Via) -> None:
        problems = problems_of(via, {"mu_max": 10**400})
        assert [p.key for p in problems] == ["adr.mu_max"]

    def test_section_prefixes_unknown_keys(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({"nope": 1}, section="arena.adr")
        assert [p.key for p in info.value.problems] == ["arena.adr.nope"]

    def test_section_prefixes_value_problems(self) -> None:
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({"lambda": -1.0, "beta": 0.0}, section="rating")
        assert sorted(p.key for p in info.value.problems) == ["rating.beta", "rating.lambda"]
        assert "rating.lambda" in str(info.value)
        assert "adr." not in str(info.value)

    def test_config_error_is_an_arenad_error(self) -> None:
        with pytest.raises(ArenadError):
            ADRParams.from_mapping({"gamma": -1.0})

    def test_problem_str_names_key_value_and_message(self) -> None:
        (problem,) = problems_of("from_mapping", {"gamma": -1.0})
        assert str(problem) == "adr.gamma = -1.0: must be > 0"


class TestToMapping:
    """to_mapping gives the TOML form, and from_mapping(to_mapping()) gives back an equal object."""

    def test_default_keys(self) -> None:
        m = ADRParams().to_mapping()
        assert set(m) == ALL_KEYS - {"nu_min", "nu_max"}
        assert isinstance(m["tier_proportions"], list)
        assert m["lambda"] == 0.5

    def test_set_pool_bounds_included(self) -> None:
        m = ADRParams(nu_min=-5.0, nu_max=7.0).to_mapping()
        assert (m["nu_min"], m["nu_max"]) == (-5.0, 7.0)

    def test_round_trip_defaults(self) -> None:
        p = ADRParams()
        assert ADRParams.from_mapping(p.to_mapping()) == p

    def test_round_trip_changed(self) -> None:
        p = ADRParams(
            mu0=1500.0,
            lambda_=0.1,
            nu_min=-20.0,
            nu_max=0.0,
            loser_rule="printed",
            pool_release="literal",
            anchor=False,
            pool_losses=False,
            return_events=3,
            tier_proportions=(0.5, 0.5, *([0.0] * 13)),
        )
        assert ADRParams.from_mapping(p.to_mapping()) == p

    def test_to_mapping_is_a_fresh_dict(self) -> None:
        p = ADRParams()
        m = p.to_mapping()
        m["mu0"] = 5.0
        m["tier_proportions"].append(0.0)
        assert p.mu0 == 1000.0
        assert len(p.tier_proportions) == TIER_COUNT

    def test_frozen(self) -> None:
        p = ADRParams()
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.mu0 = 5.0  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------------------------

_INT_LIMIT = 2**53  # ints in this range convert to float exactly


def num(
    lo: float | None = None,
    hi: float | None = None,
    *,
    exclude_lo: bool = False,
    ints: bool = True,
) -> st.SearchStrategy[float]:
    """Finite floats in the range, and (when ``ints``) the integers in it as TOML would give them."""
    floats = st.floats(
        min_value=lo, max_value=hi, exclude_min=exclude_lo, allow_nan=False, allow_infinity=False
    )
    if not ints:
        return floats
    ilo = -_INT_LIMIT if lo is None else math.ceil(lo) + (1 if exclude_lo and lo == math.ceil(lo) else 0)
    ihi = _INT_LIMIT if hi is None else math.floor(hi)
    ilo, ihi = max(ilo, -_INT_LIMIT), min(ihi, _INT_LIMIT)
    if ilo > ihi:
        return floats
    return st.one_of(floats, st.integers(min_value=ilo, max_value=ihi))


POSITIVE = num(0.0, exclude_lo=True)
NON_NEGATIVE = num(0.0)
FRACTION_OPEN_LOW = num(0.0, 1.0, exclude_lo=True)


@st.composite
def tier_proportions(draw: st.DrawFn) -> list[float]:
    """15 non-negative weights normalised to sum to 1, or a one-hot list of ints."""
    if draw(st.booleans()):
        hot = draw(st.integers(0, TIER_COUNT - 1))
        return [1 if i == hot else 0 for i in range(TIER_COUNT)]
    weights = draw(st.lists(st.floats(0.0, 1.0), min_size=TIER_COUNT, max_size=TIER_COUNT))
    total = math.fsum(weights)
    if total == 0.0:
        weights[0] = total = 1.0
    return [w / total for w in weights]


#: For each key, the values allowed by its rules with every other key at its default.
SINGLE_KEY_VALID: dict[str, st.SearchStrategy[Any]] = {
    "mu0": num(0.0, 4000.0),
    "mu_min": num(None, 1000.0),
    "mu_max": num(1000.0),
    "sigma0": num(10.0, 400.0),
    "sigma_min": num(0.0, 180.0, exclude_lo=True),
    "sigma_max": num(350.0),
    "gamma": POSITIVE,
    "sigma_peak": POSITIVE,
    "eta_min": num(0.0, 40.0),
    "eta_max": num(ADRParams().eta_min),  # at least the default eta_min
    "rho_s": NON_NEGATIVE,
    "s_max": st.integers(min_value=0),
    "rho_v": NON_NEGATIVE,
    "w_ref": POSITIVE,
    "gamma_phi": NON_NEGATIVE,
    "lambda_phi": FRACTION_OPEN_LOW,
    "c_loss": FRACTION_OPEN_LOW,
    "t_cooldown": NON_NEGATIVE,
    "theta": POSITIVE,
    "lambda": NON_NEGATIVE,
    "tau": POSITIVE,
    "sigma_drift": NON_NEGATIVE,
    "t_return": POSITIVE,
    "alpha": num(0.0, 1.0),
    "lambda_pool": FRACTION_OPEN_LOW,
    "nu_min": num(None, 0.0),
    "nu_max": num(0.0),
    "delta_max": POSITIVE,
    "n_min": st.integers(min_value=0),
    "sigma_place": num(10.0),
    "t_active": POSITIVE,
    "n_active": st.integers(min_value=1),
    "p_min": st.integers(min_value=1),
    "h_req": NON_NEGATIVE,
    "beta": FRACTION_OPEN_LOW,
    "window_len": st.integers(1, 10_000),
    "tier_proportions": tier_proportions(),
    "day_seconds": POSITIVE,
    "loser_rule": st.sampled_from(CHOICE_KEYS["loser_rule"]),
    "anchor": st.booleans(),
    "pool_release": st.sampled_from(CHOICE_KEYS["pool_release"]),
    "return_events": st.integers(min_value=0),
    "pool_losses": st.booleans(),
    "initial_spread": POSITIVE,
    "recalibrate_interval": POSITIVE,
    "late_tolerance": NON_NEGATIVE,
    "max_players": st.integers(2, 1 << 32),
    "player_cap_policy": st.sampled_from(CHOICE_KEYS["player_cap_policy"]),
    "decay": st.booleans(),
    "idle_after": NON_NEGATIVE,
    "sweep_interval": POSITIVE,
    "link": st.sampled_from(CHOICE_KEYS["link"]),
    "calibration_memory": st.one_of(st.just(0.0), num(1.0)),
    "calibration_warmup": NON_NEGATIVE,
    "calibration_start": num(0.125, 8.0),
    "decay_grace": NON_NEGATIVE,
    "cap_decay": st.booleans(),
    "sweep_sigma": st.booleans(),
    "display_cap": st.booleans(),
    "placement_calibration": st.booleans(),
    "recalibrate_min_events": st.integers(min_value=0),
    "placement_weight": num(0.0, 1.0),
    "repeat_weight": num(0.0, 1.0),
    "farm_damping": NON_NEGATIVE,
    "tier_pull": num(0.0, below(1.0)),
}

# Exact bounds rather than ``.filter(lambda v: v < 0)``: Hypothesis 6.170 rewrites that filter on
# ``floats(max_value=0.0)`` into a bound that still lets 0.0 through.
NEGATIVE = num(None, below(0.0))
NON_POSITIVE = num(None, 0.0)

#: For keys with a simple one-sided or two-sided rule: values that break it (others at defaults).
SINGLE_KEY_INVALID: dict[str, st.SearchStrategy[Any]] = {
    "mu0": st.one_of(NEGATIVE, num(above(4000.0))),
    "sigma_min": NON_POSITIVE,
    "sigma0": st.one_of(num(None, below(10.0)), num(above(400.0))),
    "eta_min": NEGATIVE,
    "eta_max": num(None, below(ADRParams().eta_min)),
    "s_max": st.integers(max_value=-1),
    "n_min": st.integers(max_value=-1),
    "n_active": st.integers(max_value=0),
    "p_min": st.integers(max_value=0),
    "return_events": st.integers(max_value=-1),
    "recalibrate_min_events": st.integers(max_value=-1),
    "max_players": st.one_of(st.integers(max_value=1), st.integers(min_value=(1 << 32) + 1)),
    "window_len": st.one_of(st.integers(max_value=0), st.integers(min_value=10_001)),
    "alpha": st.one_of(NEGATIVE, num(above(1.0))),
    "nu_min": num(0.0, exclude_lo=True),
    "nu_max": NEGATIVE,
    "sigma_place": num(None, below(10.0)),
}
for _k in ("rho_s", "rho_v", "gamma_phi", "lambda", "sigma_drift", "t_cooldown", "h_req", "late_tolerance",
           "idle_after", "decay_grace"):  # fmt: skip
    SINGLE_KEY_INVALID[_k] = NEGATIVE
for _k in (
    "gamma", "sigma_peak", "w_ref", "theta", "tau", "t_return", "delta_max", "t_active",
    "day_seconds", "initial_spread", "recalibrate_interval", "sweep_interval",
):  # fmt: skip
    SINGLE_KEY_INVALID[_k] = NON_POSITIVE
for _k in ("lambda_phi", "c_loss", "lambda_pool", "beta"):
    SINGLE_KEY_INVALID[_k] = st.one_of(NON_POSITIVE, num(above(1.0)))
SINGLE_KEY_INVALID["calibration_memory"] = num(TINY, below(1.0))
SINGLE_KEY_INVALID["calibration_warmup"] = NEGATIVE
SINGLE_KEY_INVALID["calibration_start"] = st.one_of(num(TINY, below(0.125)), num(above(8.0)))
SINGLE_KEY_INVALID["farm_damping"] = NEGATIVE
SINGLE_KEY_INVALID["tier_pull"] = st.one_of(NEGATIVE, num(1.0))
for _k in ("placement_weight", "repeat_weight"):
    SINGLE_KEY_INVALID[_k] = st.one_of(NEGATIVE, num(above(1.0)))


#: Keys whose rules compare them with another key.
_CROSS_KEYS = frozenset(
    {"mu_min", "mu_max", "mu0", "sigma_min", "sigma_max", "sigma0", "sigma_place", "eta_min", "eta_max"}
)


@st.composite
def valid_mappings(draw: st.DrawFn) -> dict[str, Any]:
    """A whole [adr] table satisfying every rule, cross-key rules included; some keys left out."""
    lo, hi = sorted(draw(st.lists(num(), min_size=2, max_size=2, unique=True)))
    mu0 = draw(num(lo, hi))
    sigma_min = draw(POSITIVE)
    sigma_max = draw(num(sigma_min))
    sigma0 = draw(num(sigma_min, sigma_max))
    eta_min = draw(NON_NEGATIVE)
    m: dict[str, Any] = {
        "mu_min": lo,
        "mu_max": hi,
        "mu0": mu0,
        "sigma_min": sigma_min,
        "sigma_max": sigma_max,
        "sigma0": sigma0,
        "sigma_place": draw(num(sigma_min)),
        "eta_min": eta_min,
        "eta_max": draw(num(eta_min)),
    }
    for key in ALL_KEYS - set(m):
        m[key] = draw(SINGLE_KEY_VALID[key])
    for key in ("nu_min", "nu_max"):
        if draw(st.booleans()):
            del m[key]
    # keys whose rules involve no other key can be left to their defaults
    independent = sorted(set(m) - _CROSS_KEYS)
    for key in draw(st.lists(st.sampled_from(independent), unique=True)):
        m.pop(key, None)
    return m


class TestProperties:
    """Any table of in-range values builds and round-trips; any single out-of-range value is named."""

    def test_strategy_tables_cover_keys(self) -> None:
        assert set(SINGLE_KEY_VALID) == ALL_KEYS
        assert set(SINGLE_KEY_INVALID) == ALL_KEYS - set(BOOL_KEYS) - set(CHOICE_KEYS) - {
            "tier_proportions",
            "mu_min",
            "mu_max",
            "sigma_max",
        }

    @settings(deadline=None, max_examples=300)
    @given(m=valid_mappings())
    def test_valid_mapping_builds(self, m: dict[str, Any]) -> None:
        p = ADRParams.from_mapping(m)
        assert p.problems() == []
        for key, value in m.items():
            got = getattr(p, field_name(key))
            assert (list(got) if isinstance(got, tuple) else got) == value, key
        assert ADRParams.from_mapping(p.to_mapping()) == p
        assert p.pool_low <= 0 <= p.pool_high

    @pytest.mark.parametrize("key", sorted(SINGLE_KEY_VALID))
    @settings(deadline=None, max_examples=30)
    @given(data=st.data())
    def test_single_valid_key_builds(self, key: str, data: st.DataObject) -> None:
        value = data.draw(SINGLE_KEY_VALID[key], label=key)
        p = ADRParams.from_mapping({key: value})
        got = getattr(p, field_name(key))
        assert (list(got) if isinstance(got, tuple) else got) == value
        if key in FLOAT_KEYS:
            assert type(got) is float

    @pytest.mark.parametrize("key", sorted(SINGLE_KEY_INVALID))
    @settings(deadline=None, max_examples=30)
    @given(data=st.data())
    def test_single_invalid_key_is_named(self, key: str, data: st.DataObject) -> None:
        value = data.draw(SINGLE_KEY_INVALID[key], label=key)
        with pytest.raises(ConfigError) as info:
            ADRParams.from_mapping({key: value})
        by_key = {p.key: p for p in info.value.problems}
        assert f"adr.{key}" in by_key, info.value.problems
        assert by_key[f"adr.{key}"].value == value
        assert f"adr.{key}" in str(info.value)
