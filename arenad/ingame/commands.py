"""The chat commands, sans-io: a chat line's text in, the reply lines out.

``parse`` reads a command from what a player typed; ``answer`` turns it into the reply's lines
from a ladder (an ``Engine``) and the global ladder's play sessions, with the operator's
templates. No sockets, no clock, no asyncio: ``arenad.ingame.service`` moves the bytes.

Commands (the prefix is ``[ingame] prefix``, ``!`` by default; case does not matter)::

    !rank [name]     rank N of M, rating, tier, percentile; placement progress while unplaced
    !top [n]         the best n players (1 <= n <= 5, default 5)
    !next [name]     the rating gap to the next tier up
    !session [name]  the rating change since this play session began
    !tier [name]     the tier and its lower boundary

Without a name a command is about the speaker. An unknown command is ignored (the chat is for
talking, most lines are not for us); a known one with arguments it cannot use gets the usage
line. Colour codes (``^1``) are stripped from the text before anything is looked up.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arenad.core.engine import DISPLAY_K, Engine
from arenad.daemon.config_ingame import TemplateSettings
from arenad.views import player_body, tiers_body

#: The most players ``!top`` lists: five lines fit on a Quake 3 chat area at once.
MAX_TOP = 5
#: Longest name a command takes as its argument (ioquake3 names hold 36 bytes with colours).
MAX_NAME_ARG = 36
#: Longest text of one reply line: ioquake3 cuts chat at 150 characters (MAX_SAY_TEXT).
MAX_LINE = 150

USAGE: dict[str, str] = {
    "rank": "!rank [name]",
    "top": f"!top [1-{MAX_TOP}]",
    "next": "!next [name]",
    "session": "!session [name]",
    "tier": "!tier [name]",
}
COMMANDS = tuple(USAGE)

# ioquake3's Q_IsColorString: '^' and a letter or digit.
_COLOUR = re.compile(r"\^[0-9A-Za-z]")
_PRINTABLE_NAME = re.compile(rf"[^\x00-\x1f\x7f]{{1,{MAX_NAME_ARG}}}")


def strip_colours(text: str) -> str:
    return _COLOUR.sub("", text)


@dataclass(frozen=True, slots=True)
class Command:
    """A command a player asked for: ``name`` one of ``COMMANDS``; ``usage`` set when its
    arguments were refused (the reply is then the usage line)."""

    name: str
    target: str | None = None  # a player's name (rank, next, session, tier)
    n: int = MAX_TOP  # top
    usage: bool = False


def parse(text: str, prefix: str = "!") -> Command | None:
    """The command in ``text``, or None when it is not one of ours (ignored)."""
    clean = strip_colours(text).strip()
    if not clean.startswith(prefix):
        return None
    word, _, rest = clean[len(prefix) :].partition(" ")
    name = word.lower()
    if name not in USAGE:
        return None
    rest = rest.strip()
    if name == "top":
        if not rest:
            return Command("top")
        # A number of at most two digits: int() of a long run of digits is refused before it
        # is attempted, whatever the player typed.
        if rest.isascii() and rest.isdigit() and len(rest) <= 2 and 1 <= int(rest) <= MAX_TOP:
            return Command("top", n=int(rest))
        return Command("top", usage=True)
    if not rest:
        return Command(name)
    if not _PRINTABLE_NAME.fullmatch(rest):
        return Command(name, usage=True)
    return Command(name, target=rest)


@dataclass(frozen=True, slots=True)
class Speaker:
    """Who asked: the rated identity (None when the log's name matched no single player) and
    the name the game shows."""

    player: str | None
    name: str


def display_name(player: str, names: Mapping[str, str]) -> str:
    """The name to show for identity ``player``: the last name it was seen with in the chat,
    else the identity without its ``bot:`` / ``name:`` kind."""
    seen = names.get(player)
    if seen:
        return seen
    kind, sep, rest = player.partition(":")
    if sep and kind in ("bot", "name"):
        return rest
    return player[:24]


def lookup(eng: Engine, target: str, names: Mapping[str, str]) -> str | None:
    """The identity a typed name means: ``name:<it>``, ``bot:<it>``, then a name seen in chat
    (case-insensitive); None when none is on the ladder."""
    for candidate in (f"name:{target}", f"bot:{target}"):
        if candidate in eng.ids:
            return candidate
    folded = target.casefold()
    for player, name in names.items():
        if name.casefold() == folded and player in eng.ids:
            return player
    return None


def answer(
    cmd: Command,
    speaker: Speaker,
    eng: Engine,
    templates: TemplateSettings,
    *,
    sessions: Callable[[str], tuple[float, int, int] | None] | None = None,
    names: Mapping[str, str] | None = None,
    hidden: frozenset[str] | set[str] = frozenset(),
) -> list[str]:
    """The reply lines to ``cmd`` asked by ``speaker`` (never empty).

    ``sessions(player)`` gives the speaker's session in progress as (change, kills, deaths) or
    None; ``names`` the display names seen; ``hidden`` the players left out of public lists
    (absent from ``!top``, and another player's command cannot look them up).
    """
    names = names or {}
    if cmd.usage:
        return [templates.usage.format(usage=USAGE[cmd.name])]
    if cmd.name == "top":
        return _top(eng, templates, cmd.n, names, hidden)
    if cmd.target is not None:
        player = lookup(eng, cmd.target, names)
        shown = cmd.target
        if player in hidden:
            player = None
    else:
        player, shown = speaker.player, speaker.name
    i = eng.ids.get(player) if player is not None else None
    if i is None:
        return [templates.unknown.format(name=shown)]
    view = player_body(eng, i, DISPLAY_K, eng.scope)
    fields: dict[str, Any] = {
        "name": shown,
        "rank": view["rank"],
        "players": view["players"],
        "rating": view["mu"],
        "display": view["display"],
        "tier": view["tier"] or "unplaced",
        "percentile": view["percentile"],
        "top_percent": max(0.0, 100.0 - view["percentile"]),
        "events": view["placement"]["events"],
        "events_needed": view["placement"]["events_needed"],
        "sigma": view["sigma"],
        "sigma_needed": view["placement"]["sigma_needed"],
    }
    placed = view["placed"]
    if cmd.name == "rank":
        return [_fill(templates.rank if placed else templates.unplaced, fields)]
    if cmd.name == "session":
        got = sessions(eng.names[i]) if sessions is not None else None
        if got is None:
            return [_fill(templates.no_session, fields)]
        change, kills, deaths = got
        return [_fill(templates.session, {**fields, "change": change, "kills": kills, "deaths": deaths})]
    if not placed:
        return [_fill(templates.next_unplaced if cmd.name == "next" else templates.unplaced, fields)]
    tiers: Sequence[dict[str, Any]] = tiers_body(eng)["tiers"]
    k = next(j for j, row in enumerate(tiers) if row["tier"] == view["tier"])  # 0 is the best
    if cmd.name == "tier":
        low = tiers[k]["min_mu"]
        return [_fill(templates.tier, {**fields, "min": -math.inf if low is None else low})]
    # !next: the tier above starts at its lower boundary, and §6.4 promotes a player only once
    # the excess over it, summed over their events, reaches h_req (the hysteresis that keeps
    # tiers from flickering): "gap" is the rating still missing, "hold" the excess still owed.
    if k == 0:
        return [_fill(templates.next_best, fields)]
    above = tiers[k - 1]
    gap = max(0.0, float(above["min_mu"]) - view["mu"])
    energy = float(eng._h[i])
    hold = max(0.0, eng.params.h_req - max(0.0, energy))
    return [_fill(templates.next, {**fields, "next_tier": above["tier"], "gap": gap, "hold": hold})]


def _top(
    eng: Engine,
    templates: TemplateSettings,
    n: int,
    names: Mapping[str, str],
    hidden: frozenset[str] | set[str],
) -> list[str]:
    rows: list[str] = []
    for i in eng.ladder_ids():
        if len(rows) >= n:
            break
        player = eng.names[i]
        if player in hidden:
            continue
        rows.append(
            _fill(
                templates.top_row,
                {
                    "rank": eng.rank(i),
                    "name": display_name(player, names),
                    "rating": eng.mu(i),
                    "display": eng.display(i),
                    "tier": eng.tier_of(i) or "unplaced",
                },
            )
        )
    return pack([_fill(templates.top_header, {"n": len(rows), "players": len(eng)}), *rows])


def pack(parts: Sequence[str], width: int = MAX_LINE) -> list[str]:
    """``parts`` joined by two spaces into as few lines of at most ``width`` as they fit in
    (a part longer than a line is cut): one rcon command per line."""
    lines: list[str] = []
    for whole in parts:
        part = whole[:width]
        if lines and len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += "  " + part
        else:
            lines.append(part)
    return lines


def _fill(template: str, fields: Mapping[str, Any]) -> str:
    # The templates were checked against these fields at load time (config_ingame); the
    # values are the engine's numbers and strings, so formatting cannot fail here.
    return template.format_map(fields)[:MAX_LINE]
