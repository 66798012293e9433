"""``[web]``: the HTTP API and the public pages (issue 16).

A section model like the daemon's own (``arenad.daemon.config.Section``: strict, unknown keys
refused, frozen). It sits below the daemon with the other settings modules and imports neither
the server nor the templates, so ``arenad check-config`` stays fast.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from arenad.daemon.config import Array, Listen, Network, Section, _off, check

#: An allowed CORS origin: "*" or scheme://host[:port], as browsers send it in ``Origin``.
_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")


def _origin_problem(text: str) -> str:
    if text == "*" or (_ORIGIN.match(text) and not text.endswith("/")):
        return ""
    return 'must be "*" or an origin such as "https://stats.example.org" (no path, no trailing /)'


Origin = Annotated[str, check(_origin_problem)]


class WebSettings(Section):
    """``[web]``: the read-only HTTP API (``/api/v1``) and the pages, on the daemon's loop."""

    listen: Listen = "127.0.0.1:8080"  # "off" disables the web server
    cors_origins: Array[Origin] = ()  # origins allowed to read the API from a browser; "*" = any
    cache_max_age: Annotated[int, Field(ge=0, le=3600)] = 5  # seconds, Cache-Control max-age
    rate_limit: Annotated[float, Field(ge=0)] = 50.0  # requests/s per client; 0 = unlimited
    burst: Annotated[int, Field(ge=1)] = 100  # requests a client may send at once
    max_clients: Annotated[int, Field(ge=1)] = 10_000  # clients whose rate is remembered at once
    max_connections: Annotated[int, Field(ge=1)] = 512  # open HTTP connections at once
    idle_timeout: Annotated[float, Field(ge=0.1)] = 15.0  # seconds a keep-alive connection may idle
    max_header_bytes: Annotated[int, Field(ge=1024, le=65536)] = 8190  # request line and each header
    trusted_proxies: Array[Network] = ()  # X-Forwarded-For is read only from these networks
    page_size: Annotated[int, Field(ge=10, le=500)] = 50  # leaderboard rows per page
    # At most this share of the event loop (shared with the engine and ingest) goes to answering
    # HTTP, measured over 0.1 s windows; beyond it requests wait. 1.0: no limit (docs/web.md).
    loop_share: Annotated[float, Field(gt=0.0, le=1.0)] = 0.3
    # Processes answering from forked snapshots of the daemon, off the engine's loop (Linux; 0:
    # the daemon's loop answers, always current, under loop_share). docs/web.md "Readers".
    readers: Annotated[int, Field(ge=0, le=16)] = 1
    # Seconds a reader's snapshot may fall behind a changing state before a newer fork replaces it.
    refresh: Annotated[float, Field(ge=0.05, le=3600.0)] = 5.0

    @property
    def enabled(self) -> bool:
        return not _off(self.listen)
