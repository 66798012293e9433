"""Decoders for arenad's own wire schema: JSON lines and msgpack, bytes in, events or rejects out.

Pure functions over bytes; the only I/O helper, ``iter_file``, reads a whole file and hands its
bytes to them. Bad input never raises: it comes out as a ``Reject`` with a reason.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import msgpack

from arenad.core.events import KillEvent, PlacementEvent, Reject, RejectReason, event_from_obj
from arenad.errors import InputError

#: Longest JSON line accepted (a line holds one event or an array of events).
MAX_LINE_BYTES = 1 << 20

Decoded = KillEvent | PlacementEvent | Reject


def _expand(obj: object) -> Iterator[Decoded]:
    if isinstance(obj, list):
        if not obj:
            yield Reject(RejectReason.MALFORMED, "empty event array")
        for item in obj:
            yield event_from_obj(item)
    else:
        yield event_from_obj(obj)


def decode_json_line(line: bytes) -> Iterator[Decoded]:
    """One JSON line: an event object or an array of them. Blank lines yield nothing."""
    if len(line) > MAX_LINE_BYTES:
        yield Reject(RejectReason.OVERSIZE, f"line longer than {MAX_LINE_BYTES} bytes")
        return
    if not line.strip():
        return
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        yield Reject(RejectReason.MALFORMED, f"not JSON: {str(e)[:80]}")
        return
    yield from _expand(obj)


def decode_msgpack(payload: bytes) -> Iterator[Decoded]:
    """One msgpack object (an event map or an array of them), e.g. one UDP datagram."""
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as e:
        yield Reject(RejectReason.MALFORMED, f"not msgpack: {type(e).__name__}")
        return
    yield from _expand(obj)


def decode_msgpack_stream(data: bytes) -> Iterator[Decoded]:
    """Concatenated msgpack objects (a replay file). A corrupt byte is rejected and skipped."""
    pos = 0
    end = len(data)
    while pos < end:
        # Read through a file object, not feed(data[pos:]): each resynchronisation would copy the
        # whole rest of the stream, which made a corrupt stream cost O(n^2) (500 kB of nested
        # array headers took minutes). The unpacker reads at most 16 KiB ahead of what it needs.
        stream = io.BytesIO(data)
        stream.seek(pos)
        unpacker = msgpack.Unpacker(
            stream, raw=False, strict_map_key=False, max_buffer_size=max(end - pos, 1)
        )
        start = pos
        try:
            for obj in unpacker:
                yield from _expand(obj)
                pos = start + unpacker.tell()
            if pos < end:  # a truncated object at the end of the stream
                yield Reject(RejectReason.MALFORMED, f"truncated msgpack object at byte {pos}")
            return
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as e:
            yield Reject(RejectReason.MALFORMED, f"bad msgpack at byte {pos}: {type(e).__name__}")
            pos += 1  # resynchronise one byte further on


def looks_like_json(data: bytes) -> bool:
    head = data.lstrip()[:1]
    return head in (b"{", b"[")


def iter_file(path: Path) -> Iterator[Decoded]:
    """Every event of a JSON-lines or msgpack file (detected from the first byte), in order."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    if looks_like_json(data):
        for line in data.splitlines():
            yield from decode_json_line(line)
    else:
        yield from decode_msgpack_stream(data)
