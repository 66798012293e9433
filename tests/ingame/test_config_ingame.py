"""[ingame] settings: strict, every bad key named, templates checked against their fields."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arenad.errors import ConfigError
from arenad.ingame.rcon import quake3_text, source_text
from arenad.settings import Settings


def problems(data: dict[str, object]) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        Settings.from_mapping(data)
    return {p.key: p.message for p in err.value.problems}


class TestInGameSettings:
    """Off by default; each problem reported with its key."""

    def test_off_by_default(self) -> None:
        s = Settings()
        assert not s.ingame.enabled and s.ingame.servers == () and s.ingame.announce == ()

    def test_every_bad_key(self) -> None:
        got = problems(
            {
                "ingame": {
                    "enabled": True,
                    "prefix": "!!",
                    "announce": ["placed", "nope"],
                    "bogus": 1,
                    "templates": {
                        "rank": "{name} {nope}",
                        "top_row": "{rating:d}",
                        "usage": "{usage.__class__}",
                    },
                    "servers": [
                        {"name": "oa", "address": "127.0.0.1", "kind": "quake4", "password_env": "X"}
                    ],
                }
            }
        )
        assert set(got) >= {
            "ingame.prefix",
            "ingame.announce",
            "ingame.bogus",
            "ingame.templates.rank",
            "ingame.templates.top_row",
            "ingame.templates.usage",
            "ingame.servers[0].kind",
            "ingame.servers[0].address",
        }
        assert "unknown field {nope}" in got["ingame.templates.rank"]

    def test_a_server_needs_one_password_source(self) -> None:
        got = problems({"ingame": {"servers": [{"name": "oa", "address": "127.0.0.1:1"}]}})
        assert "ingame.servers[0].password_env" in got
        got = problems(
            {
                "ingame": {
                    "servers": [
                        {"name": "oa", "address": "127.0.0.1:1", "password_env": "A", "password_file": "b"}
                    ]
                }
            }
        )
        assert "ingame.servers[0].password_file" in got


class TestSanitisers:
    """Whatever the text, the result cannot end a command or start another."""

    @given(st.text(max_size=2000))
    def test_quake3(self, text: str) -> None:
        out = quake3_text(text)
        assert len(out) <= 150
        assert not any(c in out for c in ';"\n\r\x00')
        assert "//" not in out and "/*" not in out

    @given(st.text(max_size=2000))
    def test_source(self, text: str) -> None:
        out = source_text(text)
        assert len(out) <= 150 and not any(c in out for c in ';"\n\r\x00')
