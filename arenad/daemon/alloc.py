"""The C allocator's settings for a long-running daemon with a large, steady heap.

glibc serves an allocation above ``M_MMAP_THRESHOLD`` (128 KiB at start) with its own mapping,
returned to the system when freed, but it *raises* that threshold to the size of every such
block that is freed (up to 32 MiB). arenad frees large blocks all the time: every recalibration
builds numpy arrays of all P ratings and the active mask (~25 MB at a million players), an array
column that grows is reallocated. Once the threshold has risen, those arrays come from the heap,
and the holes they leave stay in the resident set: measured 368–410 bytes of RSS per player at
1M players for 308 bytes of live objects (``python -m bench.scale --parts engine``). A fixed
threshold turns the adjustment off (mallopt(3)): the same run gives 321 bytes per player, and
the figure no longer varies from run to run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

#: mallopt(3) parameter number of M_MMAP_THRESHOLD (malloc.h).
_M_MMAP_THRESHOLD = -3
#: Blocks from this size up get their own mapping: glibc's own starting value, kept fixed.
MMAP_THRESHOLD = 128 * 1024


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold (turning off its dynamic adjustment); False where it cannot.

    ``ARENAD_MALLOC=default`` in the environment leaves the allocator as it is (to compare).
    """
    if os.environ.get("ARENAD_MALLOC") == "default":
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt), or no libc to load
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
