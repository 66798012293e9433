"""Decoders for arenad's own wire schema: JSON lines and msgpack, bytes in, events or rejects out.

Pure functions over bytes, no I/O (``arenad.replay.iter_file`` reads a file and hands its bytes
to them; tests/core/test_purity.py keeps it so). Bad input never raises: it comes out as a
``Reject`` with a reason.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import msgpack
import orjson

from arenad.core.events import (
    _SAFE_CHARS,
    KillEvent,
    PlacementEvent,
    Reject,
    RejectReason,
    event_from_obj,
    kill_row,
)

try:  # the C scanner of the common JSON-line shape (arenad/core/_jsonl.c), when it was built
    from arenad.core._ladder import NameTable
    from arenad.core._ladder import scan_kills as _scan_kills
except ImportError:  # pragma: no cover - a build without the extension
    NameTable = None  # type: ignore[assignment,misc]
    _scan_kills = None  # type: ignore[assignment]

#: Longest JSON line accepted (a line holds one event or an array of events).
MAX_LINE_BYTES = 1 << 20

Decoded = KillEvent | PlacementEvent | Reject

#: A kill that passed every check of the wire schema, as the journal keeps it:
#: ``(t, attacker, victim, server, id)`` (a weapon is checked, then dropped: it is not journaled).
KillRow = tuple[float, str, str, str | None, str | None]
#: What ``decode_msgpack_rows`` yields: a ``KillRow`` on the common path, else what
#: ``event_from_obj`` returns (a ``KillEvent`` of an unusual shape, a placement or a refusal).
DecodedRow = KillRow | Decoded


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


def decode_json_rows(data: bytes) -> Iterator[DecodedRow]:
    """``decode_json_line`` over every line of ``data``, a kill of the common shape as a ``KillRow``.

    The batch replay's decoder (``arenad replay``): orjson parses a line, and when the result
    passes the wire schema's fast path (``kill_row``) it is that kill; anything else, orjson's
    refusals included, is decoded again by ``decode_json_line`` (the standard library's parser),
    so every refusal and every unusual event comes out exactly as it always did.
    """
    loads = orjson.loads
    safe = _SAFE_CHARS
    for line in data.splitlines():
        if len(line) <= MAX_LINE_BYTES:
            try:
                obj = loads(line)
            except orjson.JSONDecodeError:
                obj = None
            if type(obj) is dict:
                # {"t", "attacker", "victim"[, "server"]} of ASCII names inline, with exactly
                # kill_row's checks (``t - t == 0.0`` is isfinite for a float); the rest there.
                n = len(obj)
                if n in {3, 4}:
                    t = obj.get("t")
                    attacker = obj.get("attacker")
                    victim = obj.get("victim")
                    server = obj.get("server")
                    if (
                        type(t) is float
                        and type(attacker) is str
                        and type(victim) is str
                        and t - t == 0.0
                        and 0 < len(attacker) <= safe
                        and 0 < len(victim) <= safe
                        and attacker != victim
                        and attacker.isascii()
                        and victim.isascii()
                        and (
                            server is None
                            if n == 3
                            else type(server) is str and len(server) <= safe and server.isascii()
                        )
                    ):
                        yield (t, attacker, victim, server, None)
                        continue
                row = kill_row(obj)
                if row is not None:
                    yield row[:5]
                    continue
        yield from decode_json_line(line)


def name_table() -> NameTable | None:
    """A table for ``scan_json_kills(names=...)``: each distinct name is made once as a str and
    handed out again by its bytes. None when the C extension was not built."""
    return None if NameTable is None else NameTable()


def scan_json_kills(
    data: bytes,
    pos: int,
    attackers: list[str],
    victims: list[str],
    times: list[float],
    *,
    limit: int,
    names: NameTable | None = None,
) -> tuple[int, int] | None:
    """The batch replay's decoder in C: from byte ``pos`` of JSON lines, kills of the common shape
    appended to the three lists (at most ``limit``) until a line the scanner is not certain about.

    Returns ``(stop, next)``: ``stop`` is where it stopped, ``next`` the start of the line after
    the one at ``stop`` when that line needs ``decode_json_rows(data[stop:next])`` (``next ==
    stop`` when it stopped at the limit or the end). What it appends is exactly what
    ``decode_json_line`` makes of those lines (``arenad/core/_jsonl.c`` has the shape it takes;
    tests/test_decode.py compares the two). With ``names`` (``name_table()``), a name met before
    is appended as the same str object again. None when the C extension was not built.
    """
    if _scan_kills is None:
        return None
    stop, nxt = _scan_kills(data, pos, attackers, victims, times, limit, _SAFE_CHARS, MAX_LINE_BYTES, names)
    return stop, nxt


def decode_msgpack(payload: bytes) -> Iterator[Decoded]:
    """One msgpack object (an event map or an array of them), e.g. one UDP datagram."""
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as e:
        yield Reject(RejectReason.MALFORMED, f"not msgpack: {type(e).__name__}")
        return
    yield from _expand(obj)


def decode_msgpack_rows(payload: bytes) -> list[DecodedRow]:
    """``decode_msgpack`` in one pass, for the daemon's hot path (one UDP datagram of kills).

    Every item comes out as ``decode_msgpack`` would decode it, except that a kill is a plain
    ``KillRow`` tuple instead of a ``KillEvent`` (building the frozen dataclass cost more than
    all of its checks). Only kills of the shape well-behaved senders use take the inline path
    below, with exactly ``event_from_obj``'s fast-path checks; anything else goes through
    ``event_from_obj`` itself, so every refusal keeps its reason and detail.
    """
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as e:
        return [Reject(RejectReason.MALFORMED, f"not msgpack: {type(e).__name__}")]
    if type(obj) is not list:
        return [_row(obj)]
    if not obj:
        return [Reject(RejectReason.MALFORMED, "empty event array")]
    out: list[DecodedRow] = []
    append = out.append
    safe = _SAFE_CHARS
    for item in obj:
        # {"t", "attacker", "victim"} and nothing else: three keys, all present with these types.
        # ``t - t == 0.0`` is ``math.isfinite(t)`` for a float. msgpack decodes strings as strict
        # UTF-8, which refuses surrogates, so these names encode as UTF-8 (``_utf8_ok``) already.
        if type(item) is dict and len(item) == 3:
            try:
                t = item["t"]
                attacker = item["attacker"]
                victim = item["victim"]
            except KeyError:
                pass
            else:
                if (
                    type(t) is float
                    and type(attacker) is str
                    and type(victim) is str
                    and t - t == 0.0
                    and 0 < len(attacker) <= safe
                    and 0 < len(victim) <= safe
                    and attacker != victim
                ):
                    append((t, attacker, victim, None, None))
                    continue
        append(_row(item))
    return out


def _row(obj: Any) -> DecodedRow:
    """One event object as ``decode_msgpack_rows`` hands it over (see there)."""
    row = kill_row(obj)  # event_from_obj's fast path, as a tuple (the weapon is not journaled)
    if row is not None:
        return row[:5]
    return event_from_obj(obj)


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
    """Whether ``data`` starts (after whitespace) as JSON does; msgpack events never do."""
    head = data.lstrip()[:1]
    return head in (b"{", b"[")
