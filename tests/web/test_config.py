"""The [web] settings: defaults, refusals naming the key, check-config and `arenad run --web`."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from arenad.cli import _parser, apply_run_flags, main
from arenad.errors import ConfigError
from arenad.settings import Settings, load_settings
from arenad.web.config import WebSettings


class TestWebSettings:
    """[web] is strict and frozen like every section."""

    def test_defaults(self) -> None:
        web = Settings().web
        assert web.listen == "127.0.0.1:8080"
        assert web.enabled
        assert web.cors_origins == ()
        assert not WebSettings(listen="off").enabled

    def test_the_shipped_config_documents_it(self) -> None:
        shipped = load_settings(Path(__file__).parents[2] / "config" / "arenad.toml").web
        assert shipped == WebSettings()

    @pytest.mark.parametrize(
        ("table", "key"),
        [
            ({"listen": "nowhere"}, "web.listen"),
            ({"cors_origins": ["https://a.example/path"]}, "web.cors_origins"),
            ({"cache_max_age": -1}, "web.cache_max_age"),
            ({"cache_max_age": "5"}, "web.cache_max_age"),
            ({"rate_limit": -1.0}, "web.rate_limit"),
            ({"trusted_proxies": ["not-a-net"]}, "web.trusted_proxies"),
            ({"page_size": 5}, "web.page_size"),
            ({"lsten": "off"}, "web.lsten"),
        ],
    )
    def test_refusals_name_the_key(self, table: dict[str, object], key: str) -> None:
        with pytest.raises(ConfigError) as e:
            Settings.from_mapping({"web": table})
        assert e.value.problems[0].key.startswith(key)

    def test_frozen(self) -> None:
        with pytest.raises(ValueError, match="frozen"):
            WebSettings().listen = "off"


class TestCommandLine:
    """check-config reports [web] problems; `run --web` overrides the listen address."""

    def test_check_config(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        bad = tmp_path / "bad.toml"
        bad.write_text('[web]\nlisten = "nowhere"\ncors_origins = ["*"]\n', encoding="utf-8")
        assert main(["check-config", str(bad)]) == 2
        assert "web.listen" in capsys.readouterr().err
        good = tmp_path / "good.toml"
        good.write_text('[web]\nlisten = "off"\ncors_origins = ["*"]\n', encoding="utf-8")
        assert main(["check-config", str(good)]) == 0

    @pytest.mark.parametrize(("flag", "enabled"), [("127.0.0.1:9999", True), ("off", False)])
    def test_run_web_flag(self, flag: str, enabled: bool) -> None:
        args = _parser().parse_args(["run", "--web", flag])
        settings = apply_run_flags(Settings(), args)
        assert settings.web.listen == flag
        assert settings.web.enabled is enabled

    def test_bad_run_web_flag(self) -> None:
        args: argparse.Namespace = _parser().parse_args(["run", "--web", "nonsense"])
        with pytest.raises(ConfigError) as e:
            apply_run_flags(Settings(), args)
        assert e.value.problems[0].key == "web.listen"
