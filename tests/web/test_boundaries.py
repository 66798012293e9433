"""The web layer's import rules: ports, not the daemon; its pure modules stay pure."""

from __future__ import annotations

import ast
from pathlib import Path

import arenad

ROOT = Path(arenad.__file__).parent
WEB = ROOT / "web"
#: Pure like the core (STYLE.md §1): values in, values out; no I/O, clock, network or daemon.
PURE = ("views.py", "web/balance.py", "web/chart.py", "web/reader.py", "web/request.py", "web/port.py")
IMPURE = {
    "asyncio", "socket", "time", "os", "io", "pathlib", "subprocess", "threading", "logging",
    "structlog", "aiohttp", "uvloop", "sqlite3", "random", "urllib.request", "http",
}  # fmt: skip


def imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


class TestBoundaries:
    """The web package reads the daemon only through its ports."""

    def test_no_daemon_object(self) -> None:
        for path in sorted(WEB.rglob("*.py")):
            found = {
                m for m in imports(path) if m.startswith(("arenad.daemon.service", "arenad.daemon.admin"))
            }
            assert found == set(), f"{path.name} imports {found}"

    def test_only_settings_from_the_daemon(self) -> None:
        for path in sorted(WEB.rglob("*.py")):
            daemon = {m for m in imports(path) if m.startswith("arenad.daemon")}
            assert daemon <= {"arenad.daemon.config"}, f"{path.name} imports {daemon}"

    def test_pure_modules(self) -> None:
        for name in PURE:
            mods = imports(ROOT / name)
            bad = {m for m in mods if m.split(".")[0] in IMPURE or m in IMPURE}
            assert bad == set(), f"{name} imports {bad}"

    def test_no_aiohttp_in_the_package(self) -> None:
        # aiohttp is a dev dependency (bench/web_aiohttp.py, the comparison); arenad serves with httptools.
        for path in sorted(WEB.rglob("*.py")):
            assert not {m for m in imports(path) if m.startswith("aiohttp")}, path.name

    def test_settings_do_not_load_the_server(self) -> None:
        mods = imports(WEB / "config.py") | imports(WEB / "__init__.py")
        assert not {m for m in mods if m.startswith(("aiohttp", "jinja2", "arenad.web."))}
