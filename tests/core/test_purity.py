"""The rating core stays pure: no I/O, clock or daemon libraries (STYLE.md §1)."""

from __future__ import annotations

import ast
from pathlib import Path

import arenad.core

FORBIDDEN = {
    "asyncio", "socket", "msgpack", "prometheus_client", "structlog", "aiomqtt", "paho",
    "uvloop", "time", "datetime", "os", "io", "pathlib", "subprocess", "threading", "logging",
    "random", "json", "selectors", "ssl", "tomllib",
}  # fmt: skip
CORE = Path(arenad.core.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


class TestCoreImports:
    """No module of arenad.core imports anything that does I/O or reads a clock."""

    def test_core_modules_exist(self) -> None:
        assert {p.name for p in CORE.glob("*.py")} >= {"engine.py", "ladder.py", "params.py", "events.py"}

    def test_no_forbidden_imports(self) -> None:
        offenders = {p.name: sorted(_imports(p) & FORBIDDEN) for p in CORE.glob("*.py")}
        assert {k: v for k, v in offenders.items() if v} == {}

    def test_core_imports_only_core_or_errors_from_arenad(self) -> None:
        for p in CORE.glob("*.py"):
            tree = ast.parse(p.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("arenad"):
                    assert node.module.startswith(("arenad.core", "arenad.errors")), (p.name, node.module)
