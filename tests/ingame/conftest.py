from __future__ import annotations

from collections.abc import Iterator

import pytest
from oaserver import OpenArenaServer, available, rcon


@pytest.fixture(scope="module")
def oa_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenArenaServer]:
    """A real OpenArena server with one bot (client 0, "Sarge") for the module's tests."""
    if not available():
        pytest.skip("openarena-server is not installed (scripts/test installs it with apt-get)")
    server = OpenArenaServer(tmp_path_factory.mktemp("oa"))
    try:
        server.ready()
        # The bot's connection is printed into the rcon reply (the command's output is redirected).
        assert "ClientBegin: 0" in rcon(server.port, "addbot Sarge 1")
        yield server
    finally:
        server.stop()
