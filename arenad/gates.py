"""Anti-boosting gates and the boosting report (issue 17), pure like the scopes.

Boosting is rating won from a cooperating or absent opposition: two friends on an empty server
trading kills, one account feeding another, a player farming bots. The stat systems players know
guard against it before rating (HLstatsX rates nothing below a minimum of players, QLStats needs
at least 4, XLRstats 3 and ignores bots); arenad does it in the one applier, so live, recovery,
rebuild and replay gate the same kills (tests/daemon/test_applier.py):

* ``min_players``: a kill is rated only when at least that many distinct players were seen on
  its server in the last ``window`` seconds of event time. "Seen" is read from the journal
  itself: the attacker and victim of every kill of that server (rated or not), so the gate needs
  no record the journal lacks and an old journal is gated like a new one. Bots count as players
  when they are rated (``bots = "rated"`` or ``"hidden"``: the operator chose them as opponents),
  never under ``bots = "excluded"``.
* ``bots``: ``"rated"`` (as before), ``"excluded"`` (a kill with a bot in it is not rated, reason
  ``bot``), ``"hidden"`` (rated, but bots are left out of public lists like players who asked to
  be, ``ScopeSet.is_hidden``). A bot is a player id in the ``bot:`` namespace: both built-in
  feeds have always named bots so (OpenArena: a ``skill`` key in the userinfo; Source: ``BOT`` as
  the Steam ID), and UDP / MQTT senders name them so. The flag is in the journal's player ids,
  so the journal format is unchanged and journals written before the gates are gated too.
* the boosting report (``suspects``): over each attacker's rated kills of the last
  ``suspect_window`` seconds, a victim whose share is far above chance. Under fair play a kill
  of A's on a server where n players were seen has victim V with probability 1/(n - 1); over A's
  N kills the expected count of V is the sum of those chances, p = that sum / N. A pair with k
  kills is a suspect when k >= ``suspect_min_kills`` and the binomial tail P(X >= k | N, p) is
  below ``suspect_p`` (a one-sided exact test; with thousands of attackers a day, 1e-6 keeps
  false alarms rare while a farm of 20 kills out of 25 on a 10-player server scores ~1e-15).
  The report changes no rating: it is for the operator, who excludes or merges.

The state (players seen per server, the report's window of kills, the gate counts) is part of
the scope state only when a gate is configured, so other states keep their bytes.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

BOT_POLICIES = ("rated", "excluded", "hidden")
#: Player ids of bots start so (both built-in feeds; docs/operations.md for other senders).
BOT_PREFIX = "bot:"
#: Reasons a gate gives (``arenad_events_filtered_total{reason}``).
GATE_REASONS = ("min_players", "bot")


def is_bot(player: str) -> bool:
    return player.startswith(BOT_PREFIX)


@dataclass(frozen=True, slots=True)
class GateConfig:
    """``[gates]`` (validated by ``arenad.daemon.config``); the defaults gate nothing."""

    min_players: int = 0  # 0: off
    window: float = 600.0  # seconds of event time a player counts as present
    bots: str = "rated"
    suspects: bool = False  # keep the boosting report
    suspect_window: float = 86400.0
    suspect_min_kills: int = 10
    suspect_p: float = 1e-6

    @property
    def gating(self) -> bool:
        """Whether any kill can be gated or tracked: then the applier checks every kill."""
        return self.min_players > 0 or self.bots == "excluded" or self.suspects


@dataclass(frozen=True, slots=True)
class Suspect:
    """One pair of the boosting report."""

    attacker: str
    victim: str
    kills: int  # of attacker's on victim in the window
    attacker_kills: int  # all of attacker's rated kills in the window
    share: float  # kills / attacker_kills
    chance: float  # the share expected under fair play
    p_value: float  # P(X >= kills | attacker_kills, chance)
    gained: float  # the attacker's rating (mu) won from these kills

    def as_dict(self) -> dict[str, Any]:
        return {
            "attacker": self.attacker,
            "victim": self.victim,
            "kills": self.kills,
            "attacker_kills": self.attacker_kills,
            "share": round(self.share, 4),
            "chance": round(self.chance, 4),
            "p_value": self.p_value,
            "gained": round(self.gained, 2),
        }


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (exact; n is a window's kills)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    log_c = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    term = log_c + k * lp + (n - k) * lq
    total = 0.0
    for j in range(k, n + 1):
        total += math.exp(term)
        if j < n:  # pmf(j + 1) / pmf(j) = (n - j) / (j + 1) * p / q
            term += math.log(n - j) - math.log(j + 1) + lp - lq
    return min(1.0, total)


class Gates:
    """The gates' state: who was seen on each server, and the report's window of rated kills."""

    def __init__(self, config: GateConfig) -> None:
        self.config = config
        #: server ("" for none) -> player -> last event time seen, oldest first.
        self.seen: dict[str, dict[str, float]] = {}
        #: Kills each gate kept from rating (in the state, so a recovered daemon reports them too).
        self.gated: Counter[str] = Counter()
        # The report: rated kills (t, attacker, victim, chance, gain) in the window, and sums.
        self._window: deque[tuple[float, str, str, float, float]] = deque()
        self._kills: Counter[str] = Counter()  # attacker -> rated kills in the window
        self._chance: dict[str, float] = {}  # attacker -> sum of 1 / (n - 1)
        self._pairs: Counter[tuple[str, str]] = Counter()
        self._gain: dict[tuple[str, str], float] = {}

    # ------------------------------------------------------------------ per kill
    def check(self, attacker: str, victim: str, t: float, server: str | None) -> str | None:
        """Note both players as present on ``server`` and say which gate keeps the kill from
        rating (a ``GATE_REASONS`` entry), or None."""
        cfg = self.config
        bots_out = cfg.bots == "excluded"
        a_bot, v_bot = is_bot(attacker), is_bot(victim)
        present = self.seen.get(server or "")
        if present is None:
            present = self.seen[server or ""] = {}
        if math.isfinite(t):
            for p, bot in ((attacker, a_bot), (victim, v_bot)):
                if not (bot and bots_out):
                    present.pop(p, None)  # re-inserted last: the dict stays oldest first
                    present[p] = t
            horizon = t - cfg.window
            while present:
                first = next(iter(present))
                if present[first] >= horizon:
                    break
                del present[first]
        reason: str | None = None
        if bots_out and (a_bot or v_bot):
            reason = "bot"
        elif cfg.min_players and len(present) < cfg.min_players:
            reason = "min_players"
        if reason is not None:
            self.gated[reason] += 1
        return reason

    def counted(self, attacker: str, victim: str, t: float, server: str | None, gain: float) -> None:
        """A kill that was rated, for the report: ``gain`` is the attacker's change of mu."""
        if not self.config.suspects:
            return
        n = len(self.seen.get(server or "", ()))
        chance = 1.0 / (n - 1) if n > 2 else 1.0
        self._add((t, attacker, victim, chance, gain))
        horizon = t - self.config.suspect_window
        window = self._window
        while window and window[0][0] < horizon:
            self._remove(window.popleft())

    def _add(self, row: tuple[float, str, str, float, float]) -> None:
        _t, a, v, chance, gain = row
        self._window.append(row)
        self._kills[a] += 1
        self._chance[a] = self._chance.get(a, 0.0) + chance
        self._pairs[a, v] += 1
        self._gain[a, v] = self._gain.get((a, v), 0.0) + gain

    def _remove(self, row: tuple[float, str, str, float, float]) -> None:
        _t, a, v, chance, gain = row
        self._kills[a] -= 1
        if not self._kills[a]:
            del self._kills[a], self._chance[a]
        else:
            self._chance[a] -= chance
        self._pairs[a, v] -= 1
        if not self._pairs[a, v]:
            del self._pairs[a, v], self._gain[a, v]
        else:
            self._gain[a, v] -= gain

    # ------------------------------------------------------------------ the report
    def suspects(self) -> list[Suspect]:
        """The pairs far above chance now, most suspicious first."""
        cfg = self.config
        out = []
        for (a, v), k in self._pairs.items():
            if k < cfg.suspect_min_kills:
                continue
            n = self._kills[a]
            chance = min(1.0, self._chance[a] / n)
            if k / n <= chance:
                continue  # at or below chance: cheaper than the tail
            p_value = binomial_tail(k, n, chance)
            if p_value < cfg.suspect_p:
                out.append(Suspect(a, v, k, n, k / n, chance, p_value, self._gain[a, v]))
        out.sort(key=lambda s: (s.p_value, -s.kills, s.attacker, s.victim))
        return out

    # ------------------------------------------------------------------ state
    def export_state(self) -> dict[str, Any]:
        return {
            "seen": {server: [[p, t] for p, t in present.items()] for server, present in self.seen.items()},
            "gated": dict(sorted(self.gated.items())),
            "window": [list(row) for row in self._window],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], config: GateConfig) -> Gates:
        out = cls(config)
        out.seen = {str(s): {str(p): float(t) for p, t in rows} for s, rows in state.get("seen", {}).items()}
        out.gated = Counter({str(k): int(v) for k, v in state.get("gated", {}).items()})
        rows: Iterable[Any] = state.get("window", ())
        for t, a, v, chance, gain in rows:
            out._add((float(t), str(a), str(v), float(chance), float(gain)))
        return out
