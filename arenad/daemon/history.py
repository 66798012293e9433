"""Event history: the compressed archive of the journal, snapshot history, and recompute.

Layout under the state directory::

    archive/events-000000000001.gz   gzip members, each a journal segment (same record format)
    archive/manifest.json            per file: first and last sequence number, bytes
    snapshots/snapshot-000000004096.ckpt  + .json (its event time): checkpoints kept as history

The accepted-event journal is the source of truth. A journal segment that a checkpoint covers is
no longer deleted: it is compressed onto the current archive file first (one gzip member; a new
file after ``archive_file_bytes``), the manifest is replaced atomically, and only then is the
segment removed. A crash between the two leaves bytes past the manifest's size, which the next
start cuts off, so the segment is archived again exactly once.

``rebuild`` replays history into a ``ScopeSet``: from nothing, or from the newest snapshot
before a time, with the exclusion rules in force. The result is bit-identical to a fresh
replay of the same events (tests/daemon/test_recompute.py).
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from arenad.daemon.applier import CHUNK, Applier
from arenad.daemon.ratinghistory import Rebuild
from arenad.daemon.state import (
    Checkpoints,
    Journal,
    JournalRecord,
    PlacementRecord,
    StateError,
    read_records,
    record_seq,
)
from arenad.fileio import fsync_dir, write_atomic
from arenad.scopes import Exclusions, ScopeConfig, ScopeSet

log = structlog.get_logger("arenad.history")

MANIFEST = "manifest.json"
#: Bytes of decompressed history read at a time.
READ_CHUNK = 4 << 20


class Archive:
    """Compressed, segmented history of every journaled record, in sequence order."""

    def __init__(self, directory: Path, file_bytes: int = 64 << 20) -> None:
        self.dir = directory
        self.file_bytes = file_bytes
        self.files: list[dict[str, Any]] = []  # name, first, last, bytes

    def load(self) -> Archive:
        """Read the manifest only (readers: recompute, exclusion scans). Never writes."""
        path = self.dir / MANIFEST
        if path.exists():
            try:
                data = json.loads(path.read_bytes())
                self.files = list(data["files"])
            except (ValueError, KeyError, TypeError) as e:
                raise StateError(f"{path}: unreadable archive manifest ({e})") from e
        return self

    def open(self) -> None:
        """The daemon's start: load the manifest, cut bytes an interrupted append left past
        it, drop files it never recorded. Only the process that appends may call this."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.load()
        known = {f["name"] for f in self.files}
        for f in self.files:
            p = self.dir / f["name"]
            size = p.stat().st_size if p.exists() else -1
            if size < f["bytes"]:
                raise StateError(f"archive file {p} is shorter than the manifest says: history is missing")
            if size > f["bytes"]:
                with p.open("r+b") as fh:
                    fh.truncate(f["bytes"])
                    os.fsync(fh.fileno())
                log.warning("archive_tail_cut", file=f["name"], bytes=size - f["bytes"])
        for p in self.dir.glob("events-*.gz"):
            if p.name not in known:
                p.unlink()  # created by an append the manifest never recorded

    @property
    def last_seq(self) -> int:
        return int(self.files[-1]["last"]) if self.files else 0

    @property
    def total_bytes(self) -> int:
        return sum(int(f["bytes"]) for f in self.files)

    def add(self, data: bytes, first: int, last: int) -> None:
        """Append one journal segment's whole records (``first``..``last``) as a gzip member."""
        if self.files and first != self.last_seq + 1:
            raise StateError(f"archive ends at event {self.last_seq}, cannot append from {first}")
        member = gzip.compress(data, compresslevel=6, mtime=0)
        if not self.files or self.files[-1]["bytes"] >= self.file_bytes:
            self.files.append(
                {"name": f"events-{first:012d}.gz", "first": first, "last": first - 1, "bytes": 0}
            )
            new = True
        else:
            new = False
        entry = self.files[-1]
        path = self.dir / entry["name"]
        with path.open("ab") as f:
            f.write(member)
            f.flush()
            os.fsync(f.fileno())
        if new:
            fsync_dir(self.dir)
        entry["bytes"] += len(member)
        entry["last"] = last
        write_atomic(self.dir / MANIFEST, json.dumps({"files": self.files}).encode())

    def records(self, after: int = 0) -> Iterator[JournalRecord]:
        """Archived records with a sequence number above ``after``, in order."""
        for f in list(self.files):
            if int(f["last"]) <= after:
                continue
            with (self.dir / f["name"]).open("rb") as fh:
                raw = fh.read(int(f["bytes"]))  # compressed: at most archive_file_bytes
            # Decompressed a chunk at a time, so memory stays at one chunk of records however
            # large the file (a whole 64 MiB file of gzip is several million kills).
            stream = gzip.GzipFile(fileobj=io.BytesIO(raw))
            buf = b""
            while True:
                chunk = stream.read(READ_CHUNK)
                buf = buf + chunk if buf else chunk
                recs, good = read_records(buf)
                for rec in recs:
                    if record_seq(rec) > after:
                        yield rec
                buf = buf[good:]
                if not chunk:
                    break
            if buf:
                raise StateError(
                    f"archive file {f['name']} is damaged ({len(buf)} bytes after the last record)"
                )


def retire_segments(journal: Journal, archive: Archive | None, seq: int) -> int:
    """Archive (when ``archive`` is given), then delete, whole journal segments at or below ``seq``.

    Runs in a worker thread during a checkpoint; the open segment is never touched. Returns the
    number of segments retired.
    """
    segments = journal.segments()
    done = 0
    for (_first, path), (nxt, _) in itertools.pairwise(segments):
        if nxt - 1 > seq or path == journal.current_path:
            break
        if archive is not None:
            data = path.read_bytes()
            recs, good = read_records(data)
            if recs and record_seq(recs[-1]) > archive.last_seq:
                archive.add(data[:good], record_seq(recs[0]), record_seq(recs[-1]))
        path.unlink(missing_ok=True)
        done += 1
    return done


class Snapshots:
    """Checkpoints kept as history (hard links of checkpoint files) with their event times."""

    def __init__(self, directory: Path, keep: int) -> None:
        self.dir = directory
        self.keep = keep

    def list(self) -> list[tuple[int, float, Path]]:
        """(seq, event time, path), oldest first; files without a readable time are skipped."""
        out = []
        for p in self.dir.glob("snapshot-*.ckpt"):
            try:
                seq = int(p.stem.split("-", 1)[1])
                clock = float(json.loads(p.with_suffix(".json").read_bytes())["clock"])
            except (ValueError, KeyError, OSError, TypeError):
                continue
            out.append((seq, clock, p))
        return sorted(out)

    def add(self, checkpoint: Path, seq: int, clock: float) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        dest = self.dir / f"snapshot-{seq:012d}.ckpt"
        if dest.exists():
            return
        try:
            os.link(checkpoint, dest)  # the checkpoint file never changes once renamed in place
        except OSError:
            # Atomically: a half-written copy would stand in the way of the next attempt.
            write_atomic(dest, checkpoint.read_bytes())
        write_atomic(dest.with_suffix(".json"), json.dumps({"seq": seq, "clock": clock}).encode())
        for _s, _c, old in self.list()[: -self.keep]:
            old.with_suffix(".json").unlink(missing_ok=True)
            old.unlink(missing_ok=True)

    def before(self, t: float) -> tuple[int, Path] | None:
        """The newest snapshot whose global clock is strictly before event time ``t``."""
        best = None
        for seq, clock, path in self.list():
            if clock < t:
                best = (seq, path)
        return best


class History:
    """Every journaled record, archive first, then the journal segments still on disk."""

    def __init__(self, state_dir: Path, archive: Archive | None = None) -> None:
        self.state_dir = state_dir
        self.archive = archive if archive is not None else Archive(state_dir / "archive").load()

    def records(self, after: int = 0, upto: int | None = None) -> Iterator[JournalRecord]:
        """Records with after < seq <= upto, checking that no sequence number is missing."""
        expected = after + 1
        for rec in self._all(after):
            seq = record_seq(rec)
            if upto is not None and seq > upto:
                return
            if seq < expected:
                continue
            if seq != expected:
                raise StateError(f"history jumps from event {expected - 1} to {seq}: events are missing")
            expected += 1
            yield rec
        if upto is not None and expected <= upto:
            raise StateError(f"history ends at event {expected - 1}, expected {upto}")

    def _all(self, after: int) -> Iterator[JournalRecord]:
        yield from self.archive.records(after)
        start = max(after, self.archive.last_seq)
        for _first, path in Journal(self.state_dir).segments():
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # archived and removed meanwhile; its records came from the archive
            recs, _good = read_records(data)
            for rec in recs:
                if record_seq(rec) > start:
                    yield rec


def _first_seq(state_dir: Path, archive: Archive | None) -> int:
    """The sequence number before the oldest record history still holds (0: all of it)."""
    if archive is not None and archive.files:
        return int(archive.files[0]["first"]) - 1
    segments = Journal(state_dir).segments()
    return segments[0][0] - 1 if segments else 0


@dataclass(frozen=True, slots=True)
class RebuildResult:
    scopes: ScopeSet
    seq: int  # the last record applied
    base_seq: int  # the snapshot it started from (0: from nothing)
    records: int
    ratings: Rebuild | None = None  # the rating history it wrote, to be put in place


def rebuild(
    params: ADRParams,
    config: ScopeConfig,
    exclusions: Exclusions,
    records: Iterable[JournalRecord],
    *,
    base: ScopeSet | None = None,
    base_seq: int = 0,
    ratings: Rebuild | None = None,
) -> RebuildResult:
    """Replay ``records`` into ``base`` (or a fresh ScopeSet) under ``exclusions``; the play
    sessions it closes go to ``ratings`` (a recompute's rating history) as it goes.

    The records go through the daemon's applier with the rules fixed: ``exclusions`` (the rules
    in force now) hold over the whole history, so an exclude or include record changes nothing
    here; that is what makes a recompute retroactive (``applier.py``)."""
    scopes = base if base is not None else ScopeSet(params, config)
    scopes.exclusions = Exclusions(list(exclusions.rules))
    last = base_seq
    applier = Applier(scopes, rules="fixed")
    n = 0
    chunk: list[JournalRecord | None] = []
    for rec in records:
        last = record_seq(rec)
        chunk.append(rec)
        if len(chunk) >= CHUNK:
            n += len(chunk)
            applier.apply_chunk(chunk)
            chunk = []
            if ratings is not None:  # closed sessions streamed out: a long history stays small
                ratings.drain(scopes)
    n += len(chunk)
    applier.apply_chunk(chunk)
    if ratings is not None:
        ratings.drain(scopes)
    return RebuildResult(scopes, last, base_seq, n, ratings)


def load_scopes(payload: dict[str, Any], params: ADRParams, config: ScopeConfig) -> ScopeSet:
    """The ScopeSet of a checkpoint payload (one from before scopes holds a single engine)."""
    if "scopes" in payload:
        return ScopeSet.from_state(payload["scopes"], params, config)
    out = ScopeSet(params, config)
    out.engines["global"] = Engine.from_state(payload["engine"], params)
    return out


def rebuild_from_history(
    state_dir: Path,
    params: ADRParams,
    config: ScopeConfig,
    exclusions: Exclusions,
    *,
    upto: int,
    from_t: float | None = None,
    snapshots: Snapshots | None = None,
    ratings: Callable[[int], Rebuild] | None = None,
) -> RebuildResult:
    """Full replay of history up to ``upto``, or a partial one from the newest snapshot before
    ``from_t`` (falling back to a full replay when there is none). ``ratings``: opens the
    recompute's rating history given the sequence number the replay starts after."""
    base: ScopeSet | None = None
    base_seq = 0
    if from_t is not None and math.isfinite(from_t) and snapshots is not None:
        found = snapshots.before(from_t)
        if found is not None:
            base_seq, path = found
            base = load_scopes(Checkpoints.read(path), params, config)
    history = History(state_dir)
    return rebuild(
        params,
        config,
        exclusions,
        history.records(base_seq, upto),
        base=base,
        base_seq=base_seq,
        ratings=None if ratings is None else ratings(base_seq),
    )


def first_match_time(
    state_dir: Path, exclusions: Exclusions, upto: int, archive: Archive | None = None
) -> float | None:
    """Event time of the first record in history that ``exclusions`` matches (None: none does)."""
    if not exclusions:
        return None
    for rec in History(state_dir, archive).records(_first_seq(state_dir, archive), upto):
        if isinstance(rec, tuple):
            _s, t, a, v, server, _i = rec
            if exclusions.touches(a, v, t, server):  # excluded, or a merged player's
                return t
        elif isinstance(rec, PlacementRecord) and exclusions.touches_placement(
            rec.placements, rec.t, rec.server
        ):
            return rec.t
    return None
