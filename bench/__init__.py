"""Benchmarks for arenad. ``python -m bench`` runs the core (Engine) benchmark; see README.md."""

import os as _os

from arenad.daemon.alloc import fix_mmap_threshold as _fix_mmap_threshold

# The allocator as `arenad run` sets it (arenad/daemon/alloc.py); ARENAD_MALLOC=default leaves it.
_fix_mmap_threshold()

if _os.environ.get("ARENAD_NATIVE") == "0":  # benchmark pure Python: no C ladder, no C kernel
    import arenad.core.engine as _engine
    from arenad.core.ladder import PyLadder as _PyLadder

    _engine.Ladder = _PyLadder  # type: ignore[attr-defined]
    _engine._Kernel = None  # type: ignore[attr-defined,assignment]
elif _os.environ.get("ARENAD_NATIVE") == "ladder":  # the C ladder alone (the engine in Python)
    import arenad.core.engine as _engine

    _engine._Kernel = None  # type: ignore[attr-defined,assignment]
