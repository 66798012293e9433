"""Fixtures of the web tests (tests/web_harness.py has the harness): one world and one server
for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from web_harness import Client, ServerThread, World, build_world, start_server


@pytest.fixture(scope="session")
def world() -> World:
    return build_world()


@pytest.fixture(scope="session")
def server(world: World) -> Iterator[ServerThread]:
    srv = start_server(world)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def client(server: ServerThread) -> Client:
    assert server.handle.address is not None
    return Client(server.handle.address)
