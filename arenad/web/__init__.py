"""The web layer: an HTTP JSON API, server-rendered pages and team balance (issue 16).

Built against narrow ports (``arenad.web.port``), never the daemon object: the daemon hands it
a callable for the live scopes, one for its status, a history reader and the hidden players.
Kept empty of imports so ``arenad.settings`` can read ``arenad.web.config`` without loading the
server (httptools, Jinja2).
"""
