"""Entry point: ``python -m bench [--players 100000,1000000] [--events N] [--quick]``."""

from __future__ import annotations

from bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
