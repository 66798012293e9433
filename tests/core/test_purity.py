"""The rating core and the modules as pure as it stay so: no I/O, clock or daemon libraries.

STYLE.md §1 and §2: the core (``arenad/core``), the scopes (``arenad/scopes.py``), the rating
models (``arenad/models/``), the wire decoders (``arenad/decode.py``), the journal records
(``arenad/records.py``) and the record applier (``arenad/daemon/applier.py``) take their inputs as
values, time included, and return values. Read with ``ast``, so an import or a call that would
break that fails here, before anything runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import arenad

FORBIDDEN = {
    "asyncio", "socket", "msgpack", "prometheus_client", "structlog", "aiomqtt", "paho",
    "uvloop", "time", "datetime", "os", "io", "pathlib", "subprocess", "threading", "logging",
    "random", "json", "selectors", "ssl", "tomllib", "urllib", "http", "shutil", "tempfile",
    "glob", "gzip", "sqlite3", "signal", "multiprocessing", "concurrent", "mmap", "fcntl",
}  # fmt: skip
#: Built-ins that do I/O.
IO_BUILTINS = {"open", "print", "input", "breakpoint"}
#: Methods that touch files or read a clock, whatever they are called on (``path.read_bytes()``,
#: ``datetime.now()``, ``array.tofile(f)``).
IO_METHODS = {
    "open", "read_bytes", "read_text", "write_bytes", "write_text", "unlink", "mkdir", "rmdir",
    "touch", "now", "utcnow", "today", "fromfile", "tofile", "loadtxt", "savetxt", "genfromtxt",
    "memmap", "savez",
}  # fmt: skip
#: numpy's file functions whose names are too common to refuse on any object.
NUMPY_IO = {"load", "save"}

ROOT = Path(arenad.__file__).parent
CORE = ROOT / "core"
#: The modules outside the core that must be as pure, each with what it may import that the core
#: may not, and why.
ALSO_PURE: dict[str, frozenset[str]] = {
    # Calendar arithmetic on event times, in UTC; reading the clock is refused by IO_METHODS.
    "scopes.py": frozenset({"datetime"}),
    # The parsers of the wire formats it decodes, and io.BytesIO over bytes already in memory.
    "decode.py": frozenset({"json", "msgpack", "io"}),
    **{f"models/{p.name}": frozenset() for p in sorted((ROOT / "models").glob("*.py"))},
    # The journal's record values, and the one record applier over them (sans-io: its driver
    # supplies the clock that times updates).
    "records.py": frozenset(),
    "sessions.py": frozenset(),
    "gates.py": frozenset(),
    "identity.py": frozenset(),
    "daemon/applier.py": frozenset(),
}
#: What a pure module may import from arenad: other pure modules only.
PURE_PACKAGES = (
    "arenad.core",
    "arenad.errors",
    "arenad.models",
    "arenad.scopes",
    "arenad.decode",
    "arenad.records",
    "arenad.sessions",
    "arenad.gates",
    "arenad.identity",
    "arenad.daemon.applier",
)


def pure_modules() -> dict[str, Path]:
    modules = {f"core/{p.name}": p for p in sorted(CORE.glob("*.py"))}
    modules.update({name: ROOT / name for name in ALSO_PURE})
    return modules


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def imports(tree: ast.AST) -> set[str]:
    """Top-level packages imported anywhere in ``tree`` (a function's lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def arenad_imports(tree: ast.AST) -> set[str]:
    """Modules of arenad imported in ``tree``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m == "arenad" or m.startswith("arenad.")}


def io_calls(tree: ast.AST) -> list[str]:
    """Calls in ``tree`` that do I/O or read a clock, as ``line: name``, in line order."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in IO_BUILTINS:
            found.append((node.lineno, f"{func.id}()"))
        elif isinstance(func, ast.Attribute) and (
            func.attr in IO_METHODS
            or (
                func.attr in NUMPY_IO
                and isinstance(func.value, ast.Name)
                and func.value.id in ("np", "numpy")
            )
        ):
            found.append((node.lineno, f".{func.attr}()"))
    return [f"{line}: {name}" for line, name in sorted(found)]


class TestCoreImports:
    """No module of arenad.core imports anything that does I/O or reads a clock."""

    def test_core_modules_exist(self) -> None:
        assert {p.name for p in CORE.glob("*.py")} >= {"engine.py", "ladder.py", "params.py", "events.py"}

    def test_core_imports_only_core_or_errors_from_arenad(self) -> None:
        for p in CORE.glob("*.py"):
            for module in arenad_imports(_tree(p)):
                assert module.startswith(("arenad.core", "arenad.errors")), (p.name, module)


class TestPureModules:
    """The core, the scopes, the rating models and the decoders: no I/O, clock or network."""

    def test_the_modules_outside_the_core_are_found(self) -> None:
        names = set(pure_modules())
        assert {"scopes.py", "decode.py", "models/__init__.py", "models/base.py", "models/elo.py"} <= names
        assert all(p.is_file() for p in pure_modules().values())

    @pytest.mark.parametrize("name", sorted(pure_modules()))
    def test_no_forbidden_imports(self, name: str) -> None:
        allowed = ALSO_PURE.get(name, frozenset())
        assert sorted(imports(_tree(pure_modules()[name])) & (FORBIDDEN - allowed)) == []

    @pytest.mark.parametrize("name", sorted(pure_modules()))
    def test_no_io_or_clock_calls(self, name: str) -> None:
        assert io_calls(_tree(pure_modules()[name])) == []

    @pytest.mark.parametrize("name", sorted(ALSO_PURE))
    def test_imports_only_pure_modules_of_arenad(self, name: str) -> None:
        for module in arenad_imports(_tree(ROOT / name)):
            assert module.startswith(PURE_PACKAGES), (name, module)


class TestTheChecks:
    """The checks above see what they are meant to refuse (so a pass means something)."""

    SOURCE = """
import socket
from time import monotonic
import numpy as np

def f(path):
    with open(path) as fh:
        pass
    path.read_bytes()
    np.save(path, [1])
    return datetime.now()
"""

    def test_forbidden_imports_are_seen(self) -> None:
        assert imports(ast.parse(self.SOURCE)) & FORBIDDEN == {"socket", "time"}

    def test_io_and_clock_calls_are_seen(self) -> None:
        assert io_calls(ast.parse(self.SOURCE)) == [
            "7: open()",
            "9: .read_bytes()",
            "10: .save()",
            "11: .now()",
        ]

    def test_a_method_of_the_same_name_elsewhere_is_not_numpy_io(self) -> None:
        assert io_calls(ast.parse("rules = Exclusions.load(state)\n")) == []
