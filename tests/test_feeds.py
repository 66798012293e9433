"""The one lookup of a feed plugin by name, over one discovery per process."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from arenad import feeds
from arenad.errors import ConfigError
from arenad.feeds import FeedPlugin, builtin_feeds, feed_plugin, loaded_feeds


@pytest.fixture
def fresh_discovery() -> Iterator[None]:
    loaded_feeds.cache_clear()
    yield
    loaded_feeds.cache_clear()


class TestFeedPlugin:
    """A known format gives its plugin; anything else a ConfigError naming the key and the choices."""

    def test_built_ins_are_found(self) -> None:
        for name in ("arenad", "openarena", "source"):
            assert feed_plugin(name, key="--format").name == name

    def test_unknown_format_names_the_key_the_value_and_the_known_ones(self) -> None:
        with pytest.raises(ConfigError) as err:
            feed_plugin("nope", key="tail.format", source="arenad.toml")
        (problem,) = err.value.problems
        assert (problem.key, problem.value) == ("tail.format", "nope")
        assert problem.message == f"unknown format (known: {', '.join(sorted(loaded_feeds()[0]))})"
        assert "arenad, openarena, source" in problem.message
        assert err.value.source == "arenad.toml"

    def test_a_broken_third_party_plugin_says_why(self, monkeypatch: pytest.MonkeyPatch) -> None:
        broken: tuple[Mapping[str, FeedPlugin], tuple[str, ...]] = (
            builtin_feeds(),
            ("acme: ModuleNotFoundError: No module named 'acme_feeds'",),
        )
        monkeypatch.setattr(feeds, "loaded_feeds", lambda: broken)
        with pytest.raises(ConfigError) as err:
            feed_plugin("acme", key="--format")
        assert err.value.problems[0].message == (
            "the feed plugin failed to load (ModuleNotFoundError: No module named 'acme_feeds')"
        )


class TestLoadedFeeds:
    """Entry points are read once per process, however many lookups follow."""

    @pytest.mark.usefixtures("fresh_discovery")
    def test_discovery_runs_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        calls: list[int] = []
        real = feeds.discover_feeds

        def counted() -> tuple[dict[str, FeedPlugin], list[str]]:
            calls.append(1)
            return real()

        monkeypatch.setattr(feeds, "discover_feeds", counted)
        for name in ("arenad", "openarena", "source"):
            feed_plugin(name, key="--format")
        assert loaded_feeds() is loaded_feeds()
        assert calls == [1]

    def test_the_plugins_cannot_be_changed_by_a_caller(self) -> None:
        plugins, _errors = loaded_feeds()
        with pytest.raises(TypeError):
            plugins["x"] = plugins["arenad"]  # type: ignore[index]
