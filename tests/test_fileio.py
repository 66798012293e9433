"""Atomic file replacement: the old file or the new one, never half of one, and no temporary left."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from arenad.fileio import atomic_file, atomic_text_file, temporary_for, write_atomic


class Syncs:
    """Records what ``os.fsync`` is called on (a regular file or a directory), then does it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kinds: list[str] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            self.kinds.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


class TestWriteAtomic:
    """A successful write replaces the file and is fsynced, file and directory."""

    def test_replaces_the_file(self, tmp_path: Path) -> None:
        target = tmp_path / "state.json"
        target.write_bytes(b"old")
        write_atomic(target, b"new ", b"content")
        assert target.read_bytes() == b"new content"
        assert leftovers(tmp_path) == []

    def test_creates_a_missing_file(self, tmp_path: Path) -> None:
        write_atomic(tmp_path / "fresh", b"x")
        assert (tmp_path / "fresh").read_bytes() == b"x"

    def test_fsyncs_the_file_then_the_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        syncs = Syncs(monkeypatch)
        write_atomic(tmp_path / "f", b"x")
        assert syncs.kinds == ["file", "dir"]

    def test_sync_false_skips_both_fsyncs(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        syncs = Syncs(monkeypatch)
        write_atomic(tmp_path / "f", b"x", sync=False)
        assert (tmp_path / "f").read_bytes() == b"x"
        assert syncs.kinds == []

    def test_temporary_is_hidden_beside_the_target(self, tmp_path: Path) -> None:
        assert temporary_for(tmp_path / "manifest.json") == tmp_path / ".manifest.json.tmp"


class TestFailure:
    """A failure anywhere before the rename leaves the old file as it was and no temporary."""

    def test_an_error_in_the_block(self, tmp_path: Path) -> None:
        target = tmp_path / "f"
        target.write_bytes(b"old")
        with pytest.raises(RuntimeError), atomic_file(target) as f:
            f.write(b"half")
            raise RuntimeError("the writer failed")
        assert target.read_bytes() == b"old"
        assert leftovers(tmp_path) == []

    def test_a_full_disk_at_fsync(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        target = tmp_path / "f"
        target.write_bytes(b"old")

        def full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", full)
        with pytest.raises(OSError, match="No space"):
            write_atomic(target, b"new")
        assert target.read_bytes() == b"old"
        assert leftovers(tmp_path) == []

    def test_a_failed_rename(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        target = tmp_path / "f"
        target.write_bytes(b"old")

        def refuse(src: object, dst: object) -> None:
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "replace", refuse)
        with pytest.raises(OSError):
            write_atomic(target, b"new")
        assert target.read_bytes() == b"old"
        assert leftovers(tmp_path) == []

    def test_no_file_is_created_when_the_first_write_fails(self, tmp_path: Path) -> None:
        with pytest.raises(KeyboardInterrupt), atomic_file(tmp_path / "f"):
            raise KeyboardInterrupt  # BaseException too: the temporary goes
        assert list(tmp_path.iterdir()) == []


class TestAtomicTextFile:
    """The text variant encodes what is written and replaces the file the same way."""

    def test_writes_utf8(self, tmp_path: Path) -> None:
        target = tmp_path / "ladder.jsonl"
        with atomic_text_file(target) as out:
            out.write("élan\n")
        assert target.read_bytes() == "élan\n".encode()
        assert leftovers(tmp_path) == []

    def test_failure_keeps_the_old_file(self, tmp_path: Path) -> None:
        target = tmp_path / "ladder.jsonl"
        target.write_text("old\n")
        with pytest.raises(ValueError), atomic_text_file(target) as out:
            out.write("new\n")
            raise ValueError("no ladder")
        assert target.read_text() == "old\n"
        assert leftovers(tmp_path) == []
