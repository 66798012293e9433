"""The event archive (arenad.daemon.history.Archive): append, read back in chunks, crash repair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arenad.daemon import history
from arenad.daemon.history import Archive, History, retire_segments
from arenad.daemon.state import (
    ControlRecord,
    Journal,
    JournalRecord,
    PlacementRecord,
    StateError,
    encode_chunk,
    record_seq,
)


def records(first: int, n: int) -> list[JournalRecord]:
    out: list[JournalRecord] = []
    for k in range(n):
        seq = first + k
        if seq % 97 == 0:
            out.append(PlacementRecord(seq, 1e9 + seq, (("a",), ("b", "c")), "eu-1", None))
        elif seq % 89 == 0:
            out.append(
                ControlRecord(
                    seq, 1e9 + seq, "season_start", {"name": f"s{seq}", "alpha": 1.0, "lambda": 0.0}
                )
            )
        else:
            out.append((seq, 1e9 + seq, f"p{seq % 13}", f"p{(seq + 5) % 13}", "eu-1", f"id{seq}"))
    return out


def write_segments(state: Path, sizes: list[int]) -> list[JournalRecord]:
    j = Journal(state)
    everything: list[JournalRecord] = []
    seq = 1
    for size in sizes:
        j.open_segment(seq)
        recs = records(seq, size)
        for k in range(0, size, 50):
            j.append(recs[k : k + 50])
        everything += recs
        seq += size
    j.open_segment(seq)  # the open segment: never retired
    j.close()
    return everything


def test_retired_segments_read_back_identically_in_small_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    everything = write_segments(state, [700, 300, 1000, 5])
    archive = Archive(state / "archive", file_bytes=4096)
    archive.open()
    journal = Journal(state)
    assert retire_segments(journal, archive, seq=2000) == 3  # the first three: all at or below 2000
    assert archive.files[0]["first"] == 1 and archive.last_seq == 2000
    assert len(archive.files) >= 2  # file_bytes starts new files
    monkeypatch.setattr(history, "READ_CHUNK", 997)  # records straddle every chunk boundary
    got = list(History(state).records(0, len(everything)))
    assert got == everything
    assert [record_seq(r) for r in History(state).records(1500, 1800)] == list(range(1501, 1801))


def test_an_append_cut_short_by_a_crash_is_repaired_and_archived_again(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    everything = write_segments(state, [400, 400])
    archive = Archive(state / "archive")
    archive.open()
    seg1 = Journal(state).segments()[0][1]
    archive.add(seg1.read_bytes(), 1, 400)
    manifest = (state / "archive" / "manifest.json").read_bytes()
    size = (state / "archive" / archive.files[0]["name"]).stat().st_size
    # The crash: the second segment's member is appended, the manifest is not replaced.
    seg2 = Journal(state).segments()[1][1]
    archive.add(seg2.read_bytes(), 401, 800)
    (state / "archive" / "manifest.json").write_bytes(manifest)
    restarted = Archive(state / "archive")
    restarted.open()
    assert (state / "archive" / restarted.files[0]["name"]).stat().st_size == size
    assert restarted.last_seq == 400
    restarted.add(seg2.read_bytes(), 401, 800)  # archived again, exactly once
    assert list(History(state, Archive(state / "archive").load()).records(0, 800)) == everything[:800]


def test_damage_is_refused_not_skipped(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    write_segments(state, [300, 10])
    archive = Archive(state / "archive")
    archive.open()
    archive.add(Journal(state).segments()[0][1].read_bytes(), 1, 300)
    with pytest.raises(StateError, match="cannot append from 302"):
        archive.add(encode_chunk(records(302, 3)), 302, 304)
    path = state / "archive" / archive.files[0]["name"]
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(StateError, match="shorter than the manifest"):
        Archive(state / "archive").open()
    manifest = json.loads((state / "archive" / "manifest.json").read_text())
    manifest["files"][0]["bytes"] -= 10
    (state / "archive" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises((StateError, EOFError, OSError)):
        list(History(state).records(0, 300))
