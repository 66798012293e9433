"""The offline replay's file reading: the format is told from the bytes, a bad file is an InputError."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest

from arenad.core.events import KillEvent
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
