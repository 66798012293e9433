"""The import graph of ``arenad/``: no circles, and the settings below the daemon and the feeds.

Read with ``ast`` from the source (every import statement, a function's lazy ones included), so
a circle is found before it bites at import time. ``from package import name`` counts as an
import of ``package.name`` when that is a module. A package's ``__init__`` run by importing one of
its modules is not an edge: an ``__init__`` that re-exports its modules would otherwise be a
circle with each of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "arenad"

#: The daemon's rooms and who may import them: the protocol modules (admin, query, the sources)
#: are handed ports, never the daemon, so none of them imports ``arenad.daemon.service``.
ROOMS = ("pipeline", "recovery", "recompute", "live", "statedir", "applier")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """Modules of ``arenad`` (or elsewhere: the feed plugins) that module ``name`` imports."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & MODULES.keys()
            out.update(submodules or {target})
    return out - {name}


GRAPH = {name: {m for m in imports_of(name) if m in MODULES} for name in MODULES}


def reachable(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def circles() -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root, first in GRAPH.items():
        if root in index:
            continue
        work = [(root, iter(sorted(first)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.add(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(GRAPH[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


SETTINGS_MODULES = sorted(n for n in MODULES if n.startswith(("arenad.settings", "arenad.daemon.config")))


class TestImportGraph:
    """No module of arenad imports itself back."""

    def test_the_walker_sees_the_imports(self) -> None:
        assert "arenad.daemon.config" in GRAPH["arenad.settings"]
        assert "arenad.daemon.admin" in GRAPH["arenad.daemon.service"]
        assert "arenad.daemon.pipeline" in GRAPH["arenad.daemon.recovery"]

    def test_the_walker_finds_a_circle(self) -> None:
        """The search itself: a circle added to a copy of the graph is found."""
        GRAPH["arenad.daemon.live"].add("arenad.daemon.service")
        try:
            assert any({"arenad.daemon.live", "arenad.daemon.service"} <= c for c in circles())
        finally:
            GRAPH["arenad.daemon.live"].discard("arenad.daemon.service")

    def test_no_circles(self) -> None:
        assert circles() == []

    def test_only_the_cli_imports_the_daemon(self) -> None:
        """The rooms and the protocol modules are handed ports: only the wiring's callers import it."""
        importers = sorted(n for n, deps in GRAPH.items() if "arenad.daemon.service" in deps)
        assert importers == ["arenad.cli"]

    def test_the_rooms_do_not_import_the_servers(self) -> None:
        for room in ROOMS:
            deps = reachable(f"arenad.daemon.{room}")
            assert not deps & {"arenad.daemon.admin", "arenad.daemon.query", "arenad.daemon.service"}, room


class TestSettingsLayer:
    """The settings modules sit below the daemon and the feeds: they import neither."""

    def test_the_settings_modules_are_found(self) -> None:
        assert {"arenad.settings", "arenad.daemon.config", "arenad.daemon.config_sources"} <= set(
            SETTINGS_MODULES
        )

    def test_no_daemon_module_below_the_settings(self) -> None:
        for name in SETTINGS_MODULES:
            below = reachable(name)
            daemon = {m for m in below if m.startswith("arenad.daemon.") and m not in SETTINGS_MODULES}
            assert daemon == set(), f"{name} imports {sorted(daemon)}"

    def test_no_feed_below_the_settings(self) -> None:
        for name in SETTINGS_MODULES:
            below = reachable(name) | {name}
            feeds = {
                m for n in below for m in imports_of(n) if m == "arenad.feeds" or m.startswith("arenad_feeds")
            }
            assert feeds == set(), f"{name} reaches {sorted(feeds)}"
