"""The lab's predictions against a sweep's measured outcomes: the measures a lab protocol
(kind LAB, nplace/protocol.py) judges. Each configuration (arm, shape) of an LR-sensitivity
study: the lab's init-time score of every seed (STUDY/lab.json, written by `nplace lab --rank`)
against its LR sensitivity, paired by seed; Spearman's rho with a bootstrap over seeds (and
over configurations, with the protocol's `resample_configurations`); and the predicted against
the observed maximum stable learning rate.
"""
import dataclasses
import json
import math

import numpy as np

from nplace.studies import intervals
from nplace.studies.verdict import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Effect, Verdict, partly_run

SCORES = "lab.json"  # in a results study: the lab's score of every configuration and seed


def average_ranks(keys) -> np.ndarray:
  """1-based ranks of comparable keys, tied keys sharing the mean of their positions."""
  order = sorted(range(len(keys)), key=lambda i: keys[i])
  ranks = np.empty(len(keys))
  start = 0
  while start < len(order):
    end = start
    while end + 1 < len(order) and keys[order[end + 1]] == keys[order[start]]:
      end += 1
    ranks[order[start:end + 1]] = (start + end) / 2 + 1
    start = end + 1
  return ranks


def spearman(x, y) -> float:
  """Spearman's rank correlation (Pearson's on average ranks); NaN when a side is constant."""
  rx, ry = average_ranks(list(x)), average_ranks(list(y))
  if np.ptp(rx) == 0 or np.ptp(ry) == 0:
    return math.nan
  return float(np.corrcoef(rx, ry)[0, 1])


def _geometric_mean(values) -> float:
  return float(np.exp(np.mean(np.log(values))))


@dataclasses.dataclass(frozen=True)
class Row:
  """One configuration: the lab's score and the LR sensitivity of each of its seeds, paired."""
  arm: str
  shape: str
  score_S: np.ndarray
  sensitivity_S: np.ndarray


class Ranking:
  """Each configuration (arm, shape) of an LR-sensitivity study's `measures` (lr_sensitivity.py):
  `scores` (arm, shape, seed) -> lab score; `predicted` (arm, shape, seed) -> predicted maximum
  stable rate (rule version 3 on)."""

  def __init__(self, protocol, measures, scores: dict, predicted: dict | None = None):
    self.protocol, self.measures, self.scores, self.predicted = protocol, measures, scores, predicted or {}
    self.rows = []
    for shape in measures.shapes:
      for arm in measures.arms:
        pairs = [(scores[(arm, shape, seed)], value) for seed, value in
                 zip(measures.seeds, measures.per_seed("lr_sensitivity", arm, shape))
                 if value is not None and (arm, shape, seed) in scores]
        if pairs:
          self.rows.append(Row(arm, shape, *map(np.array, zip(*pairs))))
    self.seeds = measures.seeds

  def under(self, protocol) -> "Ranking":
    """The same scores and measures judged by another lab protocol (a threshold scaled: the
    sweep's measures do not depend on the lab's thresholds)."""
    return Ranking(protocol, self.measures, self.scores, self.predicted)

  def rho(self) -> tuple[float, float, float]:
    """Spearman's rho of the seed means and its bootstrap interval."""
    rho = spearman([r.score_S.mean() for r in self.rows], [r.sensitivity_S.mean() for r in self.rows])
    rng = np.random.default_rng(self.protocol.bootstrap_seed)
    resampled = []
    for _ in range(self.protocol.bootstrap_resamples):
      rows = ([self.rows[i] for i in rng.integers(0, len(self.rows), len(self.rows))]
              if self.protocol.resample_configurations else self.rows)
      picks = [rng.integers(0, len(r.score_S), len(r.score_S)) for r in rows]
      resampled.append(spearman([r.score_S[i].mean() for r, i in zip(rows, picks)],
                                [r.sensitivity_S[i].mean() for r, i in zip(rows, picks)]))
    resampled = np.array(resampled)
    resampled = resampled[np.isfinite(resampled)]
    if not len(resampled):
      return rho, math.nan, math.nan
    return rho, *intervals.bounds(resampled, self.protocol)

  def max_lrs(self) -> list[tuple[str, str, float | None, float | None]]:
    """(arm, shape, predicted, observed) per configuration: geometric means over the seeds of
    the lab's predicted maximum stable rate and of the largest rate each seed learned at (None
    where a seed lacks one)."""
    out = []
    for row in self.rows:
      arm, shape = row.arm, row.shape
      predicted = [self.predicted.get((arm, shape, seed)) for seed in self.measures.seeds]
      observed = [self.measures.max_stable_lr(arm, shape, seed) for seed in self.measures.seeds]
      out.append((arm, shape,
                  None if None in predicted or min(predicted) <= 0 else _geometric_mean(predicted),
                  None if None in observed else _geometric_mean(observed)))
    return out

  def _max_lr_verdict(self, claim, protocol) -> Verdict:
    found = self.max_lrs()
    if not found or any(p is None or o is None for _, _, p, o in found):
      return Verdict(claim, NOT_TESTABLE, (), None,
                           "a prediction and an observed maximum stable rate for every configuration")
    tolerance, target = protocol.threshold("lr_tolerance"), protocol.threshold("target_right")
    right = [abs(math.log10(p / o)) <= tolerance for _, _, p, o in found]
    fraction = float(np.mean(right))
    effect = Effect(f"{len(found)} configurations", fraction, math.nan, math.nan, len(self.seeds),
                          f"fraction predicted within {tolerance:g} decades")
    held = fraction >= target
    return Verdict(claim, REPRODUCED if held else NOT_REPRODUCED,
                         (effect,), None, f"{sum(right)} of {len(right)} right; "
                         f"{'fewer' if held else 'at least'} {math.ceil(target * len(right))} would change it")

  def verdict(self, claim, protocol) -> Verdict:
    return partly_run(self._verdict(claim, protocol), getattr(self.measures, "missing", {}))

  def _verdict(self, claim, protocol) -> Verdict:
    if claim.metric == "max_lr_right":
      return self._max_lr_verdict(claim, protocol)
    if len(self.rows) < 3:
      return Verdict(claim, NOT_TESTABLE, (), None,
                           "at least 3 configurations scored and swept")
    rho, low, high = self.rho()
    effect = Effect(f"{len(self.rows)} configurations", rho, low, high, len(self.seeds),
                          "Spearman's rho, lab score vs LR sensitivity")
    if claim.metric == "rho_above_zero":
      held = low > 0
      change = "an interval reaching 0" if held else "an interval above 0"
    else:
      target = protocol.threshold("target_rho")
      held = rho >= target
      change = f"rho below {target:g}" if held else f"rho reaching {target:g}"
    verdict = REPRODUCED if held else NOT_REPRODUCED
    over = ("seeds and configurations" if protocol.resample_configurations
            else "seeds only, not over the choice of configurations")
    return Verdict(claim, verdict, (effect,), None, f"{change} (the interval is over {over})")


def judges_max_lr(protocol) -> bool:
  """Whether a lab protocol judges the predicted maximum stable rates (and so shows them)."""
  return any(c.metric == "max_lr_right" for c in protocol.claims)


def record_of(study) -> dict | None:
  """A results study's lab.json, or None where the lab has not scored it."""
  path = study.path / SCORES
  return json.loads(path.read_text()) if path.is_file() else None


def scores_of(study) -> tuple[dict, dict] | None:
  """(arm, shape, seed) -> score and -> predicted maximum stable rate (rule version 3 on) from a
  results study's lab.json; None where the lab has not scored it."""
  record = record_of(study)
  if record is None:
    return None
  return ({(r["arm"], r["shape"], r["seed"]): r["score"] for r in record["scores"]},
          {(r["arm"], r["shape"], r["seed"]): r["predicted_max_lr"]
           for r in record["scores"] if "predicted_max_lr" in r})
