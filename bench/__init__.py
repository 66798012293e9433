"""Benchmarks for arenad. ``python -m bench`` runs the core (Engine) benchmark; see README.md."""

import os as _os

if _os.environ.get("ARENAD_NATIVE") == "0":  # benchmark the pure-Python ladder (docs/performance.md)
    import arenad.core.engine as _engine
    from arenad.core.ladder import PyLadder as _PyLadder

    _engine.Ladder = _PyLadder  # type: ignore[attr-defined]
