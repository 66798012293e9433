"""In the game itself: chat commands answered over rcon, and announcements of rating changes.

Rooms: ``commands`` (sans-io: a chat text to a command, a command to reply lines, from a ladder),
``rcon`` (the ioquake3 UDP and Source TCP rcon clients, and the text sanitisers), ``service``
(``InGame``: the chat sink the sources call, the rating-change consumer the engine task calls,
the per-server sender tasks). ``arenad.daemon.service.Daemon`` builds ``InGame`` from ``[ingame]``
and hands it a read port, a callable returning the live ``ScopeSet``.
"""
