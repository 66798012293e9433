"""The ladder index: every tracked player in rating order, for O(log P) rank, top-N and percentile.

Entries are pairs (key, player id) ordered by key, then id; arenad's key is the negated rating,
so ascending order is the ladder, best first, with exact ties in first-seen order. The layout is
that of ``sortedcontainers.SortedList`` (sorted blocks of about ``load`` entries under a sorted
list of block maxima) with two changes that matter on arenad's hot path (bench/README.md):

* Blocks are packed ``array('d')`` keys with a parallel ``array('q')`` of ids instead of lists of
  Python objects. A kill re-keys two random players among up to millions; with boxed objects
  every comparison of a binary search is a cache miss on a scattered heap object, with packed
  arrays it reads one contiguous block. Keys are the exact ratings: no quantisation.
* ``move`` re-keys within the block when the entry stays in it, the common case because one
  kill moves a rating by at most Δmax (§8.4): no block lengths change, so neither the block
  structure nor the positional index needs any work.

Positions come from a Fenwick tree over block lengths, built on the first positional query and
kept up to date afterwards, so rank is O(log P) and so is an update.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from typing import Any, cast

#: The largest block load (the C ladder's: a block's capacity of 3 load + 2 must not overflow).
LOAD_MAX = 1 << 24


def _check_load(load: int) -> None:
    if not 1 <= load <= LOAD_MAX:
        raise ValueError(f"load must be between 1 and {LOAD_MAX}")


def _buffer(obj: Any) -> memoryview:
    """``obj``'s buffer, refused as the C ladder's ``from_sorted`` refuses it: TypeError without
    one, ValueError when it is not C-contiguous."""
    view = memoryview(obj)
    if not view.c_contiguous:
        view.release()
        raise ValueError("from_sorted: the columns must be C-contiguous")
    return view


def _is(view: memoryview, code: str) -> bool:
    fmt = view.format[1:] if view.format[:1] in ("@", "=") else view.format
    return view.itemsize == 8 and fmt == code


class PyLadder:
    """Sorted unique (key, id) entries; ascending order is the ladder order (best first)."""

    __slots__ = ("_fenwick", "_ids", "_keys", "_len", "_load", "_maxes")

    def __init__(self, entries: Iterable[tuple[float, int]] = (), load: int = 1000) -> None:
        _check_load(load)
        self._load = load
        self._keys: list[array[float]] = []
        self._ids: list[array[int]] = []
        self._maxes: list[float] = []  # the last key of each block
        self._fenwick: list[int] | None = None
        ordered = sorted(entries)
        self._fill([k for k, _ in ordered], [i for _, i in ordered])

    def _fill(self, keys: list[float], ids: list[int]) -> None:
        """Blocks of ``load`` entries from columns already in order (an empty ladder's)."""
        load = self._load
        for start in range(0, len(keys), load):
            self._keys.append(array("d", keys[start : start + load]))
            self._ids.append(array("q", ids[start : start + load]))
            self._maxes.append(keys[min(start + load, len(keys)) - 1])
        self._len = len(keys)

    @classmethod
    def from_sorted(cls, keys: Any, ids: Any, load: int = 1000) -> PyLadder:
        """A ladder of entries already in its order (``keys[i], ids[i]``: a C-contiguous column
        of float64 and one of int64, as numpy's or array's), checked rather than sorted: each
        entry must come strictly after the one before it, key then id (so no NaN key and no
        entry twice), each id in 0..2**32-1. The C ladder's ``from_sorted``, refusing what it
        refuses (tests/core/test_native_ladder.py)."""
        _check_load(load)
        # In the C ladder's order of checks, so both refuse the same input with the same error.
        with _buffer(keys) as kv, _buffer(ids) as iv:
            if not (_is(kv, "d") and (_is(iv, "q") or _is(iv, "l"))):
                raise TypeError("from_sorted: keys must be a buffer of float64 and ids of int64")
            if kv.ndim != 1 or iv.ndim != 1 or kv.nbytes != iv.nbytes:
                raise ValueError("from_sorted: keys and ids must be two columns of the same length")
            ks = cast("list[float]", kv.tolist())  # a "d" buffer: floats
            ps: list[int] = iv.tolist()
        for i, (k, p) in enumerate(zip(ks, ps, strict=True)):
            if not 0 <= p <= 0xFFFFFFFF:
                raise OverflowError(f"from_sorted: player id {p} does not fit in 32 bits")
            if math.isnan(k):
                raise ValueError(f"from_sorted: entry {i} has a NaN key")
            if i and not (ks[i - 1] < k or (ks[i - 1] == k and ps[i - 1] < p)):
                raise ValueError(f"from_sorted: entry {i} is not after the one before it (key, then id)")
        lad = cls(load=load)
        lad._fill(ks, ps)
        return lad

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[int]:
        """Player ids, best first."""
        for ids in self._ids:
            yield from ids

    def entries(self) -> Iterator[tuple[float, int]]:
        for keys, ids in zip(self._keys, self._ids, strict=True):
            yield from zip(keys, ids, strict=True)

    # -------------------------------------------------------------- locating
    def _block_for(self, key: float, pid: int) -> int:
        """The first block whose last entry is >= (key, pid); len(blocks) - 1 at most."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        last = len(maxes) - 1
        if pos > last:
            return last
        # A run of equal keys can span blocks: step over blocks that end before (key, pid).
        while pos < last and maxes[pos] == key and self._ids[pos][-1] < pid:
            pos += 1
        return pos

    @staticmethod
    def _lower(keys: array[float], ids: array[int], key: float, pid: int) -> int:
        """Index of the first entry >= (key, pid) within one block."""
        idx = bisect_left(keys, key)
        if idx < len(keys) and keys[idx] == key and ids[idx] < pid:
            # A run of equal keys (common: every first kill between two newcomers ends in the
            # same two ratings) is sorted by id, so the id is found by bisection too.
            idx = bisect_left(ids, pid, idx, bisect_right(keys, key, idx))
        return idx

    def _locate(self, key: float, pid: int) -> tuple[int, int]:
        if not self._maxes:
            raise KeyError((key, pid))
        pos = self._block_for(key, pid)
        keys = self._keys[pos]
        ids = self._ids[pos]
        idx = self._lower(keys, ids, key, pid)
        if idx == len(keys) or keys[idx] != key or ids[idx] != pid:
            raise KeyError((key, pid))
        return pos, idx

    # -------------------------------------------------------------- updates
    def add(self, key: float, pid: int) -> None:
        maxes = self._maxes
        if not maxes:
            self._keys.append(array("d", (key,)))
            self._ids.append(array("q", (pid,)))
            maxes.append(key)
            self._len = 1
            self._fenwick = None
            return
        pos = self._block_for(key, pid)
        keys = self._keys[pos]
        ids = self._ids[pos]
        idx = self._lower(keys, ids, key, pid)
        keys.insert(idx, key)
        ids.insert(idx, pid)
        maxes[pos] = keys[-1]
        self._len += 1
        if len(keys) > 2 * self._load:
            self._split(pos)
        elif self._fenwick is not None:
            self._fenwick_add(pos, 1)

    def remove(self, key: float, pid: int) -> None:
        pos, idx = self._locate(key, pid)
        self._delete(pos, idx)

    def move(self, old: float, new: float, pid: int) -> None:
        """Re-key player ``pid`` from ``old`` (which must be its current key) to ``new``."""
        maxes = self._maxes
        if not maxes:
            raise KeyError((old, pid))
        pos = bisect_left(maxes, old)
        last = len(maxes) - 1
        if pos > last or (pos < last and maxes[pos] == old):
            pos = self._block_for(old, pid)  # an equal-key run may span blocks: the careful way
        keys = self._keys[pos]
        ids = self._ids[pos]
        idx = bisect_left(keys, old)
        if idx == len(keys) or ids[idx] != pid:
            idx = self._lower(keys, ids, old, pid)
            if idx == len(keys) or keys[idx] != old or ids[idx] != pid:
                raise KeyError((old, pid))
        # Same block when (new, pid) stays strictly between the neighbouring blocks' ends (equal
        # keys at a block edge take the general path below).
        if (pos == 0 or new > maxes[pos - 1]) and (pos == last or new < self._keys[pos + 1][0]):
            del keys[idx]
            del ids[idx]
            at = bisect_left(keys, new)
            if at < len(keys) and keys[at] == new:
                at = self._lower(keys, ids, new, pid)
            keys.insert(at, new)
            ids.insert(at, pid)
            maxes[pos] = keys[-1]  # lengths are unchanged: the positional index stays valid
        else:
            self._delete(pos, idx)
            self.add(new, pid)

    def _split(self, pos: int) -> None:
        keys = self._keys[pos]
        ids = self._ids[pos]
        half = len(keys) >> 1
        self._keys.insert(pos + 1, keys[half:])
        self._ids.insert(pos + 1, ids[half:])
        del keys[half:]
        del ids[half:]
        self._maxes.insert(pos, keys[-1])
        self._fenwick = None

    def _delete(self, pos: int, idx: int) -> None:
        keys = self._keys[pos]
        ids = self._ids[pos]
        maxes = self._maxes
        del keys[idx]
        del ids[idx]
        self._len -= 1
        if len(keys) > self._load >> 1:
            maxes[pos] = keys[-1]
            if self._fenwick is not None:
                self._fenwick_add(pos, -1)
            return
        # A small block merges into a neighbour (or disappears when it is the last one and empty).
        self._fenwick = None
        if len(maxes) == 1:
            if keys:
                maxes[0] = keys[-1]
            else:
                del self._keys[0], self._ids[0], maxes[0]
            return
        if pos == 0:
            pos = 1
        self._keys[pos - 1].extend(self._keys[pos])
        self._ids[pos - 1].extend(self._ids[pos])
        del self._keys[pos], self._ids[pos], maxes[pos]
        maxes[pos - 1] = self._keys[pos - 1][-1]
        if len(self._keys[pos - 1]) > 2 * self._load:
            self._split(pos - 1)

    # -------------------------------------------------------------- positions
    def _fenwick_build(self) -> list[int]:
        tree = [0] * (len(self._keys) + 1)
        for i, keys in enumerate(self._keys, start=1):
            tree[i] += len(keys)
            parent = i + (i & -i)
            if parent < len(tree):
                tree[parent] += tree[i]
        self._fenwick = tree
        return tree

    def _fenwick_add(self, pos: int, delta: int) -> None:
        tree = self._fenwick
        assert tree is not None
        i = pos + 1
        n = len(tree)
        while i < n:
            tree[i] += delta
            i += i & -i

    def _before_block(self, pos: int) -> int:
        """Number of entries in blocks 0..pos-1."""
        tree = self._fenwick if self._fenwick is not None else self._fenwick_build()
        total = 0
        i = pos
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    def count_below(self, key: float) -> int:
        """Number of entries whose key is strictly less than ``key`` (better-rated players)."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            return self._len
        return self._before_block(pos) + bisect_left(self._keys[pos], key)

    def ranks(self, keys: Iterable[float], ids: object = None) -> list[int]:
        """``count_below(k) + 1`` for each key: the competition ranks of a batch in one call.
        ``ids`` (each key's entry) lets the C ladder answer from its rank column; the answers
        are the same without it, and this reference ignores it."""
        return [self.count_below(k) + 1 for k in keys]

    def count_at_most(self, key: float) -> int:
        """Number of entries whose key is <= ``key``."""
        maxes = self._maxes
        pos = bisect_right(maxes, key)
        if pos == len(maxes):
            return self._len
        return self._before_block(pos) + bisect_right(self._keys[pos], key)

    def index(self, key: float, pid: int) -> int:
        pos, idx = self._locate(key, pid)
        return self._before_block(pos) + idx

    def islice(self, start: int, stop: int) -> Iterator[int]:
        """Player ids at positions start..stop-1 (clamped to the ladder)."""
        start = max(0, start)
        stop = min(stop, self._len)
        if start >= stop:
            return
        # Find the block holding position `start` by walking the Fenwick tree downwards.
        tree = self._fenwick if self._fenwick is not None else self._fenwick_build()
        pos = 0
        remaining = start
        step = 1 << (len(tree) - 1).bit_length()
        while step:
            nxt = pos + step
            if nxt < len(tree) and tree[nxt] <= remaining:
                pos = nxt
                remaining -= tree[nxt]
            step >>= 1
        count = stop - start
        blocks = self._ids
        while count > 0 and pos < len(blocks):
            chunk = blocks[pos][remaining : remaining + count]
            yield from chunk
            count -= len(chunk)
            remaining = 0
            pos += 1

    def first(self) -> tuple[float, int]:
        """The best entry (no positional index needed)."""
        if not self._len:
            raise IndexError("empty ladder")
        return self._keys[0][0], self._ids[0][0]

    def last(self) -> tuple[float, int]:
        """The worst entry."""
        if not self._len:
            raise IndexError("empty ladder")
        return self._keys[-1][-1], self._ids[-1][-1]


#: The ladder the engine uses: the C twin of ``PyLadder`` (``arenad/core/_ladder.c``: the same
#: structure and the same answers, docs/performance.md) when it was built, else this module's.
#: ``setup.py`` marks the extension optional: without a compiler the install falls back here.
Ladder: type[PyLadder] | type[_NativeLadder]
try:
    from arenad.core._ladder import Ladder as _NativeLadder

    Ladder = _NativeLadder
    NATIVE = True
except ImportError:  # pragma: no cover - only where the C extension could not be built
    Ladder = PyLadder
    NATIVE = False
