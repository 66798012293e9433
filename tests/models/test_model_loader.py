"""The ``arenad.models`` entry-point group: built-ins registered, third-party models found."""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from arenad.cli import main
from arenad.models import BUILTIN_MODELS, discover_models, is_offline, placement_pairs, rates_matches


def test_every_builtin_is_a_registered_entry_point() -> None:
    registered = {ep.name: ep for ep in entry_points(group="arenad.models")}
    assert set(BUILTIN_MODELS) <= set(registered)
    for name, factory in BUILTIN_MODELS.items():
        model = registered[name].load()()
        assert type(model) is type(factory())
        assert model.name == name


def _install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, entry: str) -> None:
    """A real distribution on sys.path: a module and a dist-info with an entry_points.txt."""
    (tmp_path / f"{module}.py").write_text(
        "from arenad.models.elo import Elo, EloParams\n"
        "def halfk():\n"
        "    return Elo(EloParams(k=12.0), name='elo-half')\n"
        "NOT_CALLABLE = 3\n"
    )
    info = tmp_path / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[arenad.models]\n{entry}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_third_party_model_is_discovered_and_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path, monkeypatch, "arenad_test_models", "elo-half = arenad_test_models:halfk")
    models, errors = discover_models()
    assert errors == []
    model = models["elo-half"]()
    model.update("a", "b", 0.0)
    # K = 12 moves half as far as the built-in K = 24 from an even start.
    builtin = BUILTIN_MODELS["elo"]()
    builtin.update("a", "b", 0.0)
    assert model.rating("a") - 1500.0 == pytest.approx((builtin.rating("a") - 1500.0) / 2)


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("broken = arenad_test_broken:missing", "AttributeError"),
        ("broken = arenad_test_nowhere:thing", "ModuleNotFoundError"),
        ("broken = arenad_test_broken:NOT_CALLABLE", "not callable"),
    ],
)
def test_broken_plugin_is_reported_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, fragment: str
) -> None:
    _install_plugin(tmp_path, monkeypatch, "arenad_test_broken", entry)
    models, errors = discover_models()
    assert "broken" not in models
    assert len(errors) == 1 and errors[0].startswith("broken: ") and fragment in errors[0]
    assert set(BUILTIN_MODELS) <= set(models)


def test_plugins_command_lists_third_party_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _install_plugin(tmp_path, monkeypatch, "arenad_test_listed", "elo-half = arenad_test_listed:halfk")
    assert main(["plugins"]) == 0
    assert '"elo-half"' in capsys.readouterr().out


def test_placement_pairs() -> None:
    assert placement_pairs([["a"], ["b", "c"], ["d"]]) == [
        ("a", "b"),
        ("a", "c"),
        ("a", "d"),
        ("b", "d"),
        ("c", "d"),
    ]
    assert placement_pairs([["a", "b"]]) == []  # a tie is no pairwise outcome


def test_capabilities_of_kill_only_models() -> None:
    for name in ("adr-paper", "elo"):
        model = BUILTIN_MODELS[name]()
        assert not rates_matches(model)
        assert not is_offline(model)
