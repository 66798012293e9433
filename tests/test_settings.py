"""The shipped config documents every key, and the loader refuses what it does not know."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from arenad.daemon.config import SECRET_KEYS
from arenad.errors import ConfigError
from arenad.settings import Settings, load_settings

SHIPPED = Path(__file__).parents[1] / "config" / "arenad.toml"


class TestShippedConfig:
    """config/arenad.toml names every key of every section with its default."""

    def test_every_key_is_documented(self) -> None:
        text = SHIPPED.read_text()
        data = tomllib.loads(text)
        defaults = Settings()
        for section in Settings.model_fields:
            if section == "tail":  # an array of tables, shown as a commented example
                assert "# [[tail]]" in text
                continue
            value = getattr(defaults, section)
            if section == "adr":
                keys = list(value.to_mapping())
            else:
                keys = [f.alias or name for name, f in type(value).model_fields.items()]
            for key in keys:
                assert key in data.get(section, {}), f"[{section}] {key} is not in {SHIPPED.name}"
        # Optional keys of [adr] appear as comments.
        assert "# nu_min" in text and "# nu_max" in text

    def test_shipped_values_are_the_defaults(self) -> None:
        loaded = load_settings(SHIPPED)
        defaults = Settings()
        for section in Settings.model_fields:
            if section in ("adr", "tail"):
                continue  # the tier proportions are written with 16 digits; tail is commented
            assert getattr(loaded, section) == getattr(defaults, section), section
        assert loaded.adr.tier_proportions == pytest.approx(defaults.adr.tier_proportions)


class TestClusterSection:
    """[cluster] refuses bad values naming each key; off by default."""

    def test_default_is_off(self) -> None:
        assert Settings().cluster.role == "off" and not Settings().cluster.enabled

    def test_problems_name_their_keys(self) -> None:
        data = {
            "cluster": {
                "role": "leader",
                "servers": ["http://x:1"],
                "stream": "a.b",
                "subject_prefix": "a b",
                "filter": ["arena.>.x"],
                "lease_ttl": 0,
                "stream_replicas": 7,
                "nope": 1,
            }
        }
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping(data)
        keys = {p.key for p in info.value.problems}
        assert keys >= {
            "cluster.role", "cluster.servers", "cluster.stream", "cluster.subject_prefix",
            "cluster.filter", "cluster.lease_ttl", "cluster.stream_replicas", "cluster.nope",
        }  # fmt: skip

    def test_a_stream_that_forgets_before_it_deduplicates_is_refused(self) -> None:
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({"cluster": {"max_age": 60.0, "duplicate_window": 600.0}})
        assert [p.key for p in info.value.problems] == ["cluster.max_age"]


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


SECTIONS = [name for name in Settings.model_fields if name not in ("adr", "tail")]
#: The arrays of tables, with a valid entry each (the unknown key goes beside its keys).
ENTRIES: dict[str, tuple[str, dict[str, object]]] = {
    "udp.keys": ("udp", {"keys": [{"id": "eu-1", "secret_env": "K"}], "auth": "required"}),
    "source_udp.servers": ("source_udp", {"servers": [{"name": "cs", "address": "10.0.0.5"}]}),
    "scopes.season": ("scopes", {"season": [{"name": "s1", "start": 0}]}),
    "scopes.event": ("scopes", {"event": [{"name": "cup", "start": 0, "end": 1}]}),
}


def section_keys(section: str) -> list[str]:
    model = type(getattr(Settings(), section))
    return [f.alias or name for name, f in model.model_fields.items()]


def problem_keys(data: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        Settings.from_mapping(data)
    return [p.key for p in info.value.problems]


unknown_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)


class TestEverySectionIsStrict:
    """Each section, and each array of tables, refuses an unknown key and a wrong type by name."""

    @settings(max_examples=200, deadline=None)
    @given(st.sampled_from(SECTIONS), unknown_names, st.integers() | st.text(max_size=5) | st.booleans())
    def test_an_unknown_key_is_named(self, section: str, name: str, value: object) -> None:
        assume(name not in section_keys(section) and name not in SECRET_KEYS)
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({section: {name: value}})
        (problem,) = info.value.problems
        assert (problem.key, problem.value) == (f"{section}.{name}", value)
        assert problem.message.startswith("unknown key (known: ")

    @settings(max_examples=100, deadline=None)
    @given(st.sampled_from(sorted(ENTRIES)), unknown_names)
    def test_an_unknown_key_of_an_entry_is_named_with_its_index(self, table: str, name: str) -> None:
        section, data = ENTRIES[table]
        array = table.partition(".")[2]
        entry: dict[str, object] = dict(data[array][0])  # type: ignore[index]
        assume(name not in entry and name not in ("secret_file", "end", "servers", "secret_env"))
        assume(name not in SECRET_KEYS)
        Settings.from_mapping({section: data})  # valid as given
        bad = {**data, array: [{**entry, name: 1}]}
        assert f"{table}[0].{name}" in problem_keys({section: bad})

    @pytest.mark.parametrize(("section", "key"), [(s, k) for s in SECTIONS for k in section_keys(s)], ids=str)
    def test_a_wrong_type_is_named(self, section: str, key: str) -> None:
        refused = 0
        for wrong in ({"a": 1}, 7, "seven", [7]):
            try:
                Settings.from_mapping({section: {key: wrong}})
            except ConfigError as e:
                refused += 1
                named = f"{section}.{key}"
                assert all(
                    p.key == named or p.key.startswith((f"{named}.", f"{named}[")) for p in e.problems
                ), e
        assert refused >= 3, f"{section}.{key} took values of three types"

    def test_an_unknown_section_is_named(self) -> None:
        assert problem_keys({"udp": {}, "upd": {"listen": "off"}}) == ["upd"]

    def test_an_entry_that_is_no_table_is_named_with_its_index(self) -> None:
        assert problem_keys({"udp": {"keys": ["eu-1"], "auth": "required"}}) == ["udp.keys[0]"]
        assert problem_keys({"tail": [{"format": "openarena", "path": "/x"}, 3]}) == ["tail[1]"]


toml_values = st.recursive(
    st.text(max_size=8)
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.booleans()
    | st.datetimes(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def section_tables(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    section = draw(st.sampled_from(SECTIONS))
    keys = st.sampled_from([*section_keys(section), "other"])
    return section, draw(st.dictionaries(keys, toml_values, max_size=4))


class TestAnyTable:
    """Whatever a section holds, loading it gives settings or a ConfigError naming that section."""

    @settings(max_examples=400, deadline=None)
    @given(section_tables())
    def test_settings_or_config_error(self, drawn: tuple[str, dict[str, object]]) -> None:
        section, table = drawn
        try:
            Settings.from_mapping({section: table})
        except ConfigError as e:
            assert e.problems
            for p in e.problems:
                assert p.key == section or p.key.startswith((f"{section}.", f"{section}[")), p
                assert p.message and "Input should" not in p.message, p
