"""Fixtures of the cluster tests: a real 3-node NATS JetStream cluster (tests/nats_cluster.py),
the arenad nodes on it (tests/cluster_harness.py) and a real mosquitto (tests/mosquitto_broker.py),
each stopped when its test ends, whatever happened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import Nodes
from mosquitto_broker import mosquitto  # noqa: F401 - the fixture
from nats_cluster import NatsCluster


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    cluster = NatsCluster(tmp_path / "nats")
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture
def nodes(tmp_path: Path, nats_cluster: NatsCluster) -> Iterator[Nodes]:
    n = Nodes(tmp_path, nats_cluster)
    try:
        yield n
    finally:
        n.close()
