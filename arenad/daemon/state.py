"""Durable state: an append-only journal of accepted events and atomic, checksummed checkpoints.

Layout of the state directory::

    checkpoint-000000000042.ckpt   newest valid one wins; older ones are the fallback
    journal-000000000043.log       records with sequence numbers from 43 on

A journal record is ``u32 length | u32 crc32 | msgpack chunk``: consecutive accepted events, in
one of two layouts (the reader branches on the array's length):

* ``[first_seq, rows]``: every row a kill ``[t, attacker, victim, server, id]``. This is the only
  layout of arenads before match placements, and still what a chunk of kills alone is written as,
  so a journal of kills reads the same in either version.
* ``[first_seq, rows, kinds]``: ``kinds`` is a byte string with one record kind per row:
  ``0`` a kill row as above, ``1`` a match placement ``[t, [[player, ...], ...], server, id]``
  (groups best first), ``2`` a control record ``[t, op, args]`` (an admin operation that
  changes what later events do, e.g. ``season_start``; replay and recompute apply it at the
  same point in the stream). An arenad older than placements cannot read such a chunk: stop it
  cleanly before a downgrade (the final checkpoint covers the journal).

A whole record (its checksum verifies) of a layout or kind this arenad does not know was written
by a newer one: recovery refuses to start rather than cut it off as a torn tail.
Start-up loads the newest checkpoint that verifies (a corrupt one is skipped, logged, counted),
then re-applies every journal record with a higher sequence number; a torn tail (a record cut
short or failing its checksum at the end of the last segment) is cut at the last whole record.

Checkpoints are written to a temporary file, fsynced, renamed into place and the directory is
fsynced, so a crash leaves either the old or the new file, never half of one.
"""

from __future__ import annotations

import itertools
import operator
import os
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from arenad.fileio import fsync_dir, write_atomic

# The record types are pure values (arenad/records.py); re-exported: they are the journal's.
from arenad.records import (
    KIND_CONTROL,
    KIND_KILL,
    KIND_PLACEMENT,
    ControlRecord,
    JournalRecord,
    PlacementRecord,
    Record,
    StateError,
    record_from_row,
    record_kind,
    record_row,
    record_seq,
)

__all__ = [
    "KIND_CONTROL",
    "KIND_KILL",
    "KIND_PLACEMENT",
    "Checkpoints",
    "ControlRecord",
    "Journal",
    "JournalRecord",
    "PlacementRecord",
    "Record",
    "RecoveryReport",
    "StateError",
    "encode_chunk",
    "read_records",
    "record_kind",
    "record_seq",
]

_RECORD_HEAD = struct.Struct("<II")  # length, crc32
_CKPT_MAGIC = b"ARENADCK"
_CKPT_HEAD = struct.Struct("<8sIIQ")  # magic, format version, crc32 of body, body length
CHECKPOINT_FORMAT = 1
MAX_RECORD = 1 << 26


@dataclass(slots=True)
class RecoveryReport:
    checkpoint: Path | None = None
    checkpoint_seq: int = 0
    fallbacks: int = 0  # checkpoints skipped because they did not verify
    replayed: int = 0  # journal records applied after the checkpoint
    truncated_bytes: int = 0  # torn tail cut off the journal


def _numbered(directory: Path, pattern: str) -> list[tuple[int, Path]]:
    """Files named ``<kind>-<number>.<ext>`` with their numbers; other names are ignored."""
    out = []
    for p in directory.glob(pattern):
        try:
            out.append((int(p.stem.split("-", 1)[1]), p))
        except ValueError:
            continue
    return out


def encode_chunk(records: Sequence[JournalRecord]) -> bytes:
    """One journal record holding consecutive events (the layouts are in the module docstring).

    Events are journaled in chunks (one per engine step) so one checksum and one msgpack call
    cover many events; the sequence numbers inside a chunk are implied and consecutive.
    """
    chunk: list[Any]
    if set(map(type, records)) == _KILLS_ONLY:  # the common chunk: kills alone, in C loops
        chunk = [record_seq(records[0]), list(map(_kill_row, records))]
    else:
        rows = list(map(record_row, records))
        chunk = [record_seq(records[0]), rows]
        if not all(isinstance(r, tuple) for r in records):
            chunk.append(bytes(record_kind(r) for r in records))
    body = msgpack.packb(chunk, use_bin_type=True)
    return _RECORD_HEAD.pack(len(body), zlib.crc32(body)) + body


#: The record types of a chunk of kills alone, and a kill record's row (all but the seq).
_KILLS_ONLY = {tuple}
_kill_row: Callable[[Any], Any] = operator.itemgetter(slice(1, None))


def encode_record(rec: JournalRecord) -> bytes:
    return encode_chunk([rec])


def _decode_chunk(body: bytes) -> list[JournalRecord]:
    """The records of one chunk. ``ValueError``/``TypeError`` if it does not decode; ``StateError``
    if it is a whole chunk of a layout or kind that a newer arenad wrote."""
    chunk = msgpack.unpackb(body, raw=False)
    if not isinstance(chunk, list) or len(chunk) < 2:
        raise ValueError("not a journal chunk")
    if len(chunk) > 3:
        raise StateError(f"a journal chunk of {len(chunk)} fields: written by a newer arenad")
    first = int(chunk[0])
    rows = chunk[1]
    if len(chunk) == 2:
        return [
            (first + k, float(t), str(attacker), str(victim), server, event_id)
            for k, (t, attacker, victim, server, event_id) in enumerate(rows)
        ]
    kinds = chunk[2]
    if not isinstance(kinds, bytes) or len(kinds) != len(rows):
        raise ValueError("record kinds do not match the rows")
    return [
        record_from_row(kind, first + k, row) for k, (kind, row) in enumerate(zip(kinds, rows, strict=True))
    ]


def read_records(data: bytes) -> tuple[list[JournalRecord], int]:
    """Whole records of one journal segment, and the byte offset where they end."""
    out: list[JournalRecord] = []
    pos = 0
    end = len(data)
    while pos + _RECORD_HEAD.size <= end:
        length, crc = _RECORD_HEAD.unpack_from(data, pos)
        start = pos + _RECORD_HEAD.size
        if length > MAX_RECORD or start + length > end:
            break
        body = data[start : start + length]
        if zlib.crc32(body) != crc:
            break
        try:
            chunk = _decode_chunk(body)
        except (ValueError, TypeError, msgpack.UnpackException):
            break
        out.extend(chunk)
        pos = start + length
    return out, pos


class Journal:
    """Append-only segments of accepted events; the caller decides when to fsync."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._file: Any = None
        self._path: Path | None = None
        self.bytes_written = 0
        #: Bytes in the open segment: where the next record starts (see ``rewind``).
        self.size = 0

    @staticmethod
    def segment_name(first_seq: int) -> str:
        return f"journal-{first_seq:012d}.log"

    def segments(self) -> list[tuple[int, Path]]:
        return sorted(_numbered(self.dir, "journal-*.log"))

    def open_segment(self, first_seq: int) -> None:
        """Start writing a new segment whose first record will be ``first_seq``.

        The new file is opened before the old one is closed, so a failure (a full disk) leaves
        the journal appending to the segment it had.
        """
        path = self.dir / self.segment_name(first_seq)
        new = path.open("ab", buffering=0)
        try:
            fsync_dir(self.dir)
        except OSError:
            new.close()
            raise
        self.close()
        self._file = new
        self._path = path
        self.size = os.fstat(new.fileno()).st_size

    def append(self, records: Sequence[JournalRecord]) -> int:
        """Write records (no fsync); returns the bytes written."""
        if self._file is None:
            raise StateError("journal is not open")
        data = encode_chunk(records)
        view = memoryview(data)
        while view:
            # A raw write may be short (a nearly full disk); the next one then raises ENOSPC.
            n = self._file.write(view)
            self.size += n
            self.bytes_written += n
            view = view[n:]
        return len(data)

    def rewind(self, size: int) -> None:
        """Cut the open segment back to ``size`` bytes (a record boundary the caller noted before
        a failed append or fsync), so no partial or unsynced record stays in front of a retry."""
        if self._file is None:
            raise StateError("journal is not open")
        self._file.truncate(size)
        self.bytes_written -= self.size - size
        self.size = size

    @property
    def current_path(self) -> Path | None:
        return self._path

    def fileno(self) -> int:
        if self._file is None:
            raise StateError("journal is not open")
        return int(self._file.fileno())

    def sync(self) -> None:
        os.fsync(self.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def replay_after(self, seq: int) -> tuple[Iterator[JournalRecord], list[int]]:
        """Records with a sequence number above ``seq``; the list collects torn-tail sizes.

        A torn tail is cut (the file truncated at the last whole record) only in the newest
        segment; damage inside an older segment means lost acknowledged data and is an error.
        """
        segments = self.segments()
        truncations: list[int] = []

        def gen() -> Iterator[JournalRecord]:
            for k, (_first, path) in enumerate(segments):
                data = path.read_bytes()
                records, good = read_records(data)
                if good < len(data):
                    if k != len(segments) - 1:
                        raise StateError(
                            f"{path.name} is damaged at byte {good} of {len(data)} and is not the newest "
                            "journal segment; refusing to start with a gap in the event history"
                        )
                    with path.open("r+b") as f:
                        f.truncate(good)
                        os.fsync(f.fileno())
                    truncations.append(len(data) - good)
                for rec in records:
                    if record_seq(rec) > seq:
                        yield rec

        return gen(), truncations

    def cut_after(self, seq: int) -> int:
        """Remove every record above ``seq`` (whole chunks; a chunk never straddles a checkpoint's
        sequence number, which is where this cuts); returns the records removed.

        A cluster replica starts from its checkpoint and takes the rest from the stream again
        (``recovery.recover`` with ``tail=False``): what its journal holds past the checkpoint is
        a copy of the stream that the stream delivers once more.
        """
        removed = 0
        for first, path in reversed(self.segments()):
            data = path.read_bytes()
            records, good = read_records(data)
            if first > seq:
                removed += len(records)
                path.unlink()
                continue
            keep = 0  # bytes of the whole chunks at or below seq
            pos = 0
            while pos + _RECORD_HEAD.size <= good:
                length, _crc = _RECORD_HEAD.unpack_from(data, pos)
                end = pos + _RECORD_HEAD.size + length
                chunk = _decode_chunk(data[pos + _RECORD_HEAD.size : end])
                if chunk and record_seq(chunk[0]) > seq:
                    break
                keep = end
                pos = end
            cut = [r for r in records if record_seq(r) > seq]
            if keep < len(data):
                with path.open("r+b") as f:
                    f.truncate(keep)
                    os.fsync(f.fileno())
            removed += len(cut)
            break
        fsync_dir(self.dir)
        return removed

    def drop_before(self, seq: int) -> None:
        """Delete whole segments whose records are all at or below ``seq``."""
        segments = self.segments()
        for (_first, path), (nxt, _) in itertools.pairwise(segments):
            if nxt - 1 <= seq and path != self._path:
                path.unlink(missing_ok=True)


class Checkpoints:
    """Versioned, checksummed msgpack checkpoints written atomically."""

    def __init__(self, directory: Path, keep: int = 2) -> None:
        self.dir = directory
        self.keep = keep

    def list(self) -> list[tuple[int, Path]]:
        """(sequence number, path), newest first."""
        return sorted(_numbered(self.dir, "checkpoint-*.ckpt"), reverse=True)

    def write(self, seq: int, payload: dict[str, Any]) -> Path:
        """Serialise and store atomically; returns the final path. Runs fine in a thread."""
        body = msgpack.packb(payload, use_bin_type=True)
        head = _CKPT_HEAD.pack(_CKPT_MAGIC, CHECKPOINT_FORMAT, zlib.crc32(body), len(body))
        final = self.dir / f"checkpoint-{seq:012d}.ckpt"
        # A full disk: the older checkpoints stay as they are, and the half-written temporary
        # (.checkpoint-N.ckpt.tmp) goes, so it does not hold the space the next attempt needs.
        write_atomic(final, head, body)
        for _s, old in self.list()[self.keep :]:
            old.unlink(missing_ok=True)
        return final

    @staticmethod
    def read(path: Path) -> dict[str, Any]:
        """Load and verify one checkpoint; raises ``StateError`` saying what is wrong."""
        data = path.read_bytes()
        if len(data) < _CKPT_HEAD.size:
            raise StateError(f"{path.name}: shorter than its header")
        magic, version, crc, length = _CKPT_HEAD.unpack_from(data)
        if magic != _CKPT_MAGIC:
            raise StateError(f"{path.name}: not an arenad checkpoint")
        if version != CHECKPOINT_FORMAT:
            raise StateError(f"{path.name}: format {version}, this arenad reads {CHECKPOINT_FORMAT}")
        body = data[_CKPT_HEAD.size :]
        if len(body) != length:
            raise StateError(f"{path.name}: body is {len(body)} bytes, header says {length}")
        if zlib.crc32(body) != crc:
            raise StateError(f"{path.name}: checksum mismatch")
        try:
            payload = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise StateError(f"{path.name}: undecodable ({type(e).__name__})") from e
        if not isinstance(payload, dict):
            raise StateError(f"{path.name}: payload is not a map")
        return payload

    def clean_temporaries(self) -> None:
        for tmp in self.dir.glob(".checkpoint-*.tmp"):
            tmp.unlink(missing_ok=True)
