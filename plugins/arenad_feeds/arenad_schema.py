"""The reference feed plugin: arenad's own wire schema, one JSON object (or array) per line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arenad.decode import decode_json_line
from arenad.feeds import FeedItem


class ArenadSchemaParser:
    """Stateless: each line stands alone."""

    def feed(self, line: bytes, received_at: float) -> list[FeedItem]:
        return list(decode_json_line(line))

    def state(self) -> dict[str, Any]:
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        return None


class ArenadSchemaFeed:
    name = "arenad"
    description = "arenad's own event schema: JSON lines ({t, attacker, victim, server?, id?, weapon?})"

    def parser(self, options: Mapping[str, Any]) -> ArenadSchemaParser:
        return ArenadSchemaParser()
