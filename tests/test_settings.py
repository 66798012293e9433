"""The shipped config documents every key, and the loader refuses what it does not know."""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from arenad.errors import ConfigError
from arenad.settings import Settings, load_settings

SHIPPED = Path(__file__).parents[1] / "config" / "arenad.toml"


class TestShippedConfig:
    """config/arenad.toml names every key of every section with its default."""

    def test_every_key_is_documented(self) -> None:
        text = SHIPPED.read_text()
        data = tomllib.loads(text)
        defaults = Settings()
        for section in fields(Settings):
            if section.name == "tail":  # an array of tables, shown as a commented example
                assert "# [[tail]]" in text
                continue
            value = getattr(defaults, section.name)
            keys = value.to_mapping().keys() if section.name == "adr" else [f.name for f in fields(value)]
            for key in keys:
                assert key in data.get(section.name, {}), f"[{section.name}] {key} is not in {SHIPPED.name}"
        # Optional keys of [adr] appear as comments.
        assert "# nu_min" in text and "# nu_max" in text

    def test_shipped_values_are_the_defaults(self) -> None:
        loaded = load_settings(SHIPPED)
        defaults = Settings()
        for section in fields(Settings):
            if section.name in ("adr", "tail"):
                continue  # the tier proportions are written with 16 digits; tail is commented
            assert getattr(loaded, section.name) == getattr(defaults, section.name), section.name
        assert loaded.adr.tier_proportions == pytest.approx(defaults.adr.tier_proportions)


class TestDaemonSections:
    """Every problem of the daemon sections is named by key."""

    def test_problems_name_their_keys(self) -> None:
        data = {
            "udp": {"listen": "nowhere", "allow": ["300.1.1.1/8"], "max_datagram": 5},
            "mqtt": {"url": "http://x", "qos": 2, "payload": "xml", "reconnect_min": -1},
            "query": {"max_line": 1, "nope": 1},
            "daemon": {"queue_size": 0, "checkpoint_interval": "soon", "commit_interval": 2.5},
            "log": {"format": "xml", "level": "loud"},
            "metrics": {"listen": "1.2.3.4:99999"},
            "extra": {},
        }
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping(data)
        keys = {p.key for p in info.value.problems}
        assert keys >= {
            "udp.listen", "udp.allow", "udp.max_datagram", "mqtt.url", "mqtt.qos", "mqtt.payload",
            "mqtt.reconnect_min", "query.max_line", "query.nope", "daemon.queue_size",
            "daemon.checkpoint_interval", "daemon.commit_interval", "log.format", "log.level",
            "metrics.listen", "extra",
        }  # fmt: skip

    def test_off_disables_sources(self) -> None:
        s = Settings.from_mapping({"udp": {"listen": "off"}, "mqtt": {"url": "off"}})
        assert not s.udp.enabled
        assert not s.mqtt.enabled
        assert Settings.from_mapping({"mqtt": {"url": "mqtt://127.0.0.1:1883"}}).mqtt.enabled

    def test_tail_entries(self) -> None:
        s = Settings.from_mapping(
            {
                "tail": [
                    {
                        "format": "openarena",
                        "path": "/x/games.log",
                        "server": "oa-1",
                        "options": {"bots": "exclude"},
                    }
                ]
            }
        )
        assert s.tail[0].format == "openarena"
        assert s.tail[0].key == "tail:/x/games.log"
        assert dict(s.tail[0].options) == {"bots": "exclude"}
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({"tail": [{"format": "", "path": 3, "nope": 1}]})
        assert {p.key for p in info.value.problems} == {"tail[0].format", "tail[0].path", "tail[0].nope"}
