"""``[cluster]``: the cluster mode on NATS JetStream (issue 18; docs/operations.md "Cluster").

Off by default: the single-node daemon is what it always was. A section model like the others
(strict, unknown keys refused, frozen); it imports nothing of the cluster code, so
``arenad check-config`` stays fast and the settings stay below the daemon.
"""

from __future__ import annotations

import re
from typing import Annotated, Self

from pydantic import Field, model_validator

from arenad.daemon.config import Array, Section, check, one_of, refuse
from arenad.errors import ConfigProblem

#: What a node does (docs/operations.md "Cluster"): ``off`` the single-node daemon; ``ingest``
#: runs the sources and publishes what they accept; ``replica`` applies the stream and serves
#: reads (one replica at a time holds the leader lease); ``shadow`` applies the stream and runs
#: the shadow models, off the replicas' cores.
ROLES = ("off", "ingest", "replica", "shadow")

_URL = re.compile(r"^(nats|tls)://[A-Za-z0-9.\-\[\]:]+$")
#: A JetStream stream or bucket name: no dots, spaces, wildcards or path separators.
_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
#: A subject token (the subject prefix): what NATS allows in one token, no wildcards.
_TOKEN = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
#: A subject filter: tokens or the wildcards ``*`` (one token) and ``>`` (the rest).
_FILTER = re.compile(r"^([A-Za-z0-9_\-~]+|\*)(\.([A-Za-z0-9_\-~]+|\*))*(\.>)?$|^>$")


def _url_problem(text: str) -> str:
    return "" if _URL.match(text) else 'must be a NATS URL such as "nats://127.0.0.1:4222"'


def _name_problem(text: str) -> str:
    return "" if _NAME.match(text) else "must be 1-64 letters, digits, _ or - (no dots or spaces)"


def _token_problem(text: str) -> str:
    return "" if _TOKEN.match(text) else "must be one subject token: 1-64 letters, digits, _ or -"


def _filter_problem(text: str) -> str:
    return "" if _FILTER.match(text) else 'must be a subject filter such as "arena.eu-1.kills" or "arena.>"'


def _node_problem(text: str) -> str:
    return "" if text == "" or _NAME.match(text) else "must be 1-64 letters, digits, _ or - (empty: host-pid)"


class ClusterSettings(Section):
    """``[cluster]``: role, the NATS servers, and the stream, buckets and lease they share."""

    role: Annotated[str, one_of(ROLES)] = "off"
    servers: Array[Annotated[str, check(_url_problem)]] = ("nats://127.0.0.1:4222",)
    node: Annotated[str, check(_node_problem)] = ""  # this node's name in `arenad cluster status`
    stream: Annotated[str, check(_name_problem)] = "ARENA"  # the records' stream
    subject_prefix: Annotated[str, check(_token_problem)] = "arena"  # <prefix>.<server>.kills
    stream_replicas: Annotated[int, Field(ge=1, le=5)] = 3  # R3: a quorum of 2 acknowledges
    #: JetStream drops a publish whose message id it saw this many seconds ago: what makes a
    #: redelivery after an ingest restart (MQTT) land once.
    duplicate_window: Annotated[float, Field(ge=1.0, le=86400.0)] = 600.0
    #: Seconds the stream keeps messages (0: until deleted); a replica whose checkpoint is older
    #: than this cannot catch up from the stream alone (docs/operations.md "Cluster").
    max_age: Annotated[float, Field(ge=0.0)] = 7 * 86400.0
    #: A replica keeps only the subjects matching these (scale-out by scope); the control subject
    #: is always taken. One filter is applied by the server, several by the replica itself.
    filter: Array[Annotated[str, check(_filter_problem)]] = ()
    lease_ttl: Annotated[float, Field(ge=1.0, le=300.0)] = 6.0  # a dead leader's lease lapses after this
    publish_timeout: Annotated[float, Field(ge=0.1, le=60.0)] = 5.0  # seconds to wait for a publish ack
    #: Notifications kept by every replica for a takeover to publish again (deduplicated by id).
    outbox: Annotated[int, Field(ge=0, le=1_000_000)] = 10_000

    @property
    def enabled(self) -> bool:
        return self.role != "off"

    @property
    def control_subject(self) -> str:
        return f"{self.subject_prefix}.control"

    @model_validator(mode="after")
    def _lease_and_window(self) -> Self:
        problems = []
        if self.max_age and self.max_age < self.duplicate_window:
            problems.append(ConfigProblem("max_age", self.max_age, "must be 0 or at least duplicate_window"))
        if self.role != "off" and not self.servers:
            problems.append(ConfigProblem("servers", list(self.servers), "name at least one NATS server"))
        refuse(problems)
        return self
