"""The stream's wire format (arenad/cluster/wire.py): round trips, and refusals that never raise."""

from __future__ import annotations

import itertools
import math

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.cluster.ingest import MAX_MESSAGE_RECORDS, runs
from arenad.cluster.wire import (
    ON_CONTROL,
    ON_KILLS,
    SCHEMA,
    WireReject,
    chat_subject,
    decode_chat,
    decode_records,
    decode_rows,
    encode_chat,
    encode_records,
    kills_subject,
    message_id,
    server_token,
    subject_matches,
    token_server,
)
from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.feeds import ChatLine
from arenad.records import ControlRecord, JournalRecord, PlacementRecord, record_seq
from arenad.scopes import ScopeConfig, ScopeSet

names = st.text(min_size=1, max_size=40)
servers = st.one_of(st.none(), st.text(max_size=30))
ids = st.one_of(st.none(), st.text(min_size=1, max_size=20))
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)


@st.composite
def kill(draw: st.DrawFn) -> JournalRecord:
    return (0, draw(times), draw(names), draw(names), draw(servers), draw(ids))


@st.composite
def placement(draw: st.DrawFn) -> JournalRecord:
    players = draw(st.lists(st.text(min_size=1, max_size=20), min_size=2, max_size=8, unique=True))
    cut = sorted(set(draw(st.lists(st.integers(1, len(players) - 1), max_size=3))))
    groups = [players[a:b] for a, b in zip([0, *cut], [*cut, len(players)], strict=True)]
    return PlacementRecord(0, draw(times), tuple(tuple(g) for g in groups), draw(servers), draw(ids))


@st.composite
def control(draw: st.DrawFn) -> JournalRecord:
    op = draw(st.sampled_from(["hide", "unhide", "exclude", "include", "season_start", "recompute"]))
    table: dict[str, dict[str, object]] = {
        "hide": {"player": draw(names)},
        "unhide": {"player": draw(names)},
        "exclude": {"id": draw(st.integers(1, 99)), "player": draw(names), "reason": ""},
        "include": {"id": draw(st.integers(1, 99))},
        "season_start": {"name": draw(names), "alpha": 1.5, "lambda": 0.25},
        "recompute": {"scope": None, "from": draw(st.one_of(st.none(), times)), "reason": "test"},
    }
    return ControlRecord(0, draw(times), op, table[op])


ANY_KIND = ON_KILLS | ON_CONTROL
records = st.lists(st.one_of(kill(), placement(), control()), min_size=1, max_size=20)


class TestRecords:
    """Every record survives the wire, numbered as the replica numbers it."""

    @given(records, st.integers(min_value=1, max_value=10**12))
    def test_round_trip(self, recs: list[JournalRecord], first: int) -> None:
        got = decode_records(encode_records(recs), first, ANY_KIND)
        assert not isinstance(got, WireReject)
        assert len(got) == len(recs)
        for k, (a, b) in enumerate(zip(recs, got, strict=True)):
            if isinstance(a, tuple):
                assert b == (first + k, *a[1:])
            else:
                assert type(b) is type(a) and b.seq == first + k and b.row() == a.row()

    @given(st.binary(max_size=300))
    @settings(max_examples=500)
    def test_any_bytes_decode_or_are_refused_with_a_reason(self, body: bytes) -> None:
        got = decode_rows(body)
        if isinstance(got, WireReject):
            assert got.reason in ("undecodable", "schema_version", "malformed") and got.detail

    @given(
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(2**63), 2**64 - 1)
            | st.floats()
            | st.text(max_size=5)
            | st.binary(max_size=5),
            lambda c: st.lists(c, max_size=4),
            max_leaves=20,
        )
    )
    @settings(max_examples=300)
    def test_any_msgpack_value_is_refused_or_fully_valid(self, value: object) -> None:
        body = msgpack.packb([SCHEMA, value, b"\x00"] if isinstance(value, list) else value)
        got = decode_rows(body)
        if not isinstance(got, WireReject):  # a valid message: every row builds a record
            assert decode_records(body, 1) is not None

    def test_each_refusal_names_its_reason(self) -> None:
        assert decode_rows(b"\xc1").reason == "undecodable"  # type: ignore[union-attr]
        assert decode_rows(msgpack.packb({"a": 1})).reason == "undecodable"  # type: ignore[union-attr]
        assert decode_rows(msgpack.packb([2, [], b""])).reason == "schema_version"  # type: ignore[union-attr]
        assert decode_rows(msgpack.packb([True, [], b""])).reason == "schema_version"  # type: ignore[union-attr]
        bad_rows = [
            [[1.0, "a", "b", None]],  # 4 fields for a kill
            [[math.nan, "a", "b", None, None]],
            [[1.0, "", "b", None, None]],  # an empty name
            [[1.0, "a" * 5000, "b", None, None]],
            [[1.0, "a", 7, None, None]],
            [[True, "a", "b", None, None]],  # a bool is not a time
        ]
        for rows in bad_rows:
            got = decode_rows(msgpack.packb([SCHEMA, rows, b"\x00"]))
            assert isinstance(got, WireReject) and got.reason == "malformed", rows
        unknown_kind = decode_rows(msgpack.packb([SCHEMA, [[1.0]], b"\x09"]))
        assert isinstance(unknown_kind, WireReject) and "kind 9" in unknown_kind.detail

    @pytest.mark.parametrize(
        "row",
        [
            [1.0, "bogus", {}],  # an op this arenad does not know (a newer one's)
            [1.0, "season_start", {}],
            [1.0, "season_start", {"name": "s", "alpha": "x", "lambda": 0.0}],
            [1.0, "exclude", {"x": 1}],
            [1.0, "exclude", {"id": 1}],  # neither a player nor a server
            [1.0, "merge", {"player": "a"}],
            [1.0, "include", {"id": "zz"}],
            [1.0, "hide", {}],
            [1.0, "recompute", {"from": "yesterday"}],
        ],
    )
    def test_a_control_record_the_applier_cannot_apply_is_refused(self, row: list[object]) -> None:
        got = decode_rows(msgpack.packb([SCHEMA, [row], b"\x02"]), ON_CONTROL)
        assert isinstance(got, WireReject) and got.reason == "malformed", got

    @pytest.mark.parametrize(
        "groups", [[["a"], ["a"]], [["a"]], [["a", "b"], []], [[f"p{k}"] for k in range(300)]]
    )
    def test_a_match_the_decoders_refuse_is_refused(self, groups: list[list[str]]) -> None:
        got = decode_rows(msgpack.packb([SCHEMA, [[1.0, groups, "s", None]], b"\x01"]))
        assert isinstance(got, WireReject) and got.reason == "malformed"

    def test_kinds_belong_to_their_subjects(self) -> None:
        hide = [1.0, "hide", {"player": "a"}]
        kill = [1.0, "a", "b", "s", None]
        assert isinstance(decode_rows(msgpack.packb([SCHEMA, [hide], b"\x02"]), ON_KILLS), WireReject)
        assert isinstance(decode_rows(msgpack.packb([SCHEMA, [kill], b"\x00"]), ON_CONTROL), WireReject)
        assert decode_rows(msgpack.packb([SCHEMA, [hide], b"\x02"]), ON_CONTROL) == [(2, hide)]

    @given(st.lists(control(), min_size=1, max_size=6))
    @settings(max_examples=200)
    def test_the_applier_applies_every_control_record_the_wire_accepts(
        self, recs: list[JournalRecord]
    ) -> None:
        got = decode_records(encode_records(recs), 1, ON_CONTROL)
        assert not isinstance(got, WireReject)
        applier = Applier(ScopeSet(ADRParams(), ScopeConfig()), rules="journal")
        for rec in got:
            assert isinstance(rec, ControlRecord)
            applier.control(rec)  # never raises for what the wire let through

    def test_one_bad_row_refuses_the_whole_message(self) -> None:
        good = [1.0, "a", "b", "s", "1"]
        got = decode_rows(msgpack.packb([SCHEMA, [good, [1.0, "a"]], b"\x00\x00"]))
        assert isinstance(got, WireReject) and got.detail.startswith("row 1")


class TestSubjects:
    """Server ids become one subject token and back; filters match as NATS matches them."""

    @given(servers)
    def test_token_round_trip(self, server: str | None) -> None:
        token = server_token(server)
        assert token_server(token) == server
        assert token and not any(c in token for c in ". *>\t\r\n")

    def test_plain_ids_stay_readable(self) -> None:
        assert kills_subject("arena", "eu-1") == "arena.eu-1.kills"
        assert chat_subject("arena", "eu_2") == "arena.eu_2.chat"
        assert kills_subject("arena", None) == "arena.~.kills"
        assert kills_subject("arena", "") == "arena.~~.kills"
        assert server_token("a.b") == "a~2Eb"

    def test_matching(self) -> None:
        assert subject_matches("arena.eu-1.kills", "arena.>")
        assert subject_matches("arena.eu-1.kills", "arena.*.kills")
        assert subject_matches("arena.eu-1.kills", "arena.eu-1.kills")
        assert not subject_matches("arena.eu-1.kills", "arena.eu-2.kills")
        assert not subject_matches("arena.eu-1.chat", "arena.*.kills")
        assert not subject_matches("arena", "arena.>")  # ">" needs at least one more token
        assert not subject_matches("arena.eu-1.kills.x", "arena.*.kills")


class TestMessageIds:
    """A redelivery of the same events gets the same id (JetStream keeps it once)."""

    def test_ids_name_events_with_ids_whatever_their_time(self) -> None:
        a = [(0, 10.0, "x", "y", "s", "1"), (0, 11.0, "y", "x", "s", "2")]
        clamped = [(0, 12.0, "x", "y", "s", "1"), (0, 12.0, "y", "x", "s", "2")]
        assert message_id("s", a, encode_records(a)) == message_id("s", clamped, encode_records(clamped))
        other = [(0, 10.0, "x", "y", "s", "1"), (0, 11.0, "y", "x", "s", "3")]
        assert message_id("s", a, encode_records(a)) != message_id("s", other, encode_records(other))
        assert message_id("s", a, encode_records(a)) != message_id("t", a, encode_records(a))

    def test_events_without_ids_are_named_by_their_bytes(self) -> None:
        a = [(0, 10.0, "x", "y", "s", None)]
        b = [(0, 10.5, "x", "y", "s", None)]
        assert message_id("s", a, encode_records(a)) != message_id("s", b, encode_records(b))


class TestRuns:
    """An ingest step becomes messages of one server each, in the order it accepted them."""

    @given(st.lists(st.sampled_from(["a", "b", None]), max_size=60))
    def test_runs_keep_order_and_split_by_server(self, order: list[str | None]) -> None:
        recs: list[JournalRecord] = [(k + 1, float(k), "x", "y", s, str(k)) for k, s in enumerate(order)]
        parts = runs(recs)
        assert [r for _s, part in parts for r in part] == recs
        for server, part in parts:
            assert all(r[4] == server for r in part)  # type: ignore[index]
        for (s1, _), (s2, _) in itertools.pairwise(parts):
            assert s1 != s2  # consecutive runs of one server are merged

    def test_a_message_never_spans_two_source_batches(self) -> None:
        recs: list[JournalRecord] = [(k, 0.0, "x", "y", "s", str(k)) for k in range(1, 11)]
        assert [[record_seq(r) for r in p] for _s, p in runs(recs, [3, 3, 7, 10])] == [
            [1, 2, 3],
            [4, 5, 6, 7],
            [8, 9, 10],
        ]
        # the same batch in another step, with other batches around it: the same message
        alone = runs(recs[3:7], [7])
        assert [list(p) for _s, p in alone] == [recs[3:7]]

    def test_a_long_run_is_split(self) -> None:
        recs: list[JournalRecord] = [
            (k, 0.0, "x", "y", "s", None) for k in range(MAX_MESSAGE_RECORDS * 2 + 1)
        ]
        assert [len(p) for _s, p in runs(recs)] == [MAX_MESSAGE_RECORDS, MAX_MESSAGE_RECORDS, 1]


class TestChat:
    @given(st.text(max_size=20), st.text(max_size=50), st.booleans())
    def test_round_trip(self, name: str, text: str, team: bool) -> None:
        line = ChatLine("eu-1", 5.0, "3", "guid:1", name, text, team)
        assert decode_chat(encode_chat(line)) == line

    def test_refusals(self) -> None:
        assert isinstance(decode_chat(b"\xc1"), WireReject)
        assert isinstance(decode_chat(msgpack.packb([SCHEMA, 1, 2, 3, 4, 5, 6, 7, 8])), WireReject)
