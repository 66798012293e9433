"""Journal and checkpoints on real files: torn tails, corruption, atomic replacement."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import msgpack
import pytest

from arenad.core.events import KillEvent, PlacementEvent, Reject, RejectReason
from arenad.daemon.config import DaemonSettings
from arenad.daemon.intake import Intake
from arenad.daemon.state import (
    KIND_KILL,
    KIND_PLACEMENT,
    Checkpoints,
    Journal,
    JournalRecord,
    PlacementRecord,
    Record,
    StateError,
    encode_chunk,
    encode_record,
    read_records,
    record_seq,
)


def records(first: int, n: int) -> list[Record]:
    return [(first + k, 1000.0 + k, f"a{k}", f"v{k}", "eu-1", str(first + k)) for k in range(n)]


class TestJournal:
    """Whole records come back; a torn tail is cut; damage in the middle stops recovery."""

    def test_a_chunk_keeps_consecutive_sequence_numbers(self, tmp_path: Path) -> None:
        j = Journal(tmp_path)
        j.open_segment(7)
        j.append(records(7, 4))
        j.close()
        got, _ = Journal(tmp_path).replay_after(0)
        assert list(got) == records(7, 4)

    def test_round_trip_across_segments(self, tmp_path: Path) -> None:
        j = Journal(tmp_path)
        j.open_segment(1)
        j.append(records(1, 5))
        j.open_segment(6)
        j.append(records(6, 5))
        j.sync()
        j.close()
        got, truncations = Journal(tmp_path).replay_after(3)
        assert [record_seq(r) for r in got] == [4, 5, 6, 7, 8, 9, 10]
        assert truncations == []

    @pytest.mark.parametrize("upto", [0, 3, 5, 10, 12])
    def test_cut_after_leaves_exactly_the_records_up_to_a_checkpoint(self, tmp_path: Path, upto: int) -> None:
        # Segments as the checkpointer leaves them: a new one after each checkpoint (at 5, 10).
        j = Journal(tmp_path)
        j.open_segment(1)
        j.append(records(1, 3))
        j.append(records(4, 2))
        j.open_segment(6)
        j.append(records(6, 5))
        j.open_segment(11)
        j.append(records(11, 2))
        j.close()
        # upto 3: inside a segment, at a chunk boundary (a checkpoint between two steps)
        removed = Journal(tmp_path).cut_after(upto)
        got, _ = Journal(tmp_path).replay_after(0)
        assert [record_seq(r) for r in got] == list(range(1, min(upto, 12) + 1))
        assert removed == 12 - min(upto, 12)
        j2 = Journal(tmp_path)
        j2.open_segment(min(upto, 12) + 1)  # the next records follow on without a gap
        j2.append(records(min(upto, 12) + 1, 1))
        j2.close()
        again, _ = Journal(tmp_path).replay_after(0)
        assert [record_seq(r) for r in again] == list(range(1, min(upto, 12) + 2))

    @pytest.mark.parametrize("cut", [1, 5, 9, 13])
    def test_torn_tail_is_cut_at_the_last_whole_record(self, tmp_path: Path, cut: int) -> None:
        j = Journal(tmp_path)
        j.open_segment(1)
        j.append(records(1, 3))
        j.close()
        path = tmp_path / Journal.segment_name(1)
        whole = path.stat().st_size
        with path.open("ab") as f:
            f.write(encode_record(records(4, 1)[0])[:cut])
        gen, truncations = Journal(tmp_path).replay_after(0)
        assert [record_seq(r) for r in gen] == [1, 2, 3]
        assert truncations == [cut]
        assert path.stat().st_size == whole

    def test_flipped_byte_in_the_tail_record_is_cut(self, tmp_path: Path) -> None:
        j = Journal(tmp_path)
        j.open_segment(1)
        for rec in records(1, 3):  # three chunks of one event each
            j.append([rec])
        j.close()
        path = tmp_path / Journal.segment_name(1)
        data = bytearray(path.read_bytes())
        data[-2] ^= 0xFF
        path.write_bytes(bytes(data))
        gen, truncations = Journal(tmp_path).replay_after(0)
        assert [record_seq(r) for r in gen] == [1, 2]
        assert truncations and truncations[0] > 0

    def test_damage_in_an_older_segment_is_an_error(self, tmp_path: Path) -> None:
        j = Journal(tmp_path)
        j.open_segment(1)
        j.append(records(1, 3))
        j.open_segment(4)
        j.append(records(4, 3))
        j.close()
        old = tmp_path / Journal.segment_name(1)
        old.write_bytes(old.read_bytes()[:-3])
        gen, _ = Journal(tmp_path).replay_after(0)
        with pytest.raises(StateError, match="not the newest"):
            list(gen)

    def test_drop_before_keeps_what_a_checkpoint_does_not_cover(self, tmp_path: Path) -> None:
        j = Journal(tmp_path)
        for first in (1, 11, 21):
            j.open_segment(first)
            j.append(records(first, 10))
        j.drop_before(20)
        assert [first for first, _ in j.segments()] == [21]
        j.close()

    def test_read_records_stops_at_garbage(self) -> None:
        data = encode_record(records(1, 1)[0]) + b"\xff" * 20
        got, end = read_records(data)
        assert len(got) == 1
        assert end == len(encode_record(records(1, 1)[0]))


def placement(seq: int, t: float = 2000.0) -> PlacementRecord:
    return PlacementRecord(seq, t, (("alice",), ("bob", "carol"), ("dave",)), "eu-1", f"m{seq}")


def chunk_record(body: object) -> bytes:
    """A whole journal record (length, checksum) around any msgpack body."""
    data = msgpack.packb(body, use_bin_type=True)
    return struct.pack("<II", len(data), zlib.crc32(data)) + data


class TestJournalRecordKinds:
    """Match placements are journaled beside kills; kill-only chunks keep the first layout."""

    def test_kills_alone_are_written_in_the_original_layout(self) -> None:
        recs = records(1, 3)
        # What every arenad before match placements wrote: [first_seq, [[t, a, v, s, id], ...]].
        assert encode_chunk(recs) == chunk_record([1, [list(r[1:]) for r in recs]])

    def test_an_original_layout_journal_reads_as_kills(self, tmp_path: Path) -> None:
        recs = records(1, 4)
        (tmp_path / Journal.segment_name(1)).write_bytes(chunk_record([1, [list(r[1:]) for r in recs]]))
        got, truncations = Journal(tmp_path).replay_after(0)
        assert list(got) == recs
        assert truncations == []

    def test_placements_and_kills_round_trip_in_order(self, tmp_path: Path) -> None:
        mixed: list[JournalRecord] = [records(1, 1)[0], placement(2), records(3, 1)[0]]
        j = Journal(tmp_path)
        j.open_segment(1)
        j.append(mixed)
        j.append([placement(4)])
        j.close()
        got, truncations = Journal(tmp_path).replay_after(0)
        assert list(got) == [*mixed, placement(4)]
        assert truncations == []

    def test_a_placement_record_carries_its_pairs(self) -> None:
        rec = placement(1)
        assert rec.pairs == (
            ("alice", "bob"),
            ("alice", "carol"),
            ("alice", "dave"),
            ("bob", "dave"),
            ("carol", "dave"),
        )
        (back,), _ = read_records(encode_record(rec))
        assert isinstance(back, PlacementRecord) and back.pairs == rec.pairs

    def test_a_chunk_with_placements_says_each_records_kind(self) -> None:
        body = msgpack.unpackb(encode_chunk([records(1, 1)[0], placement(2)])[8:], raw=False)
        assert body[0] == 1 and body[2] == bytes([KIND_KILL, KIND_PLACEMENT])
        assert body[1][1] == [2000.0, [["alice"], ["bob", "carol"], ["dave"]], "eu-1", "m2"]

    @pytest.mark.parametrize(
        "body",
        [
            [1, [[1.0, "a", "v", None, None]], bytes([7])],  # a record kind this arenad does not know
            [1, [[1.0, "a", "v", None, None]], b"\x00", "more"],  # a chunk layout it does not know
        ],
    )
    def test_a_whole_record_from_a_newer_arenad_stops_recovery(self, tmp_path: Path, body: object) -> None:
        # A checksummed, whole record is not a torn tail: cutting it would lose acknowledged events.
        path = tmp_path / Journal.segment_name(1)
        path.write_bytes(encode_record(records(1, 1)[0]) + chunk_record(body))
        size = path.stat().st_size
        gen, _ = Journal(tmp_path).replay_after(0)
        with pytest.raises(StateError, match="newer arenad"):
            list(gen)
        assert path.stat().st_size == size

    def test_kinds_that_do_not_match_the_rows_are_a_torn_tail(self, tmp_path: Path) -> None:
        path = tmp_path / Journal.segment_name(1)
        whole = encode_record(records(1, 1)[0])
        path.write_bytes(whole + chunk_record([2, [[1.0, "a", "v", None, None]], b"\x00\x00"]))
        gen, truncations = Journal(tmp_path).replay_after(0)
        assert [record_seq(r) for r in gen] == [1]
        assert truncations and path.stat().st_size == len(whole)


class TestCheckpoints:
    """Atomic writes, verification, pruning and a clear error for each kind of damage."""

    def test_write_read_and_keep(self, tmp_path: Path) -> None:
        c = Checkpoints(tmp_path, keep=2)
        for seq in (5, 9, 12):
            c.write(seq, {"seq": seq, "blob": b"x" * seq})
        assert [s for s, _ in c.list()] == [12, 9]
        assert Checkpoints.read(c.list()[0][1])["blob"] == b"x" * 12
        assert not list(tmp_path.glob(".checkpoint-*"))

    @pytest.mark.parametrize(
        ("damage", "message"),
        [
            (lambda b: b[:10], "shorter than its header"),
            (lambda b: b"NOTARENA" + b[8:], "not an arenad checkpoint"),
            (lambda b: b[:-1], "header says"),
            (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "checksum"),
        ],
    )
    def test_damage_is_detected(self, tmp_path: Path, damage: object, message: str) -> None:
        c = Checkpoints(tmp_path)
        path = c.write(3, {"seq": 3})
        path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
        with pytest.raises(StateError, match=message):
            Checkpoints.read(path)


class TestIntake:
    """Wall-clock and duplicate rules, with the reason for each refusal."""

    def ev(self, t: float, event_id: str | None = None, server: str | None = None) -> KillEvent:
        return KillEvent(t, "a", "b", server, event_id)

    def test_future_and_old_events(self) -> None:
        intake = Intake(DaemonSettings(max_clock_skew=10, max_event_age=100))
        now = 10_000.0
        future = intake.check(self.ev(now + 11), None, now)
        old = intake.check(self.ev(now - 101), None, now)
        assert isinstance(future, Reject) and future.reason is RejectReason.FUTURE_TIME
        assert isinstance(old, Reject) and old.reason is RejectReason.TOO_OLD
        assert isinstance(intake.check(self.ev(now + 9), None, now), KillEvent)

    def test_duplicate_ids_per_server(self) -> None:
        intake = Intake(DaemonSettings())
        now = 5000.0
        assert isinstance(intake.check(self.ev(now, "1"), "eu-1", now), KillEvent)
        dup = intake.check(self.ev(now, "1"), "eu-1", now)
        assert isinstance(dup, Reject) and dup.reason is RejectReason.DUPLICATE_ID
        assert isinstance(intake.check(self.ev(now, "1"), "us-2", now), KillEvent)

    def test_default_server_is_filled_in(self) -> None:
        out = Intake(DaemonSettings()).check(self.ev(1.0), "eu-1", 1.0)
        assert isinstance(out, KillEvent) and out.server == "eu-1"

    def test_placements_follow_the_same_rules_and_share_the_ids(self) -> None:
        intake = Intake(DaemonSettings(max_clock_skew=10, max_event_age=100))
        now = 10_000.0
        groups = (("a",), ("b",))
        future = intake.check(PlacementEvent(now + 11, groups), None, now)
        old = intake.check(PlacementEvent(now - 101, groups), None, now)
        assert isinstance(future, Reject) and future.reason is RejectReason.FUTURE_TIME
        assert isinstance(old, Reject) and old.reason is RejectReason.TOO_OLD
        ok = intake.check(PlacementEvent(now, groups, None, "m1"), "eu-1", now)
        assert ok == PlacementEvent(now, groups, "eu-1", "m1")
        again = intake.check(PlacementEvent(now + 1, groups, "eu-1", "m1"), None, now)
        assert isinstance(again, Reject) and again.reason is RejectReason.DUPLICATE_ID
        # An id names one event of a server, whatever its kind.
        kill = intake.check(self.ev(now, "m1", "eu-1"), None, now)
        assert isinstance(kill, Reject) and kill.reason is RejectReason.DUPLICATE_ID

    def test_window_and_cap_forget_old_ids(self) -> None:
        intake = Intake(DaemonSettings(dedupe_window=100, dedupe_max_ids=3))
        for k in range(5):
            intake.check(self.ev(1000.0 + k, str(k)), None, 1000.0 + k)
        assert len(intake) <= 3
        intake.prune(2000.0)
        assert len(intake) == 0
        state = Intake(DaemonSettings())
        state.import_state([["s", "x", 5.0]])
        dup = state.check(self.ev(5.0, "x", "s"), None, 5.0)
        assert isinstance(dup, Reject)
