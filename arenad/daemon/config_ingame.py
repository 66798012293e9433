"""Typed settings of ``[ingame]``: chat commands answered over rcon, and announcements.

::

    [ingame]
    enabled = true
    [[ingame.servers]]
    name = "oa-1"                 # the server id arenad sees on its kills ([[tail]] server)
    kind = "quake3"               # or "source"
    address = "127.0.0.1:27960"
    password_file = "/etc/arenad/oa-1.rcon"   # or password_env; never the password itself
    [ingame.templates]
    rank = "^3{name}^7: #{rank} of {players}, {rating:.1f} ({tier}), better than {percentile:.0f} pct"

Built on ``arenad.daemon.config.Section`` (strict, unknown keys refused, frozen), and like the
other settings modules it imports neither the daemon nor the feeds. A template is checked here
against the fields its message offers (``TEMPLATE_FIELDS``), by formatting it with sample values,
so a misspelt field or a bad format spec is reported by ``arenad check-config`` with its key,
not by a reply that fails in the game.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, model_validator

from arenad.daemon.config import Array, NonEmpty, Section, check, one_of, parse_hostport, refuse
from arenad.errors import ConfigProblem

#: Rcon dialects: ioquake3 / OpenArena over UDP, the Valve Source RCON protocol over TCP.
RCON_KINDS = ("quake3", "source")
#: What can be announced: a first placement, a tier up, a tier down, a new #1 of the ladder.
ANNOUNCE_KINDS = ("placed", "promoted", "demoted", "top1")
#: Most replies waiting per server before new ones are dropped (and counted).
MAX_QUEUE = 10_000

# Sample values of every field a template may use: a template is formatted with them at load
# time, so an unknown field or a format spec that does not fit its value is refused then.
_SAMPLE: dict[str, Any] = {
    "name": "Sarge",
    "rank": 3,
    "players": 41,
    "rating": 27.5,
    "display": 21.0,
    "tier": "2H",
    "percentile": 95.0,
    "top_percent": 5.0,
    "events": 12,
    "events_needed": 30,
    "sigma": 4.2,
    "sigma_needed": 3.0,
    "n": 5,
    "next_tier": "1L",
    "gap": 1.25,
    "hold": 180.0,
    "change": 1.5,
    "kills": 10,
    "deaths": 7,
    "old_tier": "2L",
    "min": 26.0,
    "usage": "!top [1-5]",
    "server": "oa-1",
}

#: The fields each template offers (its message's words).
TEMPLATE_FIELDS: dict[str, tuple[str, ...]] = {
    "rank": ("name", "rank", "players", "rating", "display", "tier", "percentile", "top_percent"),
    "unplaced": ("name", "events", "events_needed", "sigma", "sigma_needed", "rating", "rank", "players"),
    "unknown": ("name",),
    "top_header": ("n", "players"),
    "top_row": ("rank", "name", "rating", "display", "tier"),
    "next": ("name", "tier", "next_tier", "gap", "hold", "rating"),
    "next_best": ("name", "tier", "rating"),
    "next_unplaced": ("name", "events", "events_needed", "sigma", "sigma_needed"),
    "session": ("name", "change", "kills", "deaths", "rating"),
    "no_session": ("name",),
    "tier": ("name", "tier", "min", "rating", "players"),
    "usage": ("usage",),
    "placed": ("name", "tier", "rank", "rating", "server"),
    "promoted": ("name", "tier", "old_tier", "rank", "rating", "server"),
    "demoted": ("name", "tier", "old_tier", "rank", "rating", "server"),
    "top1": ("name", "rating", "tier", "server"),
}


def template_problem(name: str, text: str) -> str:
    """Why ``text`` cannot be template ``name`` ("" when it can)."""
    allowed = TEMPLATE_FIELDS[name]
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        return f"not a template ({e})"
    for f in fields:
        # Plain names only: "{name.__class__}" or "{x[0]}" would reach into the values.
        if f not in allowed:
            return f"unknown field {{{f}}} (known: {', '.join(allowed)})"
    try:
        text.format_map({k: _SAMPLE[k] for k in allowed})
    except (ValueError, TypeError, KeyError, IndexError) as e:
        return f"cannot be formatted ({e})"
    return ""


class TemplateSettings(Section):
    """``[ingame.templates]``: the text of every reply and announcement (Quake 3 colour codes
    such as ``^1`` allowed; Source servers show them as typed)."""

    rank: str = (
        "^3{name}^7: rank ^2#{rank}^7 of {players}, rating {rating:.1f}, tier ^5{tier}^7, "
        "better than {percentile:.0f} pct"
    )
    unplaced: str = (
        "^3{name}^7: unplaced, {events}/{events_needed} games, sigma {sigma:.2f} (needs {sigma_needed:.2f})"
    )
    unknown: str = "^3{name}^7: no rating yet, frag someone first"
    top_header: str = "Top {n} of {players}:"
    top_row: str = "#{rank} {name} {rating:.1f} ({tier})"
    next: str = "^3{name}^7: {gap:.1f} rating to ^5{next_tier}^7 (now {tier}), then hold it: {hold:.0f} to go"
    next_best: str = "^3{name}^7: already in the best tier ({tier})"
    next_unplaced: str = (
        "^3{name}^7: placement first: {events}/{events_needed} games, sigma {sigma:.2f}/{sigma_needed:.2f}"
    )
    session: str = "^3{name}^7: this session {change:+.2f} ({kills} kills, {deaths} deaths), now {rating:.1f}"
    no_session: str = "^3{name}^7: no session yet"
    tier: str = "^3{name}^7: tier ^5{tier}^7 (from {min:.1f}), rating {rating:.1f}"
    usage: str = "usage: {usage}"
    placed: str = "^3{name}^7 is placed: tier ^5{tier}^7, rank #{rank}"
    promoted: str = "^3{name}^7 promoted: {old_tier} -> ^2{tier}"
    demoted: str = "^3{name}^7 demoted: {old_tier} -> ^1{tier}"
    top1: str = "^3{name}^7 is the new ^2#1^7 ({rating:.1f})"

    @model_validator(mode="after")
    def _formattable(self) -> Self:
        # Every template checked, every bad one reported (not only the first).
        problems = []
        for name in TEMPLATE_FIELDS:
            text = getattr(self, name)
            message = template_problem(name, text)
            if message:
                problems.append(ConfigProblem(name, text, message))
        refuse(problems)
        return self


def _address_problem(text: str) -> str:
    try:
        parse_hostport(text)
    except ValueError as e:
        return f'must be "HOST:PORT" ({e})'
    return ""


class RconServer(Section):
    """``[[ingame.servers]]``: where one game server takes rcon commands."""

    name: NonEmpty  # the server id arenad sees ([[tail]] server, the feed's server option)
    kind: Annotated[str, one_of(RCON_KINDS, 'must be "quake3" (ioquake3, OpenArena) or "source"')] = "quake3"
    address: Annotated[str, check(_address_problem)]
    password_env: str = ""  # an environment variable holding the rcon password
    password_file: str = ""  # or a file whose first line is the rcon password

    @model_validator(mode="after")
    def _one_password(self) -> Self:
        problems: list[ConfigProblem] = []
        if self.password_env and self.password_file:
            problems.append(
                ConfigProblem(
                    "password_file", self.password_file, "name one of password_env or password_file"
                )
            )
        elif not (self.password_env or self.password_file):
            problems.append(
                ConfigProblem("password_env", "", "name password_env or password_file: rcon needs a password")
            )
        refuse(problems)
        return self


class InGameSettings(Section):
    """``[ingame]``: chat commands (``!rank`` ...) answered over rcon, announcements; off by default."""

    SECTION: ClassVar[str] = "ingame"

    enabled: bool = False
    prefix: Annotated[
        str,
        check(
            lambda v: (
                "" if len(v) == 1 and v.isprintable() and v != " " else "must be one printable character"
            )
        ),
    ] = "!"
    scope: NonEmpty = "global"  # the ladder answered and announced: global, server:ID, season...
    # Replies a player may have answered: burst, then one every 1/player_rate seconds.
    player_rate: Annotated[float, Field(ge=0)] = 0.2
    player_burst: Annotated[int, Field(ge=1, le=100)] = 3
    # Rcon commands per server (ioquake3 itself takes about 10 a second from one address).
    server_rate: Annotated[float, Field(gt=0)] = 4.0
    server_burst: Annotated[int, Field(ge=1, le=100)] = 8
    queue: Annotated[int, Field(ge=1, le=MAX_QUEUE)] = 64  # per server; when full, new replies are dropped
    timeout: Annotated[float, Field(gt=0, le=60)] = 2.0  # seconds to wait for an rcon reply
    announce: Annotated[
        Array[str],
        check(
            lambda v: (
                "" if set(v) <= set(ANNOUNCE_KINDS) else f"kinds must be among {', '.join(ANNOUNCE_KINDS)}"
            )
        ),
    ] = ()
    # Announcements per server: burst, then one every 1/announce_rate seconds.
    announce_rate: Annotated[float, Field(ge=0)] = 0.2
    announce_burst: Annotated[int, Field(ge=1, le=100)] = 3
    failure_log_interval: Annotated[float, Field(ge=0)] = 30.0  # seconds between two failure logs per server
    templates: TemplateSettings = Field(default_factory=TemplateSettings)
    servers: Array[RconServer] = ()

    @model_validator(mode="after")
    def _distinct_servers(self) -> Self:
        seen: set[str] = set()
        problems = []
        for k, s in enumerate(self.servers):
            if s.name in seen:
                problems.append(ConfigProblem(f"servers[{k}].name", s.name, "named twice"))
            seen.add(s.name)
        refuse(problems)
        return self

    def server(self, name: str) -> RconServer | None:
        return next((s for s in self.servers if s.name == name), None)

    @property
    def by_name(self) -> Mapping[str, RconServer]:
        return {s.name: s for s in self.servers}
