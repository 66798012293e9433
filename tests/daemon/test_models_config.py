"""``[models]``: the primary is an ADR variant, shadows are known online models, the window is bounded;
broken settings fail ``check-config`` and ``arenad run`` with the key and the value named."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arenad.daemon.config as config_module
from arenad.core.params import PAPER, ADRParams
from arenad.daemon.config import PRIMARY_MODELS, ModelsSettings, validate
from arenad.errors import ConfigError, ConfigProblem
from arenad.models import BUILTIN_MODELS, ModelFactory
from arenad.settings import Settings


def problems(**kw: Any) -> list[ConfigProblem]:
    return validate(ModelsSettings, kw, "models")[1]


def keys_and_values(found: list[ConfigProblem]) -> set[tuple[str, object]]:
    return {(p.key, p.value) for p in found}


class OfflineModel:
    """Stands in for Bradley–Terry or WHR: refits over the whole history."""

    offline = True
    name = "refit"


class TestModelsSettings:
    """Each bad value is named with its key and a reason."""

    def test_defaults_are_valid(self) -> None:
        assert problems() == []
        assert problems(shadows=("elo", "glicko2", "trueskill")) == []

    @pytest.mark.parametrize("primary", ["elo", "glicko2", "", "ADR"])
    def test_primary_must_be_an_adr_variant(self, primary: str) -> None:
        (problem,) = problems(primary=primary)
        assert problem.key == "models.primary" and problem.value == primary
        assert "ladder" in problem.message and "adr-printed" in problem.message

    @pytest.mark.parametrize("window", [0, 1, 100_001, 2.5, "10", True])
    def test_window_is_a_bounded_integer(self, window: object) -> None:
        assert keys_and_values(problems(window=window)) == {("models.window", window)}

    def test_unknown_repeated_and_primary_shadows(self) -> None:
        found = problems(shadows=("elo", "nope", "elo", "adr"))
        assert keys_and_values(found) == {
            ("models.shadows", "nope"),
            ("models.shadows", "elo"),
            ("models.shadows", "adr"),
        }
        messages = {p.value: p.message for p in found}
        assert "no such rating model" in messages["nope"] and "glicko2" in messages["nope"]
        assert "twice" in messages["elo"]
        assert "primary" in messages["adr"]

    def test_an_adr_variant_other_than_the_primary_may_shadow_it(self) -> None:
        assert problems(shadows=("adr-printed",)) == []

    def test_shadows_must_be_a_list_of_names(self) -> None:
        assert keys_and_values(problems(shadows=("elo", 3))) == {("models.shadows", 3)}
        assert keys_and_values(problems(shadows="elo")) == {("models.shadows", "elo")}

    def test_offline_models_are_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        known: dict[str, ModelFactory] = {**BUILTIN_MODELS, "refit": OfflineModel}  # type: ignore[dict-item]
        monkeypatch.setattr(config_module, "discover_models", lambda: (known, []))
        (problem,) = problems(shadows=("elo", "refit"))
        assert (problem.key, problem.value) == ("models.shadows", "refit")
        assert "offline" in problem.message

    def test_built_in_offline_models_are_refused(self) -> None:
        offline = [n for n, f in BUILTIN_MODELS.items() if getattr(f, "offline", False)]
        for name in offline:  # Bradley–Terry and WHR, where they are built in
            assert keys_and_values(problems(shadows=(name,))) == {("models.shadows", name)}

    def test_a_plugin_that_fails_to_load_is_named(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(
            config_module, "discover_models", lambda: (BUILTIN_MODELS, ["acme: ImportError: no"])
        )
        (problem,) = problems(shadows=("acme",))
        assert "failed to load" in problem.message and "ImportError" in problem.message

    def test_a_factory_that_raises_is_named(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def broken() -> Any:
            raise RuntimeError("no licence")

        monkeypatch.setattr(
            config_module, "discover_models", lambda: ({**BUILTIN_MODELS, "acme": broken}, [])
        )
        (problem,) = problems(shadows=("acme",))
        assert "cannot be built" in problem.message and "no licence" in problem.message


toml_values = st.recursive(
    st.sampled_from(["adr", "adr-printed", "elo", "glicko2", "", "nope"])
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats()
    | st.booleans(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


class TestAnyTable:
    """Whatever a ``[models]`` table holds, loading it gives settings or a ConfigError, nothing else."""

    @settings(max_examples=300, deadline=None)
    @given(st.dictionaries(st.sampled_from(["primary", "shadows", "window", "other"]), toml_values))
    def test_settings_or_config_error(self, table: dict[str, Any]) -> None:
        try:
            loaded = Settings.from_mapping({"models": table, "adr": {"anchor": True}})
        except ConfigError as e:
            assert e.problems and all(p.key.startswith(("models.", "models")) for p in e.problems)
        else:
            assert loaded.models.primary in PRIMARY_MODELS


class TestPrimaryParameters:
    """The primary variant's parameters are folded into ``Settings.adr``."""

    def test_variants_are_those_of_the_model_plugins(self) -> None:
        for name, overrides in PRIMARY_MODELS.items():
            model: Any = BUILTIN_MODELS[name]()
            params = {k: v for k, v in overrides.items() if k != "preset"}
            assert replace(ADRParams(), **params) == model.params, name  # type: ignore[arg-type]
            assert Settings.from_mapping({"models": {"primary": name}}).adr == model.params, name

    def test_paper_variants_set_every_parameter_of_the_preset(self) -> None:
        """The table spells the preset out, so the contradiction check sees each of its keys."""
        for name in ("adr-paper", "adr-printed", "adr-unanchored"):
            table = PRIMARY_MODELS[name]
            assert table["preset"] == "paper"
            for key, value in PAPER.items():
                if key not in ("loser_rule", "anchor"):
                    assert table[key] == value, (name, key)
        assert PRIMARY_MODELS["adr"] == {}

    def test_a_variant_sets_its_parameters(self) -> None:
        assert Settings.from_mapping({"models": {"primary": "adr-printed"}}).adr.loser_rule == "printed"
        settings = Settings.from_mapping({"models": {"primary": "adr-unanchored"}, "adr": {"mu0": 1500.0}})
        assert settings.adr == ADRParams.paper(anchor=False, mu0=1500.0)
        assert Settings.from_mapping({"models": {"primary": "adr-paper"}}).adr == ADRParams.paper()
        assert Settings.from_mapping({}).adr == ADRParams()

    @pytest.mark.parametrize(
        ("primary", "adr"),
        [
            ("adr-paper", {"theta": 300}),
            ("adr-printed", {"link": "logistic"}),
            ("adr-unanchored", {"preset": "default"}),
        ],
    )
    def test_a_paper_variant_contradicted_by_adr_is_a_problem(
        self, primary: str, adr: dict[str, Any]
    ) -> None:
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({"models": {"primary": primary}, "adr": adr})
        (problem,) = info.value.problems
        (key,) = adr
        assert problem.key == "models.primary" and problem.value == primary
        assert f"adr.{key}" in problem.message and 'preset = "paper"' in problem.message

    def test_a_paper_variant_accepts_the_preset_and_its_values_repeated(self) -> None:
        table = {"preset": "paper", "theta": 400, "link": "arctan", "delta_max": 80.0}
        settings = Settings.from_mapping({"models": {"primary": "adr-printed"}, "adr": table})
        assert settings.adr == ADRParams.paper(loser_rule="printed", delta_max=80.0)

    def test_a_variant_and_an_adr_key_that_disagree_are_a_problem(self) -> None:
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({"models": {"primary": "adr-printed"}, "adr": {"loser_rule": "corrected"}})
        (problem,) = info.value.problems
        assert problem.key == "models.primary" and "loser_rule" in problem.message
        agreeing = {"models": {"primary": "adr-printed"}, "adr": {"loser_rule": "printed"}}
        assert Settings.from_mapping(agreeing).adr.loser_rule == "printed"

    def test_every_models_problem_is_reported_at_once(self) -> None:
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({"models": {"primary": "elo", "shadows": ["nope"], "window": 0, "x": 1}})
        assert {p.key for p in info.value.problems} == {
            "models.primary",
            "models.shadows",
            "models.window",
            "models.x",
        }


def arenad(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arenad", *args], capture_output=True, text=True, timeout=60, check=False
    )


class TestBrokenConfigFailsAtStart:
    """``check-config`` lists each problem; ``arenad run`` refuses to start (exit 2) naming the key."""

    BAD = '[models]\nprimary = "elo"\nshadows = ["glicko2", "nope"]\nwindow = 0\n'

    def test_check_config_names_each_key(self, tmp_path: Path) -> None:
        config = tmp_path / "arenad.toml"
        config.write_text(self.BAD)
        out = arenad("check-config", str(config))
        assert out.returncode == 2
        lines = out.stderr.splitlines()
        assert any("models.primary: 'elo':" in line and "ADR" in line for line in lines), lines
        assert any("models.shadows: 'nope':" in line for line in lines), lines
        assert any("models.window: 0:" in line for line in lines), lines
        assert not any("'glicko2'" in line for line in lines)

    def test_run_refuses_to_start(self, tmp_path: Path) -> None:
        config = tmp_path / "arenad.toml"
        config.write_text(self.BAD)
        args = ["run", "--config", str(config), "--state-dir", str(tmp_path / "s")]
        out = arenad(*args, "--udp", "off", "--query", "off", "--metrics", "off")
        assert out.returncode == 2
        assert "models.primary" in out.stderr and "models.shadows" in out.stderr
        assert not (tmp_path / "s").exists()  # nothing was started
