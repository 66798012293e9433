"""The batch ingest path (decode_msgpack_rows, Intake.check_rows, encode_chunk; the pipeline's
step in test_pipeline.py) against the per-event reference it replaced: decode_msgpack,
Intake.check and the row builder."""

from __future__ import annotations

import asyncio
import errno
import math
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rooms import Rooms, build

from arenad.core.events import KillEvent, PlacementEvent, Reject, RejectReason
from arenad.daemon.config import DaemonSettings
from arenad.daemon.intake import Intake
from arenad.daemon.state import (
    _RECORD_HEAD,
    ControlRecord,
    JournalRecord,
    PlacementRecord,
    encode_chunk,
    read_records,
    record_kind,
    record_seq,
)
from arenad.daemon.types import Batch
from arenad.decode import DecodedRow, decode_msgpack, decode_msgpack_rows

NOW = 1_800_000_000.0


def as_row(item: DecodedRow) -> DecodedRow:
    """A kill as a row, whether decoded as a ``KillEvent`` or as a row (unusual shapes are
    handed over as the ``KillEvent`` that ``event_from_obj`` builds)."""
    if isinstance(item, KillEvent):
        return (item.t, item.attacker, item.victim, item.server, item.id)
    return item


# ------------------------------------------------------------------------------------ decoding
#: Integers msgpack can pack.
ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
names = st.one_of(
    st.sampled_from(["alice", "bob", "carol", "", "ä" * 40, "x" * 33, "y" * 129, "δ", "\U0001f600" * 32]),
    st.text(max_size=40),
)
times = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    ints,
    st.sampled_from([NOW, NOW - 10.0, True, None, "1", 1e308]),
)
values = st.one_of(names, times, st.none(), st.lists(names, max_size=3), st.binary(max_size=4))
keys = st.sampled_from(["t", "attacker", "victim", "server", "id", "weapon", "placements", "other"])
plain_kill = st.builds(
    lambda t, a, v: {"t": t, "attacker": a, "victim": v},
    st.floats(min_value=0, max_value=2e9),
    st.sampled_from(["alice", "bob", "carol", "dave"]),
    st.sampled_from(["alice", "bob", "carol", "dave"]),
)
full_kill = st.builds(
    lambda d, extra: {**d, **extra},
    plain_kill,
    st.dictionaries(
        st.sampled_from(["server", "id", "weapon"]),
        st.one_of(names, ints, st.none(), st.booleans()),
        max_size=3,
    ),
)
placement = st.builds(
    lambda t, groups: {"t": t, "placements": groups},
    st.floats(min_value=0, max_value=2e9),
    st.lists(st.lists(st.sampled_from(["alice", "bob", "carol", "dave"]), max_size=3), max_size=4),
)
events = st.one_of(
    plain_kill,
    full_kill,
    placement,
    st.dictionaries(keys, values, max_size=7),
    values,
    st.dictionaries(ints, values, max_size=3),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.lists(events, max_size=12), events))
def test_rows_decode_as_events(obj: Any) -> None:
    payload = msgpack.packb(obj, use_bin_type=True)
    assert [as_row(x) for x in decode_msgpack_rows(payload)] == [as_row(x) for x in decode_msgpack(payload)]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_rows_decode_garbage_as_events(payload: bytes) -> None:
    assert [as_row(x) for x in decode_msgpack_rows(payload)] == [as_row(x) for x in decode_msgpack(payload)]


def test_rows_of_the_common_shape_are_tuples() -> None:
    payload = msgpack.packb(
        [
            {"t": 1.5, "attacker": "a", "victim": "b"},
            {"t": 2.5, "attacker": "c", "victim": "d", "server": "eu-1", "id": 7, "weapon": "rail"},
            {"t": 3.5, "attacker": "é" * 32, "victim": "b"},
        ]
    )
    assert decode_msgpack_rows(payload) == [
        (1.5, "a", "b", None, None),
        (2.5, "c", "d", "eu-1", "7"),
        (3.5, "é" * 32, "b", None, None),
    ]


def test_msgpack_strings_never_hold_a_lone_surrogate() -> None:
    """Why the three-key path skips ``_utf8_ok``: the strict UTF-8 decoding refuses surrogates."""
    payload = msgpack.packb([{"t": 1.0, "attacker": "a", "victim": "b"}]).replace(
        b"\xa1a", b"\xa3\xed\xa0\x80"
    )
    assert [type(x) for x in decode_msgpack_rows(payload)] == [Reject]
    assert decode_msgpack_rows(payload) == list(decode_msgpack(payload))


# ------------------------------------------------------------------------------------ intake
def reference(
    intake: Intake,
    items: list[KillEvent | PlacementEvent | Reject],
    default: str | None,
    now: float,
    seq: int,
) -> tuple[int, list[JournalRecord], list[Reject]]:
    """What the engine step did per item before check_rows."""
    records: list[JournalRecord] = []
    rejects: list[Reject] = []
    for item in items:
        if isinstance(item, Reject):
            rejects.append(item)
            continue
        checked = intake.check(item, default, now)
        if isinstance(checked, Reject):
            rejects.append(checked)
            continue
        seq += 1
        if isinstance(checked, PlacementEvent):
            records.append(PlacementRecord(seq, checked.t, checked.placements, checked.server, checked.id))
            continue
        records.append((seq, checked.t, checked.attacker, checked.victim, checked.server, checked.id))
    return seq, records, rejects


offsets = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 299.0, 301.0, -7 * 86400.0 + 1, -7 * 86400.0 - 1]),
    st.floats(min_value=-8 * 86400, max_value=400),
)
intake_items = st.lists(
    st.one_of(
        st.builds(
            KillEvent,
            offsets.map(lambda d: NOW + d),
            st.sampled_from(["a", "b"]),
            st.sampled_from(["c", "d"]),
            st.sampled_from([None, "eu-1", "eu-2", ""]),
            st.sampled_from([None, "1", "2", "3"]),
        ),
        st.builds(
            PlacementEvent,
            offsets.map(lambda d: NOW + d),
            st.just((("a",), ("b", "c"))),
            st.sampled_from([None, "eu-1"]),
            st.sampled_from([None, "1", "4"]),
        ),
        st.sampled_from([Reject(RejectReason.MALFORMED, "x"), Reject(RejectReason.SELF_KILL, "y")]),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    intake_items,
    st.sampled_from([None, "eu-1", "key-9"]),
    st.booleans(),
    st.sampled_from([1_000_000, 3]),
    st.booleans(),
)
def test_check_rows_is_check(
    items: list[KillEvent | PlacementEvent | Reject],
    default: str | None,
    clamp: bool,
    max_ids: int,
    as_tuples: bool,
) -> None:
    config = DaemonSettings(clamp_future=clamp, dedupe_max_ids=max_ids)
    old, new = Intake(config), Intake(config)
    old.remember("eu-1", "3", NOW - 5)
    new.remember("eu-1", "3", NOW - 5)
    want = reference(old, items, default, NOW, 41)
    rows: list[DecodedRow] = [
        (x.t, x.attacker, x.victim, x.server, x.id) if as_tuples and isinstance(x, KillEvent) else x
        for x in items
    ]
    records: list[JournalRecord] = []
    rejects: list[Reject] = []
    seq = new.check_rows(rows, default, NOW, 41, records=records, rejects=rejects)
    assert (seq, records, rejects) == want
    assert new.clamped == old.clamped
    assert new.export_state() == old.export_state()


# ------------------------------------------------------------------------------------ journal
def old_encode_chunk(records: list[JournalRecord]) -> bytes:
    rows = [r[1:] if isinstance(r, tuple) else r.row() for r in records]
    chunk: list[Any] = [record_seq(records[0]), rows]
    if not all(isinstance(r, tuple) for r in records):
        chunk.append(bytes(record_kind(r) for r in records))
    body = msgpack.packb(chunk, use_bin_type=True)
    return _RECORD_HEAD.pack(len(body), zlib.crc32(body)) + body


@pytest.mark.parametrize("mixed", [False, True])
def test_encode_chunk_bytes_unchanged(mixed: bool) -> None:
    records: list[JournalRecord] = [
        (10 + k, NOW + k / 8, f"p{k}", f"q{k}", None if k % 3 else "eu-1", None if k % 2 else str(k))
        for k in range(600)
    ]
    if mixed:
        records[5] = PlacementRecord(15, NOW, (("a",), ("b", "c")), "eu-1", None)
        records[9] = ControlRecord(19, NOW, "season_start", {"name": "s2"})
    data = encode_chunk(records)
    assert data == old_encode_chunk(records)
    back, end = read_records(data)
    assert end == len(data)
    assert back == records


# ------------------------------------------------------------------------------------ the engine task
def kills(n: int, t0: float, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"t": t0 + k * 0.01, "attacker": f"p{k % 7}", "victim": f"p{k % 7 + 1}", **extra} for k in range(n)
    ]


def datagrams(now: float) -> list[bytes]:
    return [
        msgpack.packb(kills(50, now - 100)),
        msgpack.packb(
            [*kills(3, now - 90, server="eu-1", id=1), {"t": now - 80, "attacker": "x", "victim": "x"}]
        ),
        msgpack.packb(kills(2, now - 70, server="eu-1", id=1)),  # the same ids: duplicate_id
        b"\xc1",  # not msgpack
        msgpack.packb([]),
        msgpack.packb(kills(700, now - 60)),  # more than one check slice in one datagram
        msgpack.packb(kills(2, now + 3600) + kills(2, now - 30 * 86400) + kills(2, now + 10)),
        msgpack.packb({"t": now - 1, "placements": [["a"], ["b", "c"]], "id": "m1"}),
    ]


def new_pipeline(state: Path) -> Rooms:
    r = build(state)
    r.recover()
    return r


def test_process_journals_what_the_reference_accepts(tmp_path: Path) -> None:
    r = new_pipeline(tmp_path / "state")
    d = r.state
    now = r.clock.now()
    dgs = datagrams(now)
    try:
        asyncio.run(r.pipeline.process([Batch("udp", [], payload=dg) for dg in dgs]))
        journal = r.store.journal.current_path
        assert journal is not None
        got, _ = read_records(journal.read_bytes())
    finally:
        r.close()
    # The reference: every datagram decoded into events and checked one by one, in order.
    intake = Intake(DaemonSettings())
    items = [x for dg in dgs for x in decode_msgpack(dg)]
    step_now = d.intake._seen[("eu-1", "1")]  # the clock reading of the step (ids are kept with it)
    seq, want, rejects = reference(intake, items, None, step_now, 0)
    assert got == want
    assert d.seq == seq == len(want)
    assert d.received["udp"] == len(items)
    rejected: dict[str, int] = {}
    for reject in rejects:
        rejected[reject.reason.value] = rejected.get(reject.reason.value, 0) + 1
    assert dict(d.rejected) == rejected
    assert set(rejected) >= {"self_kill", "duplicate_id", "malformed", "future_time", "too_old"}
    assert d.intake.clamped == intake.clamped == 2
    assert all(math.isfinite(r[1]) for r in got if isinstance(r, tuple))


def test_held_step_still_counts_its_datagrams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = new_pipeline(tmp_path / "state")
    now = r.clock.now()
    batches = [Batch("udp", [], payload=dg) for dg in datagrams(now)]

    def full(records: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(r.store.journal, "append", full)
    try:
        asyncio.run(r.pipeline.process(batches))
        assert r.pipeline.held is not None
        assert r.state.seq == 0 and r.state.applied == 0
        r.pipeline.abandon_held()
    finally:
        r.close()
    assert r.pipeline.dropped["udp"] == sum(len(list(decode_msgpack(dg))) for dg in datagrams(now))
