"""A request and its answer as the pure handlers see them, and the query-string reader.

Percent-decoding happens here, segment by segment and value by value, so a name holding ``/``,
``,``, ``%``, ``+`` or ``?`` survives when its client encodes it (``%2F``, ``%2C`` ...): the
comma-separated lists are split on their raw commas before each item is decoded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, unquote_plus

from arenad.web.reader import ApiError

_SHOW = 40  # characters of a client-supplied value quoted back in an error


@dataclass(frozen=True, slots=True)
class Request:
    """An HTTP request as the handlers see it."""

    method: str
    path: str  # raw (percent-encoded) path, without the query
    query: str = ""  # raw query string, without the "?"
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case
    client: str = "-"  # address the rate limit counts against


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    route: str  # the route template, a bounded label for metrics ("/api/v1/players/{player}")


# ---------------------------------------------------------------------------- parameters
class Params:
    """The query string: each parameter once; values decoded on access (lists split first)."""

    def __init__(self, raw: str) -> None:
        self._raw: dict[str, str] = {}
        for piece in raw.split("&") if raw else ():
            if not piece:
                continue
            key_raw, _, value = piece.partition("=")
            key = decode(key_raw, "query", plus=True)
            if key in self._raw:
                raise ApiError(400, f"parameter {show(key)} given more than once", key)
            self._raw[key] = value

    def only(self, allowed: frozenset[str]) -> None:
        unknown = sorted(set(self._raw) - allowed)
        if unknown:
            known = ", ".join(sorted(allowed)) or "none"
            raise ApiError(400, f"unknown parameter {show(unknown[0])} (known: {known})", unknown[0])

    def __contains__(self, key: str) -> bool:
        return key in self._raw

    def text(self, key: str, default: str | None = None) -> str:
        if key not in self._raw:
            if default is None:
                raise ApiError(400, "missing", key)
            return default
        return decode(self._raw[key], key, plus=True)

    def items(self, key: str) -> list[str]:
        """A comma-separated list: split on the raw commas, then each item decoded."""
        raw = self._raw.get(key)
        if not raw:
            raise ApiError(400, "missing (a comma-separated list)", key)
        if _plain(raw) and "\x00" not in raw:
            # Nothing to decode or refuse in any item: decode's own fast path, once for the
            # whole list rather than a call for each of a batch's 256 ids.
            return raw.split(",")
        return [decode(item, key, plus=True) for item in raw.split(",")]

    def int(self, key: str, lo: int, hi: int, default: int) -> int:
        if key not in self._raw:
            return default
        text = self.text(key)
        if not (text.isascii() and text.lstrip("-").isdigit()) or len(text) > 12:
            raise ApiError(400, f"must be an integer, got {show(text)}", key)
        v = int(text)
        if not lo <= v <= hi:
            raise ApiError(400, f"must be between {lo} and {hi}, got {v}", key)
        return v

    def number(self, key: str, default: float) -> float:
        if key not in self._raw:
            return default
        text = self.text(key)
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not math.isfinite(v):
            raise ApiError(400, f"must be a finite number (seconds since 1970), got {show(text)}", key)
        return v

    def flag(self, key: str) -> bool:
        if key not in self._raw:
            return False
        text = self.text(key).lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("", "0", "false", "no", "off"):
            return False
        raise ApiError(400, f"must be true or false, got {show(text)}", key)

    def choice(self, key: str, choices: tuple[str, ...]) -> str | None:
        if key not in self._raw or not self._raw[key]:
            return None
        text = self.text(key)
        if text not in choices:
            raise ApiError(400, f"must be one of {', '.join(choices)}, got {show(text)}", key)
        return text


def _plain(raw: str) -> bool:
    """Nothing in ``raw`` to percent-decode (most ids of a batch)."""
    return "%" not in raw and "+" not in raw


def decode(raw: str, parameter: str, *, plus: bool) -> str:
    """Percent-decode ``raw`` (``+`` as a space where ``plus``); a 400 naming ``parameter``."""
    if _plain(raw):
        text = raw
    else:
        try:
            text = unquote_plus(raw, errors="strict") if plus else unquote(raw, errors="strict")
        except UnicodeDecodeError:
            raise ApiError(400, "is not valid percent-encoded UTF-8", parameter) from None
    if "\x00" in text:
        raise ApiError(400, "must not contain a NUL character", parameter)
    return text


def show(v: object) -> str:
    """A client-supplied value for an error message, cut short so an answer stays small."""
    text = repr(v)
    return text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."


@dataclass(frozen=True, slots=True)
class Raw:
    """A handler's answer that is already bytes of a given type (the stylesheet, openapi.json)."""

    content_type: str
    data: bytes


#: A route's handler: (request, its parameters, its decoded path segments) -> (status, body), the
#: body a JSON value, an HTML page (str) or ``Raw``.
Handler = Callable[[Request, Params, list[str]], tuple[int, Any]]
