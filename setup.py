"""Build of the optional C ladder (arenad/core/_ladder.c, docs/performance.md); everything else is in
pyproject.toml. ``optional=True``: without a C compiler or Python headers the install still
succeeds and arenad runs on the pure-Python ladder (arenad.core.ladder.PyLadder)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "arenad.core._ladder",
            [
                "arenad/core/_ladder.c",
                "arenad/core/_kernel.c",
                "arenad/core/_sessions.c",
                "arenad/core/_jsonl.c",
                "arenad/core/_lookup.c",
            ],
            depends=["arenad/core/_native.h"],
            optional=True,
            # No fused multiply-add: the kernel must round exactly as the Python engine does.
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
        )
    ]
)
