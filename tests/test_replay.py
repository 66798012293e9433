"""The offline replay's file reading: the format is told from the bytes, a bad file is an InputError."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_lines import hostile_json_lines

from arenad import replay
from arenad.core.engine import Engine
from arenad.core.events import KillEvent
from arenad.core.params import ADRParams
from arenad.errors import InputError
from arenad.replay import iter_file

GOOD = {"t": 1700000000.5, "attacker": "alice", "victim": "bob", "server": "eu-1", "id": 7}


class TestIterFile:
    """``iter_file`` reads a JSON-lines or msgpack file and decodes every event of it in order."""

    def test_detects_the_format(self, tmp_path: Path) -> None:
        (tmp_path / "a.jsonl").write_text(json.dumps(GOOD) + "\n")
        (tmp_path / "a.msgpack").write_bytes(msgpack.packb(GOOD))
        from_json = list(iter_file(tmp_path / "a.jsonl"))
        assert from_json == list(iter_file(tmp_path / "a.msgpack"))
        assert [type(e) for e in from_json] == [KillEvent]

    def test_unreadable_file_is_an_input_error_naming_it(self, tmp_path: Path) -> None:
        missing = tmp_path / "missing.jsonl"
        with pytest.raises(InputError, match=r"missing\.jsonl"):
            list(iter_file(missing))


class TestBatchReplay:
    """``replay_files`` (the C line scanner, ``Engine.feed_many``) reaches exactly the state and
    the counts of ``replay_events`` over ``iter_file`` (the line decoder, one ``feed`` per kill)."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data(), batch=st.sampled_from([1, 3, 65_536]))
    def test_equals_the_per_event_replay(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: st.DataObject, batch: int
    ) -> None:
        monkeypatch.setattr(replay, "BATCH", batch)
        names = [f"p{k}" for k in range(6)]
        lines = []
        t = 1_700_000_000.0
        for _ in range(data.draw(st.integers(1, 60))):
            t += data.draw(st.sampled_from([0.5, 30.0, 400.0, -5.0]))
            a, v = data.draw(st.permutations(names))[:2]
            lines.append(json.dumps({"t": t, "attacker": a, "victim": v}).encode())
            if data.draw(st.integers(0, 4)) == 0:
                lines.append(data.draw(hostile_json_lines()))
        path = tmp_path / "events.jsonl"
        path.write_bytes(b"\n".join(lines))
        engine, summary = replay.replay_files([path], ADRParams())
        ref = Engine(ADRParams())
        want = replay.replay_events(ref, iter_file(path))
        assert engine.export_state() == ref.export_state()
        got_counts, want_counts = summary.as_dict(), want.as_dict()
        for counts in (got_counts, want_counts):
            del counts["seconds"], counts["events_per_s"]
        assert got_counts == want_counts
