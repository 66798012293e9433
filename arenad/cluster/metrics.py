"""The cluster's metrics: consumer lag, publish latency, lease changes, refused stream messages.

State is read at scrape time from the node's parts (STYLE.md §9); the one histogram, the
publish-to-ack latency of an ingest step, is observed per step, never per event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from arenad.cluster.wire import REJECT_REASONS

#: A publish to an R3 stream on loopback takes about a millisecond; across a WAN much more.
PUBLISH_BUCKETS = (2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(slots=True)
class ClusterFigures:
    """What the collector exports, read from the node at each scrape."""

    role: str
    connected: bool = False
    leader: bool = False
    lease_changes: int = 0
    position: int = 0  # stream sequence applied (a replica) or published up to (an ingest)
    lag: int = 0  # messages in the stream this replica has not applied yet
    published: int = 0  # messages published (an ingest)
    duplicates: int = 0  # publishes the stream already held (retries, redeliveries)
    notifications: int = 0  # notifications the leader published
    notification_duplicates: int = 0  # notifications the stream already held (a takeover's replay)
    outbox_kept: int = 0  # notifications kept for a takeover
    rejected: dict[str, int] = field(default_factory=dict)  # stream messages refused, by reason


class ClusterCollector:
    def __init__(self, figures: Callable[[], ClusterFigures]) -> None:
        self.figures = figures

    def describe(self) -> Iterator[Metric]:
        return self._families(ClusterFigures(role="off"))

    def collect(self) -> Iterator[Metric]:
        return self._families(self.figures())

    @staticmethod
    def _families(f: ClusterFigures) -> Iterator[Metric]:
        role = GaugeMetricFamily(
            "arenad_cluster_role", "This node's cluster role (1 for its role)", labels=["role"]
        )
        role.add_metric([f.role], 1.0)
        yield role
        yield GaugeMetricFamily(
            "arenad_cluster_connected", "1 while connected to NATS", value=float(f.connected)
        )
        yield GaugeMetricFamily(
            "arenad_cluster_leader", "1 while this replica holds the leader lease", value=float(f.leader)
        )
        yield CounterMetricFamily(
            "arenad_cluster_lease_changes",
            "Times this node took or lost the leader lease",
            value=f.lease_changes,
        )
        yield GaugeMetricFamily(
            "arenad_cluster_stream_position",
            "Stream sequence applied (replica) or published (ingest)",
            value=f.position,
        )
        yield GaugeMetricFamily(
            "arenad_cluster_lag_messages", "Stream messages this replica has not applied yet", value=f.lag
        )
        yield CounterMetricFamily(
            "arenad_cluster_published_messages",
            "Messages this ingest published and the stream acknowledged",
            value=f.published,
        )
        yield CounterMetricFamily(
            "arenad_cluster_duplicate_publishes",
            "Publishes the stream already held (a retry or a redelivery, stored once)",
            value=f.duplicates,
        )
        yield CounterMetricFamily(
            "arenad_cluster_notifications_published",
            "Notifications this node published as leader",
            value=f.notifications,
        )
        yield CounterMetricFamily(
            "arenad_cluster_duplicate_notifications",
            "Notifications published again that the stream already held (a takeover's replay)",
            value=f.notification_duplicates,
        )
        yield GaugeMetricFamily(
            "arenad_cluster_outbox_kept",
            "Notifications this replica keeps for a takeover",
            value=f.outbox_kept,
        )
        rejected = CounterMetricFamily(
            "arenad_cluster_rejected", "Stream messages no replica applies, by reason", labels=["reason"]
        )
        for reason in sorted({*REJECT_REASONS, *f.rejected}):
            rejected.add_metric([reason], f.rejected.get(reason, 0))
        yield rejected


def publish_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "arenad_cluster_publish_seconds",
        "Publish of one ingest step until the stream's quorum acknowledged every message",
        buckets=PUBLISH_BUCKETS,
        registry=registry,
    )
