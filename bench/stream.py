"""Synthetic kill streams for the benchmark: a server network over a population of P players.

Everything is drawn with numpy from one seed, so a given (P, N, seed) always yields the same
events, and two engines fed the same warm-up reach the same state.

The model (bench/README.md explains the choices):

* every player has a hidden Gaussian skill; the winner of an encounter is drawn from a logistic
  on the skill difference;
* *regulars* (a few percent of P) are the people who actually play; at any moment a roster of a
  few thousand of them is online, on arena servers of ``server_size`` slots, and kills happen
  between two players on the same server (so repeat kills inside the §2.1 cooldown happen);
* sessions end: the roster churns, mostly to other regulars, sometimes to anyone in P;
* a share of encounters involves a random player of the whole population (a visitor), so the
  ladder index sees all P players, and some of those come back after more than T_return days;
* event times advance as a Poisson process at ``rate`` events per second of event time; servers
  deliver with a small network delay, so some events arrive slightly late (applied at the engine
  clock), rare stalled deliveries arrive too late (rejected), and a few kills are suicides.

The warm-up ("history") gives every player one event, spread over ``history_days`` before the
main stream, plus a thin record of the regulars' play over the last ``t_active + 1`` days, so the
main stream starts with a populated active set whose §2.3 expiries fall due while it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DAY = 86400.0
#: Event-time origin of the main stream (a Unix time, as servers send).
T0 = 1_750_000_000.0

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Event = tuple[str, str, float]


@dataclass(frozen=True, slots=True)
class StreamConfig:
    players: int
    events: int
    seed: int = 1
    #: Events per second of event time for the whole server network.
    rate: float = 200.0
    #: Players online at once (rounded down to whole servers); capped at a quarter of P.
    online: int = 3200
    server_size: int = 16
    #: Mean session length (seconds); sets how fast the online roster churns.
    session_seconds: float = 1800.0
    #: Regulars: the share of P that plays regularly (at least ``8 * online`` players).
    regular_share: float = 0.05
    #: Share of churn replacements drawn from the whole population rather than the regulars.
    churn_from_all: float = 0.25
    #: Share of encounters where one side is a random player of the whole population.
    visitor_share: float = 0.10
    suicide_share: float = 0.003
    #: Mean network delay (seconds) between a kill and its delivery; orders are by delivery.
    delay_mean: float = 0.01
    #: Share of deliveries stalled by 6-30 s (too late for the engine's tolerance: rejected).
    stall_share: float = 5e-5
    #: Logistic slope of P(win) on the skill difference (skills are N(0, 1)).
    skill_slope: float = 1.0
    #: Span of the warm-up history; every player's one introduction event falls in it.
    history_days: float = 90.0
    #: Regular-play history: events per regular over the last ``regular_days`` before T0.
    regular_events: float = 6.0
    regular_days: float = 8.0

    @property
    def servers(self) -> int:
        online = min(self.online, self.players // 4)
        return max(1, online // self.server_size)


@dataclass(slots=True)
class Workload:
    """The pre-generated input of one scenario."""

    config: StreamConfig
    names: list[str]
    #: Warm-up as player indices (the runner turns them into freshly decoded names).
    warm_attacker: IntArray
    warm_victim: IntArray
    warm_t: FloatArray
    #: Main stream, ready to feed: (attacker, victim, t) with shared name objects.
    events: list[Event]
    regulars: int
    online: int


def player_names(n: int) -> list[str]:
    """``n`` distinct 16-character hex ids (scrambled, so hashes and key order look random)."""
    mask = (1 << 64) - 1
    return [f"{(i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & mask:016x}" for i in range(n)]


def generate(cfg: StreamConfig) -> Workload:
    if cfg.players < 4:
        raise ValueError("need at least 4 players")
    rng = np.random.default_rng(cfg.seed)
    p = cfg.players
    skill = rng.normal(0.0, 1.0, p)
    servers = cfg.servers
    online = servers * cfg.server_size
    n_reg = min(p, max(8 * online, round(cfg.regular_share * p)))
    regulars = rng.permutation(p)[:n_reg].astype(np.int64)

    wa, wv, wt = _history(cfg, rng, skill, regulars)
    a, v, t = _main(cfg, rng, skill, regulars, servers)
    names = player_names(p)
    events = list(
        zip([names[i] for i in a.tolist()], [names[i] for i in v.tolist()], t.tolist(), strict=True)
    )
    return Workload(cfg, names, wa, wv, wt, events, n_reg, online)


def _winner(
    rng: np.random.Generator, skill: FloatArray, x: IntArray, y: IntArray, slope: float
) -> tuple[IntArray, IntArray]:
    """Attacker and victim of each encounter x[i] vs y[i], by a logistic on the skill gap."""
    p_x = 1.0 / (1.0 + np.exp(-slope * (skill[x] - skill[y])))
    x_wins = rng.random(len(x)) < p_x
    return np.where(x_wins, x, y), np.where(x_wins, y, x)


def _distinct_pairs(rng: np.random.Generator, pool: IntArray, n: int) -> tuple[IntArray, IntArray]:
    i = rng.integers(0, len(pool), n)
    j = (i + rng.integers(1, len(pool), n)) % len(pool)
    return pool[i], pool[j]


def _history(
    cfg: StreamConfig, rng: np.random.Generator, skill: FloatArray, regulars: IntArray
) -> tuple[IntArray, IntArray, FloatArray]:
    p = cfg.players
    # Introductions: a random pairing of everyone (an odd one out meets a random partner).
    perm = rng.permutation(p).astype(np.int64)
    x = perm[0 : p - 1 : 2]
    y = perm[1:p:2]
    if p % 2:
        x = np.append(x, perm[-1])
        y = np.append(y, perm[rng.integers(0, p - 1)])
    t_intro = T0 - rng.uniform(60.0, cfg.history_days * DAY, len(x))
    # The regulars' recent play: random pairs among them, over the last regular_days.
    n_reg_ev = round(cfg.regular_events * len(regulars) / 2)
    rx, ry = _distinct_pairs(rng, regulars, n_reg_ev)
    t_reg = T0 - rng.uniform(60.0, cfg.regular_days * DAY, n_reg_ev)
    x = np.concatenate([x, rx])
    y = np.concatenate([y, ry])
    t = np.concatenate([t_intro, t_reg])
    order = np.argsort(t, kind="stable")
    att, vic = _winner(rng, skill, x[order], y[order], cfg.skill_slope)
    return att, vic, t[order]


def _main(
    cfg: StreamConfig, rng: np.random.Generator, skill: FloatArray, regulars: IntArray, servers: int
) -> tuple[IntArray, IntArray, FloatArray]:
    n = cfg.events
    p = cfg.players
    size = cfg.server_size
    online = servers * size
    roster = regulars[rng.permutation(len(regulars))[:online]].copy()
    is_online = np.zeros(p, dtype=bool)
    is_online[roster] = True

    # Two distinct slots on one server per encounter.
    server = rng.integers(0, servers, n)
    ia = rng.integers(0, size, n)
    ib = (ia + rng.integers(1, size, n)) % size if size > 1 else ia
    slot_a = server * size + ia
    slot_b = server * size + ib
    x = np.empty(n, dtype=np.int64)
    y = np.empty(n, dtype=np.int64)
    # Session churn: before event k, one slot's player leaves and someone offline takes it.
    churn_p = min(1.0, online / (cfg.session_seconds * cfg.rate))
    churn_at = np.flatnonzero(rng.random(n) < churn_p)
    churn_slot = rng.integers(0, online, len(churn_at))
    start = 0
    for k, at in enumerate(churn_at.tolist()):
        x[start:at] = roster[slot_a[start:at]]
        y[start:at] = roster[slot_b[start:at]]
        start = at
        s = int(churn_slot[k])
        while True:
            if rng.random() < cfg.churn_from_all:
                new = int(rng.integers(0, p))
            else:
                new = int(regulars[rng.integers(0, len(regulars))])
            if not is_online[new]:
                break
        is_online[roster[s]] = False
        is_online[new] = True
        roster[s] = new
    x[start:] = roster[slot_a[start:]]
    y[start:] = roster[slot_b[start:]]

    # Visitors: one side replaced by a random player of the whole population.
    vis = np.flatnonzero(rng.random(n) < cfg.visitor_share)
    other = rng.integers(0, p, len(vis))
    other = np.where(other == x[vis], (other + 1) % p, other)
    y[vis] = other

    att, vic = _winner(rng, skill, x, y, cfg.skill_slope)
    sui = rng.random(n) < cfg.suicide_share
    vic = np.where(sui, att, vic)

    # Kill times, then delivery order (network delay, rare stalls).
    t_kill = T0 + np.cumsum(rng.exponential(1.0 / cfg.rate, n))
    delay = rng.exponential(cfg.delay_mean, n)
    stalled = rng.random(n) < cfg.stall_share
    delay[stalled] += rng.uniform(6.0, 30.0, int(stalled.sum()))
    order = np.argsort(t_kill + delay, kind="stable")
    return att[order], vic[order], t_kill[order]
