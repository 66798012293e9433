"""Shadow models: other rating models fed the same journaled events as ADR, and the rolling
prediction scores of every model, the primary included (issue 5, "Shadow models in the daemon").

The engine task runs the shadows after the primary (ADR) has applied a few slices of records,
with the same records and one shadow after the other, so the primary's work never waits on a
shadow and a shadow costs its own prediction and update, nothing more. For every shadow, record
by record:

* a kill: ``p = predict(attacker, victim, t)`` is scored, then ``update(attacker, victim, t)``;
* a match placement: every (better, worse) pair of ``placement_pairs`` is predicted and scored
  (``predict_placement`` where the model has one, else ``predict``: ``base.predict_placement``),
  then ``update_match(placements, t)`` if the model rates matches (``rates_matches``).

The primary's predictions come from one of two places:

* With shadows, the engine task scores the primary itself, record by record, before it applies
  each kill: ``adr_prediction`` is ``Engine.predict`` (§3.1) for two known players and 0.5
  otherwise, as ``arenad.models.ADRModel.predict``, and a placement pair's is
  ``Engine.predict_placement``. The pairs' predictions are scored too, so every model is scored
  on the same predictions in the same order; a comparison needs that, which is why the engine's
  ring below is not used then (it holds no placement pairs, and no prediction of a kill ADR
  refuses as out of order).
* Without shadows nothing is done per event in Python: the engine keeps a ring of its own last
  ``QUALITY_WINDOW`` (8192) predictions, stored by the C kernel as it learns each kill
  (``Engine.recent_predictions``), and ``RingScores`` scores the newest ``min(window, 8192)``
  of them at scrape time. Each is the calibrated P(attacker kills victim) the engine computed
  as it took a kill, before learning from it (after the §5 decay of the two players), for every
  kill ADR took, cooldown repeats included, placement pairs not. So the figures are close to,
  not equal to, those of the record-by-record scoring. Prediction number m counts from the
  engine's construction, so after a restart the ring starts empty (it is in no checkpoint): it
  fills with the journal tail that recovery replays and with what follows, and the prediction
  count starts again from 0 (a counter reset to Prometheus). A recompute that swaps the global
  ladder in does the same: its ring holds the rebuilt history's last predictions, counted from
  the snapshot it started from.

Scores. Each model keeps its last ``window`` predictions in a numpy ring buffer, stored in O(1)
and without allocation (a memoryview store). Log loss, Brier, ECE (``ECE_BINS`` equal-width
bins, count-weighted) and AUC are computed at scrape time over the window (at most once a second
per model) by one function, ``score``, with the functions of ``arenad.evaluation.metrics``, so a
live figure is the offline one. A recorded kill is always a positive ("the attacker kills the
victim"), so AUC and ECE need negatives: as ``metrics.orient`` does with a seed, each prediction
is shown one way round or the other, here deterministically: prediction number m of a model
(counted from 0 over its life) is shown as ``(1 − p, y = 0)`` when m is odd and as ``(p, y = 1)``
when m is even. Log loss and Brier are the same either way round.

State. Each shadow's ``export_state``, each window and its prediction count go into the engine's
checkpoint (the engine's own ring does not, see above); recovery imports them and replays the
journal after the checkpoint through the same code, so a restart continues every model exactly
where it stopped. A shadow added to the configuration starts fresh at that point; one removed is
dropped.

A model that raises, or predicts something that is not a probability, is stopped: logged once,
exported as failed, and kept stopped across restarts. The daemon and the other models go on
(STYLE.md §5).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import msgpack
import numpy as np
import numpy.typing as npt
import structlog

from arenad.core.engine import Engine
from arenad.daemon.config import ModelsSettings
from arenad.daemon.state import JournalRecord, PlacementRecord, record_seq
from arenad.daemon.types import ModelFigures
from arenad.errors import ConfigError, ConfigProblem
from arenad.evaluation import metrics
from arenad.models import MatchModel, ModelFactory, RatingModel, discover_models

log = structlog.get_logger("arenad.shadows")

#: Every n-th record's prediction and update is timed per shadow (as the primary's updates are).
UPDATE_SAMPLE = 64
#: Seconds a window's scores are reused while predictions arrive: they cost O(window log window)
#: on the event loop, and a client polling ``stats`` must not make the engine pay that each time.
SCORES_MAX_AGE = 1.0
#: Bins of the expected calibration error, as ``arenad evaluate`` reports it.
ECE_BINS = 10

#: What ``Engine.recent_predictions`` returns: the newest predictions oldest first, and how many
#: were ever made (the number of the next one).
RecentPredictions = Callable[[], tuple[npt.NDArray[np.float64], int]]


class Scores(NamedTuple):
    """One window's figures; ``nan`` while it is empty (AUC also while it holds one class)."""

    log_loss: float
    brier: float
    ece: float
    auc: float


NO_SCORES = Scores(math.nan, math.nan, math.nan, math.nan)


def oriented(
    p: npt.NDArray[np.float64], first: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(shown, y)`` of predictions ``p``, ``p[k]`` being prediction number ``first + k``:
    prediction m shown as ``(1 − p, 0)`` when m is odd, as ``(p, 1)`` when it is even."""
    flipped = (np.arange(first, first + len(p)) & 1).astype(bool)
    return np.where(flipped, 1.0 - p, p), np.where(flipped, 0.0, 1.0)


def score(p: npt.NDArray[np.float64], first: int) -> Scores:
    """Log loss, Brier, ECE and AUC of predictions ``p`` numbered from ``first`` (``oriented``),
    by the functions of ``arenad.evaluation.metrics``: the scoring rule of every window."""
    if len(p) == 0:
        return NO_SCORES
    shown, y = oriented(p, first)
    return Scores(
        metrics.log_loss(shown, y),
        metrics.brier(shown, y),
        metrics.ece(shown, y, ECE_BINS),
        metrics.auc(shown, y),
    )


def adr_prediction(engine: Engine, a: str, b: str) -> float:
    """The primary's P(a kills b) before the update: §3.1 for known players, else 0.5 (the prior)."""
    ids = engine.ids
    i = ids.get(a)
    j = ids.get(b)
    if i is None or j is None:
        return 0.5
    return engine.predict(i, j)


class ScoreWindow:
    """The last ``size`` predictions of one model, a ring buffer, and their scores on demand.

    The hot path stores through ``view`` at ``pos`` and calls ``commit`` once per slice; the
    scores are computed only when asked, and again only after new predictions.
    """

    def __init__(self, size: int) -> None:
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size!r}")
        self.size = size
        self.buf = np.zeros(size, dtype=np.float64)
        # Stores go through a memoryview: a float into it costs no numpy scalar.
        self.view: memoryview[float] = self.buf.data.cast("B").cast("d")
        self.pos = 0  # the slot the next prediction goes to
        self.filled = 0  # predictions in the window
        self.count = 0  # predictions since the state began: m of the next one
        self._scored_at = -1  # count the scores are of
        self._scored_time = -math.inf
        self._scores = NO_SCORES

    def add(self, p: float) -> None:
        """Store one prediction (the hot paths inline this and ``commit`` per slice)."""
        pos = self.pos
        self.view[pos] = p
        pos += 1
        self.commit(0 if pos == self.size else pos, 1)

    def commit(self, pos: int, added: int) -> None:
        """``added`` predictions were stored through ``view`` from ``self.pos`` on, ending at ``pos``."""
        self.pos = pos
        self.count += added
        filled = self.filled + added
        self.filled = filled if filled < self.size else self.size

    def ordered(self) -> npt.NDArray[np.float64]:
        """The predictions in the window, oldest first (a copy)."""
        if self.filled < self.size:
            return self.buf[: self.filled].copy()  # not wrapped yet: pos == filled
        return np.concatenate((self.buf[self.pos :], self.buf[: self.pos]))

    def oriented(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """``(shown, y)`` of the window: prediction m shown as ``(1 − p, 0)`` when m is odd."""
        p = self.ordered()
        return oriented(p, self.count - len(p))

    def scores(self, max_age: float = 0.0) -> Scores:
        """(log loss, Brier, ECE, AUC) over the window; ``nan`` while it is empty.

        Computed again only after new predictions, and then only if the last computation is at
        least ``max_age`` seconds old (``scored_at`` says which prediction count they are of).
        """
        if self._scored_at != self.count:
            now = time.monotonic()
            if now - self._scored_time >= max_age or self._scored_at < 0:
                p = self.ordered()
                self._scores = score(p, self.count - len(p))
                self._scored_at = self.count
                self._scored_time = now
        return self._scores

    @property
    def scored_at(self) -> int:
        """The prediction count the last computed scores are of."""
        return max(self._scored_at, 0)

    def export(self) -> dict[str, Any]:
        return {"count": self.count, "p": self.ordered().astype("<f8").tobytes()}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from an ``export`` (of a window of any size: the newest predictions are kept)."""
        count = state["count"]
        data = np.frombuffer(state["p"], dtype="<f8").astype(np.float64)
        if not isinstance(count, int) or isinstance(count, bool) or not len(data) <= count:
            raise ValueError(f"window of {len(data)} predictions with count {count!r}")
        if not np.all((data >= 0.0) & (data <= 1.0)):
            raise ValueError("window holds a value that is not a probability")
        kept = data[-self.size :]
        self.buf[:] = 0.0
        self.buf[: len(kept)] = kept
        self.filled = len(kept)
        self.pos = len(kept) % self.size
        self.count = count
        self._scored_at = -1


class RingScores:
    """The primary's scores from the engine's own ring (no shadows): nothing per event.

    ``recent`` is ``Engine.recent_predictions`` of the global ladder as it is now (a restart or a
    recompute replaces the engine). It is read, and the newest ``size`` predictions scored, at
    most once per ``max_age`` seconds; the figures in between are those of the last reading.
    """

    def __init__(self, recent: RecentPredictions, size: int) -> None:
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size!r}")
        self.recent = recent
        self.size = size
        self.count = 0  # predictions the engine had made at the last reading
        self.filled = 0  # of which scored (the newest, at most size and the ring's length)
        self._p: npt.NDArray[np.float64] = np.zeros(0, dtype=np.float64)
        self._read_time = -math.inf
        self._scores = NO_SCORES
        self._figures: ModelFigures | None = None  # of the last reading, for ``figures``

    def scores(self, max_age: float = 0.0) -> Scores:
        """(log loss, Brier, ECE, AUC) over the ring's newest ``size`` predictions as last read."""
        now = time.monotonic()
        if now - self._read_time >= max_age:
            self._read_time = now
            p, count = self.recent()
            p = p[-self.size :]
            # Nothing new (the same predictions with the same numbers): the same scores.
            if count != self.count or not np.array_equal(p, self._p):
                self._scores = score(p, count - len(p))
                self._p = p
                self.count = count
                self.filled = len(p)
                self._figures = None
        return self._scores

    def figures(self, name: str, max_age: float) -> ModelFigures:
        """The primary's figures (the same object until new predictions are scored: a client
        polling ``stats`` many times a second costs next to nothing)."""
        sc = self.scores(max_age)
        if self._figures is None or self._figures.model != name:
            self._figures = ModelFigures(
                name,
                "primary",
                self.count,
                self.filled,
                sc.log_loss,
                sc.brier,
                sc.auc,
                sc.ece,
                scored=self.count,
            )
        return self._figures


class Shadow:
    """One shadow model with its window and counters."""

    __slots__ = ("failed", "matches", "model", "name", "update_match", "window")

    def __init__(self, name: str, model: RatingModel, window: ScoreWindow) -> None:
        self.name = name
        self.model = model
        self.window = window
        #: The model's ``update_match`` if it rates match placements (``rates_matches``).
        self.update_match: Callable[[Sequence[Sequence[str]], float], None] | None = (
            model.update_match if isinstance(model, MatchModel) else None
        )
        self.matches = 0  # placements rated with update_match
        self.failed: str | None = None


class ModelSet:
    """The primary's window and the shadow models, driven by the engine task and recovery."""

    def __init__(
        self,
        settings: ModelsSettings,
        factories: Mapping[str, ModelFactory] | None = None,
        *,
        recent: RecentPredictions | None = None,
    ) -> None:
        if factories is None:
            factories, errors = discover_models()
            for error in errors:
                log.warning("model_plugin_failed", error=error)
        self.settings = settings
        self.primary_name = settings.primary
        self.primary = ScoreWindow(settings.window)
        self._factories = factories
        self.shadows = [self._fresh(name) for name in settings.shadows]
        self.live = list(self.shadows)  # the shadows not stopped by a failure
        #: Whether the engine task scores the primary record by record: only beside shadows, so
        #: that every model is scored on the same predictions.
        self.scoring = bool(self.shadows)
        #: Without shadows, the primary's scores from the engine's own ring (``recent``, the
        #: daemon's ``Engine.recent_predictions``): the engine task does nothing for them.
        self.ring: RingScores | None = (
            RingScores(recent, settings.window) if recent is not None and not self.scoring else None
        )
        #: Per model name: where a timed prediction + update goes (the daemon's histogram).
        self.observers: dict[str, Callable[[float], None]] = {}
        self._records = 0  # records run through the shadows: picks the timed ones

    def _fresh(self, name: str) -> Shadow:
        factory = self._factories.get(name)
        if factory is None:
            raise ConfigError([ConfigProblem("models.shadows", name, "no such rating model")])
        return Shadow(name, factory(), ScoreWindow(self.settings.window))

    @property
    def names(self) -> list[str]:
        return [self.primary_name, *(s.name for s in self.shadows)]

    # ------------------------------------------------------------------ the primary
    def score_primary_placement(self, engine: Engine, rec: PlacementRecord) -> None:
        """Score the primary's predictions of a placement's pairs, before ADR learns the match
        (``Engine.predict_placement``; 0.5 for an unknown player, as for a kill)."""
        add = self.primary.add
        ids = engine.ids
        for a, b in rec.pairs:
            i = ids.get(a)
            j = ids.get(b)
            add(0.5 if i is None or j is None else engine.predict_placement(i, j))

    # ------------------------------------------------------------------ the shadows
    def run(self, records: Sequence[JournalRecord | None], lo: int = 0, hi: int | None = None) -> None:
        """Each live shadow predicts, is scored on and learns from ``records[lo:hi]``, in order."""
        hi = len(records) if hi is None else hi
        for _ in self.run_steps(records, lo, [hi]):
            pass

    def run_steps(
        self, records: Sequence[JournalRecord | None], lo: int, cuts: Sequence[int]
    ) -> Iterator[str]:
        """``run`` over ``records[lo:cuts[-1]]``, one shadow at a time and, for each, one piece
        ``[lo:cuts[0]]``, ``[cuts[0]:cuts[1]]``... at a time, yielding the shadow's name after
        each piece so that the engine task can let queries in. A ``None`` record is one the
        primary refused for the player cap: shadows skip it, so invented ids cannot grow them
        past ``adr.max_players`` either.

        Each shadow takes all the pieces in a row: alternating with ADR (or another shadow) every
        few events costs more than the models' own work, because each one's state and code must
        come back into the CPU caches every time.
        """
        if not cuts or cuts[-1] <= lo:
            return
        base = self._records  # records run before: the same ones are timed for every model
        self._records += cuts[-1] - lo
        failed = False
        for shadow in self.live:
            start = lo
            for end in cuts:
                if end <= start:
                    continue
                ok = self._run_one(shadow, records, start, end, -(base + start - lo) % UPDATE_SAMPLE)
                start = end
                yield shadow.name
                if not ok:
                    failed = True
                    break
        if failed:
            self.live = [s for s in self.shadows if s.failed is None]

    def _run_one(
        self, shadow: Shadow, records: Sequence[JournalRecord | None], lo: int, hi: int, countdown: int
    ) -> bool:
        model = shadow.model
        predict = model.predict
        own_placement = getattr(model, "predict_placement", None)
        predict_pair = own_placement if own_placement is not None else predict
        update = model.update
        update_match = shadow.update_match
        window = shadow.window
        view = window.view
        size = window.size
        pos = window.pos
        observe = self.observers.get(shadow.name)
        perf_counter = time.perf_counter
        added = 0
        k = lo
        try:
            for k in range(lo, hi):
                rec = records[k]
                if rec is None:
                    continue
                if isinstance(rec, PlacementRecord):
                    t = rec.t
                    for a, b in rec.pairs:
                        p = predict_pair(a, b, t)  # base.predict_placement's choice, bound once
                        if not 0.0 <= p <= 1.0:  # also nan
                            raise ValueError(f"predicted {p!r} for {a!r} over {b!r}: not a probability")
                        view[pos] = p
                        added += 1
                        pos += 1
                        if pos == size:
                            pos = 0
                    if update_match is not None:
                        update_match(rec.placements, t)
                        shadow.matches += 1
                    countdown = countdown - 1 if countdown else UPDATE_SAMPLE - 1
                    continue
                if not isinstance(rec, tuple):
                    continue  # a control record (the daemon passes None for those anyway)
                _, t, attacker, victim, _s, _i = rec
                if countdown:
                    countdown -= 1
                    started = 0.0
                else:
                    countdown = UPDATE_SAMPLE - 1
                    started = perf_counter()
                p = predict(attacker, victim, t)
                if not 0.0 <= p <= 1.0:  # also nan
                    raise ValueError(f"predicted {p!r} for {attacker!r} over {victim!r}: not a probability")
                view[pos] = p
                added += 1
                pos += 1
                if pos == size:
                    pos = 0
                update(attacker, victim, t)
                if started and observe is not None:
                    observe(perf_counter() - started)
        except Exception as e:  # a plugin's failure stops that plugin, never the daemon
            shadow.failed = f"{type(e).__name__}: {e}"
            failed_rec = records[k]
            assert failed_rec is not None  # skipped records never reach the model
            seq = record_seq(failed_rec)
            log.error("shadow_failed", model=shadow.name, seq=seq, error=shadow.failed, exc_info=True)
            return False
        finally:
            window.commit(pos, added)
        return True

    # ------------------------------------------------------------------ figures
    def figures(self, max_age: float = SCORES_MAX_AGE) -> list[ModelFigures]:
        """Scores of every model, the primary first: computed here, when scraped or asked for,
        at most once per ``max_age`` seconds per model. Without shadows, the primary's from the
        engine's ring (none if there is no ring either)."""
        if not self.scoring:
            return [] if self.ring is None else [self.ring.figures(self.primary_name, max_age)]
        out = [_figures(self.primary_name, "primary", self.primary, max_age)]
        for s in self.shadows:
            out.append(_figures(s.name, "shadow", s.window, max_age, matches=s.matches, failed=s.failed))
        return out

    # ------------------------------------------------------------------ state
    def export_state(self) -> dict[str, Any]:
        """Everything to continue from here, for the checkpoint (runs in its writer thread while
        the engine task waits for it, so nothing changes meanwhile).

        Each shadow's state is packed here on its own (msgpack bytes inside the checkpoint): a
        plugin whose state does not serialise is stopped, not the checkpoint.
        """
        shadows: dict[str, Any] = {}
        for s in self.shadows:
            packed = None
            if s.failed is None:
                try:
                    packed = msgpack.packb(s.model.export_state(), use_bin_type=True)
                except Exception as e:  # a plugin's failure stops that plugin, never the daemon
                    s.failed = f"export_state: {type(e).__name__}: {e}"
                    log.error("shadow_failed", model=s.name, error=s.failed, exc_info=True)
            shadows[s.name] = {
                "state": packed,
                "window": s.window.export(),
                "matches": s.matches,
                "failed": s.failed,
            }
        self.live = [s for s in self.shadows if s.failed is None]
        return {"primary": {"model": self.primary_name, "window": self.primary.export()}, "shadows": shadows}

    def import_state(self, state: object) -> None:
        """Continue from ``export_state``. Never raises: what cannot be used starts afresh, logged."""
        if state is None:
            return  # a checkpoint from before shadow models: everything starts here
        if not isinstance(state, Mapping):
            log.warning("model_state_discarded", model="*", error=f"not a map: {type(state).__name__}")
            return
        primary = state.get("primary")
        if isinstance(primary, Mapping) and primary.get("model") == self.primary_name:
            try:
                self.primary.restore(primary["window"])
            except (KeyError, TypeError, ValueError) as e:
                self.primary = ScoreWindow(self.settings.window)
                log.warning("model_state_discarded", model=self.primary_name, error=str(e))
        elif isinstance(primary, Mapping):
            log.info("primary_scores_restarted", model=self.primary_name, was=str(primary.get("model")))
        saved = state.get("shadows")
        saved = saved if isinstance(saved, Mapping) else {}
        for k, shadow in enumerate(self.shadows):
            entry = saved.get(shadow.name)
            if entry is None:
                log.info("shadow_started", model=shadow.name)
                continue
            try:
                failed = entry["failed"]
                if failed is None:
                    shadow.model.import_state(
                        msgpack.unpackb(entry["state"], raw=False, strict_map_key=False)
                    )
                else:
                    shadow.failed = str(failed)
                shadow.window.restore(entry["window"])
                shadow.matches = int(entry["matches"])
            except Exception as e:  # a plugin's import_state may raise anything: start it afresh
                self.shadows[k] = self._fresh(shadow.name)
                log.warning("model_state_discarded", model=shadow.name, error=f"{type(e).__name__}: {e}")
        for name in saved:
            if name not in {s.name for s in self.shadows}:
                log.info("shadow_dropped", model=str(name))
        self.live = [s for s in self.shadows if s.failed is None]
        for s in self.shadows:
            if s.failed is not None:
                log.warning("shadow_stopped", model=s.name, error=s.failed)


def _figures(
    name: str, role: str, window: ScoreWindow, max_age: float, *, matches: int = 0, failed: str | None = None
) -> ModelFigures:
    sc = window.scores(max_age)
    return ModelFigures(
        name,
        role,
        window.count,
        window.filled,
        sc.log_loss,
        sc.brier,
        sc.auc,
        sc.ece,
        scored=window.scored_at,
        matches=matches,
        failed=failed,
    )
