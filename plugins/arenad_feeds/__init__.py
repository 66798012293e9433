"""arenad's built-in feed plugins (OpenArena / Quake 3 ``games.log``, Source-engine logs, and
arenad's own schema as the reference plugin). Each is also registered under the
``arenad.feeds`` entry-point group, the same way a third-party plugin would be.
"""

from __future__ import annotations

from arenad.feeds import FeedPlugin
from arenad_feeds.arenad_schema import ArenadSchemaFeed
from arenad_feeds.openarena import OpenArenaFeed
from arenad_feeds.source import SourceFeed

BUILTIN_FEEDS: list[FeedPlugin] = [ArenadSchemaFeed(), OpenArenaFeed(), SourceFeed()]

__all__ = ["BUILTIN_FEEDS", "ArenadSchemaFeed", "OpenArenaFeed", "SourceFeed"]
