"""One identity per player: the canonical spelling of a Steam account (issue 17), pure.

A Steam account is written three ways in Source logs: ``STEAM_0:X:Y`` (CS:S and older games
print universe 0 for public accounts), ``STEAM_1:X:Y`` (CS:GO) and ``[U:1:Z]`` (TF2, CS2), with
``Z = 2Y + X`` the 32-bit account number. All three are one account, so arenad rates them under
one id: the SteamID3 spelling ``[U:1:Z]``, the only one without the universe digit that games
disagree on. ``canonical_steam_id`` refuses anything else with the reason, so a malformed or
forged id never becomes a second player.
"""

from __future__ import annotations

import re
from typing import Final

#: Account numbers are 32 bits; 0 is no account (Steam's "invalid" id).
MAX_ACCOUNT: Final = (1 << 32) - 1

# Digits are capped at 10 (4294967295 has 10): int() of a huge run of digits is slow, and of a
# very long one raises (Python's limit on int digits), which attacker-written log lines must not reach.
_STEAM2 = re.compile(r"STEAM_([0-9]):([0-9]):([0-9]{1,10})", re.ASCII)
_STEAM3 = re.compile(r"\[U:([0-9]):([0-9]{1,10})\]", re.ASCII)
_LONG = 40  # quoted back in an error message at most this many characters


class SteamIdError(ValueError):
    """Not a Steam account id arenad rates; the message says why."""


def _quote(text: str) -> str:
    return repr(text if len(text) <= _LONG else text[:_LONG] + "...")


def canonical_steam_id(text: str) -> str:
    """``STEAM_0:X:Y``, ``STEAM_1:X:Y`` or ``[U:1:Z]`` -> ``[U:1:Z]`` (Z = 2Y + X).

    Raises ``SteamIdError`` naming what is wrong: another universe (only public accounts, 0 or
    1 in the Steam2 form and 1 in SteamID3, are players), X not 0 or 1, account 0, an account
    number beyond 32 bits, or text of neither form.
    """
    m = _STEAM2.fullmatch(text)
    if m is not None:
        universe, x, y = (int(g) for g in m.groups())
        if universe not in (0, 1):
            raise SteamIdError(f"{_quote(text)}: universe {universe} is not the public one (0 or 1)")
        if x > 1:
            raise SteamIdError(f"{_quote(text)}: the account's low bit must be 0 or 1, got {x}")
        return _account(2 * y + x, text)
    m = _STEAM3.fullmatch(text)
    if m is not None:
        universe, z = int(m.group(1)), int(m.group(2))
        if universe != 1:
            raise SteamIdError(f"{_quote(text)}: universe {universe} is not the public one (1)")
        return _account(z, text)
    raise SteamIdError(f"{_quote(text)}: not STEAM_0:X:Y, STEAM_1:X:Y or [U:1:Z]")


def _account(z: int, text: str) -> str:
    if z == 0:
        raise SteamIdError(f"{_quote(text)}: account 0 is no account")
    if z > MAX_ACCOUNT:
        raise SteamIdError(f"{_quote(text)}: account {z} is beyond 32 bits")
    return f"[U:1:{z}]"


def steam2(account: int, universe: int = 1) -> str:
    """``[U:1:Z]``'s account number in the Steam2 spelling (``STEAM_<universe>:X:Y``)."""
    return f"STEAM_{universe}:{account & 1}:{account >> 1}"
