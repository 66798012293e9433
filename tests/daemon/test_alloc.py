"""arenad/daemon/alloc.py: with the mmap threshold fixed, a large block that is freed leaves the
resident set; with glibc's dynamic threshold, the second one stays as a heap hole."""

from __future__ import annotations

import subprocess
import sys

import pytest

from arenad.daemon import alloc

PROBE = r"""
import sys
sys.path.insert(0, {root!r})
from arenad.daemon.alloc import fix_mmap_threshold
import numpy as np

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else False
before = rss()
for _ in range(4):  # a recalibration's arrays, again and again
    a = np.ones(2_000_000)  # 16 MB, touched
    del a
keep = np.ones(1000)  # something small allocated after, as the engine keeps going
print(fixed, (rss() - before) / 1e6)
"""


def run_probe(mode: str) -> tuple[bool, float]:
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(root=root), mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"ARENAD_MALLOC": "", "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    return out[0] == "True", float(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_large_block_leaves_the_resident_set() -> None:
    fixed, grown = run_probe("fixed")
    assert fixed
    assert grown < 4.0  # MB: the blocks went back to the system
    default_fixed, default_grown = run_probe("default")
    assert not default_fixed
    assert default_grown > 12.0  # the control: glibc's own behaviour keeps a 16 MB hole


def test_the_environment_can_leave_the_allocator_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENAD_MALLOC", "default")
    assert alloc.fix_mmap_threshold() is False
