"""Build of the optional C ladder (arenad/core/_ladder.c, docs/performance.md); everything else is in
pyproject.toml. ``optional=True``: without a C compiler or Python headers the install still
succeeds and arenad runs on the pure-Python ladder (arenad.core.ladder.PyLadder)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("arenad.core._ladder", ["arenad/core/_ladder.c"], optional=True, extra_compile_args=["-O2"])
    ]
)
