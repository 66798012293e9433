"""The web room's ports over the daemon (arenad/daemon/webroom.py): the engine is behind, for the
web's loop share, exactly while more batches wait than a step at full ingest leaves."""

from __future__ import annotations

from typing import cast

from arenad.daemon.live import LiveState
from arenad.daemon.webroom import BEHIND_BATCHES, web_ports


class TestEngineBehind:
    """engine_behind reads the queue depth at each call, against BEHIND_BATCHES."""

    def test_follows_the_queue_depth(self) -> None:
        depth = [0]
        ports = web_ports(cast(LiveState, object()), None, dict, lambda: depth[0])
        assert not ports.engine_behind()
        depth[0] = BEHIND_BATCHES - 1
        assert not ports.engine_behind()
        depth[0] = BEHIND_BATCHES
        assert ports.engine_behind()
