"""Signed UDP datagrams (arenad.auth): framing, MAC, freshness, replay window, test vectors."""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arenad.auth import (
    MAC_SIZE,
    WINDOW,
    AuthReason,
    AuthReject,
    ReplayWindow,
    Signer,
    Verified,
    Verifier,
    is_signed,
    parse_key,
    sign,
)

KEY = bytes(range(32))
NOW = 1_700_000_000_000
VECTORS = Path(__file__).resolve().parent.parent / "docs" / "udp-auth-vectors.json"

key_ids = st.from_regex(r"[A-Za-z0-9._:-]{1,64}", fullmatch=True)
seqs = st.integers(1, 2**64 - 1)


def reference_sign(key: bytes, key_id: str, seq: int, ts_ms: int, payload: bytes) -> bytes:
    """An independent implementation of the documented layout (hmac + struct only)."""
    kid = key_id.encode("ascii")
    body = b"AD" + struct.pack(">BB", 1, len(kid)) + kid + struct.pack(">QQ", seq, ts_ms) + payload
    return body + hmac.new(key, body, hashlib.sha256).digest()


def verifier(skew_ms: int = 30_000) -> Verifier:
    return Verifier({"eu-1": KEY, "eu-2": bytes(32)}, skew_ms)


class TestSignVerify:
    """Any payload signs and verifies; any change to any bit is refused."""

    @given(
        payload=st.binary(max_size=2048), key_id=key_ids, seq=seqs, key=st.binary(min_size=16, max_size=200)
    )
    def test_any_payload_round_trips(self, payload: bytes, key_id: str, seq: int, key: bytes) -> None:
        datagram = sign(key, key_id, seq, NOW, payload)
        assert datagram == reference_sign(key, key_id, seq, NOW, payload)
        assert is_signed(datagram)
        out = Verifier({key_id: key}, 1000).check(datagram, NOW)
        assert out == Verified(key_id, seq, NOW, payload)

    @given(payload=st.binary(max_size=512), data=st.data())
    def test_any_single_bit_flip_is_refused(self, payload: bytes, data: st.DataObject) -> None:
        datagram = bytearray(sign(KEY, "eu-1", 7, NOW, payload))
        bit = data.draw(st.integers(0, len(datagram) * 8 - 1))
        datagram[bit // 8] ^= 1 << (bit % 8)
        out = verifier().check(bytes(datagram), NOW)
        assert isinstance(out, AuthReject)
        assert out.reason.forged

    def test_unknown_key_and_bad_mac_are_told_apart(self) -> None:
        v = verifier()
        assert verifier().check(sign(KEY, "nope", 1, NOW, b"\x90"), NOW) == AuthReject(
            AuthReason.UNKNOWN_KEY, "key id b'nope'"
        )
        out = v.check(sign(bytes(32), "eu-1", 1, NOW, b"\x90"), NOW)  # eu-2's key under eu-1's id
        assert isinstance(out, AuthReject) and out.reason is AuthReason.BAD_MAC

    @pytest.mark.parametrize("data", [b"AD", b"AD\x01", b"AD\x02" + bytes(60), b"AD\x01\x00" + bytes(60)])
    def test_truncated_or_other_versions_are_malformed(self, data: bytes) -> None:
        out = verifier().check(data, NOW)
        assert isinstance(out, AuthReject) and out.reason is AuthReason.MALFORMED

    def test_timestamp_outside_the_skew_is_stale(self) -> None:
        v = verifier(skew_ms=5000)
        assert isinstance(v.check(sign(KEY, "eu-1", 1, NOW + 5000, b""), NOW), Verified)
        for seq, ts in ((2, NOW + 5001), (3, NOW - 5001)):
            out = v.check(sign(KEY, "eu-1", seq, ts, b""), NOW)
            assert isinstance(out, AuthReject) and out.reason is AuthReason.STALE

    def test_a_failed_check_does_not_move_the_window(self) -> None:
        v = verifier(skew_ms=10)
        assert isinstance(v.check(sign(KEY, "eu-1", 5, NOW - 1000, b""), NOW), AuthReject)  # stale
        assert isinstance(v.check(sign(KEY, "eu-1", 5, NOW, b""), NOW), Verified)

    def test_msgpack_events_never_look_signed(self) -> None:
        assert not is_signed(b"\x81\xa1t\x01") and not is_signed(b"\x91\x80")

    def test_signer_counts_up(self) -> None:
        s = Signer("eu-1", KEY, 10)
        v = verifier()
        for want in (10, 11, 12):
            out = v.check(s.sign(b"\x90", NOW), NOW)
            assert isinstance(out, Verified) and out.seq == want

    @pytest.mark.parametrize("bad", ["xyz", "00ff", "ab" * 15])
    def test_parse_key_refuses_short_or_non_hex(self, bad: str) -> None:
        with pytest.raises(ValueError):
            parse_key(bad)

    def test_bad_arguments_name_themselves(self) -> None:
        with pytest.raises(ValueError, match="seq 0"):
            sign(KEY, "eu-1", 0, NOW, b"")
        with pytest.raises(ValueError, match="key_id 'a b'"):
            sign(KEY, "a b", 1, NOW, b"")


class TestReplayWindow:
    """Each sequence number is accepted once; reordering within the window is fine."""

    @given(st.lists(st.integers(1, 5000), max_size=300))
    def test_matches_the_model_of_a_sliding_window(self, order: list[int]) -> None:
        w = ReplayWindow()
        seen: set[int] = set()
        top = 0
        for seq in order:
            expected = seq not in seen and seq > top - WINDOW
            assert w.accept(seq) is expected, (seq, top)
            if expected:
                seen.add(seq)
                top = max(top, seq)

    @given(st.permutations(list(range(1, 200))))
    def test_out_of_order_within_the_window_is_accepted(self, order: list[int]) -> None:
        w = ReplayWindow()
        assert all(w.accept(seq) for seq in order)
        assert not any(w.accept(seq) for seq in order)

    def test_too_old_is_refused(self) -> None:
        w = ReplayWindow()
        assert w.accept(WINDOW + 10)
        assert w.accept(11)  # exactly WINDOW - 1 behind
        assert not w.accept(10)  # WINDOW behind
        assert not w.accept(1)

    def test_a_restored_window_refuses_everything_up_to_its_top(self) -> None:
        w = ReplayWindow(100)
        assert not w.accept(100) and not w.accept(99) and not w.accept(1)
        assert w.accept(101)


class TestState:
    """Exported state, restored after a restart, keeps refusing what was accepted before."""

    def test_clean_restore_refuses_old_seqs_only(self) -> None:
        v = verifier()
        for seq in (1, 2, 3):
            assert isinstance(v.check(sign(KEY, "eu-1", seq, NOW, b""), NOW), Verified)
        saved = json.loads(json.dumps(v.export_state()))
        assert saved == {"eu-1": {"seq": 3, "ts_ms": NOW}}
        w = verifier()
        w.import_state(saved)
        out = w.check(sign(KEY, "eu-1", 3, NOW, b""), NOW)
        assert isinstance(out, AuthReject) and out.reason is AuthReason.REPLAYED
        assert isinstance(w.check(sign(KEY, "eu-1", 4, NOW, b""), NOW), Verified)

    def test_unclean_restore_also_refuses_timestamps_within_the_guard(self) -> None:
        w = verifier()
        w.import_state({"eu-1": {"seq": 3, "ts_ms": NOW}}, unclean_guard_ms=2000)
        out = w.check(sign(KEY, "eu-1", 50, NOW + 2000, b""), NOW + 2000)
        assert isinstance(out, AuthReject) and out.reason is AuthReason.REPLAYED
        assert isinstance(w.check(sign(KEY, "eu-1", 51, NOW + 2001, b""), NOW + 2001), Verified)

    def test_refuse_until_covers_every_key(self) -> None:
        w = verifier()
        w.refuse_until(NOW)
        for key, kid in ((KEY, "eu-1"), (bytes(32), "eu-2")):
            out = w.check(sign(key, kid, 1, NOW, b""), NOW)
            assert isinstance(out, AuthReject) and out.reason is AuthReason.REPLAYED

    def test_malformed_saved_state_raises(self) -> None:
        with pytest.raises(ValueError, match="eu-1"):
            verifier().import_state({"eu-1": {"seq": -1, "ts_ms": 0}})


class TestVectors:
    """docs/udp-auth-vectors.json matches an independent implementation and verifies."""

    def test_vectors(self) -> None:
        doc = json.loads(VECTORS.read_text(encoding="utf-8"))
        assert len(doc["vectors"]) >= 4
        for vec in doc["vectors"]:
            key = bytes.fromhex(vec["key_hex"])
            payload = bytes.fromhex(vec["payload_hex"])
            datagram = bytes.fromhex(vec["datagram_hex"])
            expected = reference_sign(key, vec["key_id"], vec["seq"], vec["ts_ms"], payload)
            assert datagram == expected, vec["name"]
            assert datagram == sign(key, vec["key_id"], vec["seq"], vec["ts_ms"], payload), vec["name"]
            out = Verifier({vec["key_id"]: key}, 2**63).check(datagram, vec["ts_ms"])
            assert out == Verified(vec["key_id"], vec["seq"], vec["ts_ms"], payload), vec["name"]
            assert len(datagram) == 4 + len(vec["key_id"]) + 16 + len(payload) + MAC_SIZE
