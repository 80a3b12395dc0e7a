"""The lab's predictions against a sweep's measured outcomes: the measures a lab protocol
(kind LAB, nplace/protocol.py) judges. Each configuration (arm, shape) of an LR-sensitivity
study: the lab's score of every seed (STUDY/lab.json, written by `nplace lab --rank`) against its
LR sensitivity, paired by seed; Spearman's rho with a bootstrap over seeds (and over
configurations, with the protocol's `resample_configurations`); and the predicted against the
observed maximum stable learning rate. From lab protocol 3 on (CONFIGURATION_METRICS), one
prediction per configuration (the range test's, recorded for each seed) against the measured
maximum stable rate, over the protocol's `arms`: rho, how many are right, and both against
baselines the grid file declares, compared on the same bootstrap draws.
"""
import dataclasses
import json
import math

import numpy as np

from nplace.studies import exact, intervals
from nplace.studies.verdict import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Effect, Verdict, partly_run

SCORES = "lab.json"  # in a results study: the lab's score of every configuration and seed
# The claims judged on one prediction per configuration against its measured maximum stable rate
# (lab protocol 3 on, rule version 4's range test), over the lab protocol's `arms`.
CONFIGURATION_METRICS = ("max_lr_rho_above_zero", "right_more_than", "ranks_better_than")


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
  """One configuration: a score (the lab's, or a baseline's) and a measure of each of its seeds, paired."""
  arm: str
  shape: str
  score_S: np.ndarray
  measured_S: np.ndarray


class Ranking:
  """Each configuration (arm, shape) of an LR-sensitivity study's `measures` (lr_sensitivity.py):
  `scores` (arm, shape, seed) -> lab score; `predicted` (arm, shape, seed) -> predicted maximum
  stable rate (rule version 3 on); `baselines` label -> arm -> a baseline's predicted maximum
  stable rate (the grid file's LAB_BASELINES, which a lab protocol's claims name)."""

  def __init__(self, protocol, measures, scores: dict, predicted: dict | None = None, baselines: dict | None = None):
    self.protocol, self.measures, self.scores = protocol, measures, scores
    self.predicted, self.baselines = predicted or {}, baselines or {}
    self.rows = self.paired("lr_sensitivity")
    self.seeds = measures.seeds

  def under(self, protocol) -> "Ranking":
    """The same scores and measures judged by another lab protocol (a threshold scaled: the
    sweep's measures do not depend on the lab's thresholds)."""
    return Ranking(protocol, self.measures, self.scores, self.predicted, self.baselines)

  def configurations(self, arms=None) -> list[tuple[str, str]]:
    """(arm, shape) of every configuration measured, of `arms` only where given."""
    return [(arm, shape) for shape in self.measures.shapes for arm in self.measures.arms if arms is None or arm in arms]

  def paired(self, metric: str, arms=None, baseline: str | None = None) -> list[Row]:
    """Per configuration (of `arms`), the lab's score of each seed, or -log10 of a baseline's
    predicted rate, beside the seed's `metric` (measures.per_seed), over the seeds that have both."""
    rows = []
    for arm, shape in self.configurations(arms):
      pairs = [(self.scores[key] if baseline is None else -math.log10(self.baselines[baseline][arm]), value)
               for seed, value in zip(self.measures.seeds, self.measures.per_seed(metric, arm, shape))
               if value is not None and (key := (arm, shape, seed)) in self.scores]
      if pairs:
        rows.append(Row(arm, shape, *map(np.array, zip(*pairs))))
    return rows

  def _draws(self, rows: list[Row]):
    """The bootstrap's draws over `rows`, each a list of (row index, its seeds drawn): each row's
    seeds resampled, and the rows themselves with the protocol's `resample_configurations`.
    The same for rows built alike (the same configurations and seeds), so two scores of the
    same configurations are compared on the same draws."""
    rng = np.random.default_rng(self.protocol.bootstrap_seed)
    for _ in range(self.protocol.bootstrap_resamples):
      index = (rng.integers(0, len(rows), len(rows)) if self.protocol.resample_configurations
               else range(len(rows)))
      yield [(i, rng.integers(0, len(rows[i].score_S), len(rows[i].score_S))) for i in index]

  @staticmethod
  def _rho_of(rows: list[Row], draw=None) -> float:
    """Spearman's rho of the rows' seed means (over the seeds a draw picked, where given)."""
    draw = draw if draw is not None else [(i, slice(None)) for i in range(len(rows))]
    return spearman([rows[i].score_S[picked].mean() for i, picked in draw],
                    [rows[i].measured_S[picked].mean() for i, picked in draw])

  def _interval(self, resampled) -> tuple[float, float]:
    resampled = np.array(resampled)
    resampled = resampled[np.isfinite(resampled)]
    return intervals.bounds(resampled, self.protocol) if len(resampled) else (math.nan, math.nan)

  def _draw_rho(self, rows, draw) -> float:
    """rho on a bootstrap draw. Lab protocol 2 dropped the draws where a side has no ranks (NaN);
    from protocol 3 such a draw counts as rho 0: where a rule predicts one rate for all but one
    configuration, the draws that leave that one out rank nothing, and dropping them made its
    one right call the whole interval."""
    rho = self._rho_of(rows, draw)
    return 0.0 if math.isnan(rho) and judges_configurations(self.protocol) else rho

  def rho(self, rows: list[Row] | None = None) -> tuple[float, float, float]:
    """Spearman's rho of the seed means of `rows` (default: the lab score against LR
    sensitivity) and its bootstrap interval."""
    rows = self.rows if rows is None else rows
    return self._rho_of(rows), *self._interval([self._draw_rho(rows, draw) for draw in self._draws(rows)])

  def rho_difference(self, rows: list[Row], other: list[Row]) -> tuple[float, float, float]:
    """rho(rows) - rho(other), `other` built alike from another score, and its interval over
    the same bootstrap draws."""
    return (self._rho_of(rows) - self._rho_of(other),
            *self._interval([self._draw_rho(rows, draw) - self._draw_rho(other, draw) for draw in self._draws(rows)]))

  def max_lrs(self, arms=None, baseline: str | None = None) -> list[tuple[str, str, float | None, float | None]]:
    """(arm, shape, predicted, observed) per configuration (of `arms`): the lab's predicted
    maximum stable rate (a geometric mean over the seeds), or a baseline's, and the geometric
    mean over the seeds of the largest rate each was stable at (None where a seed lacks one)."""
    out = []
    for arm, shape in self.configurations(arms):
      predicted = ([self.baselines[baseline][arm]] if baseline is not None else
                   [self.predicted.get((arm, shape, seed)) for seed in self.measures.seeds])
      observed = [self.measures.max_stable_lr(arm, shape, seed) for seed in self.measures.seeds]
      predicted_ok = None not in predicted and all(math.isfinite(x) and x > 0 for x in predicted)
      out.append((arm, shape, _geometric_mean(predicted) if predicted_ok else None,
                  None if None in observed else _geometric_mean(observed)))
    return out

  def right(self, found, protocol=None) -> list[bool | None]:
    """Per (arm, shape, predicted, observed) of `max_lrs`, whether the prediction is right. Lab
    protocol 2: within `lr_tolerance` decades of the observed geometric mean. From protocol 3 (one
    prediction per configuration): within it of a majority of the seeds' own maximum stable rates
    (a mean of seeds that disagree is no seed's rate); None, not judged, where a seed was stable at
    the sweep's top rate, whose maximum may lie decades higher."""
    protocol = protocol or self.protocol
    tolerance = protocol.threshold("lr_tolerance")
    if not judges_configurations(protocol):
      return [abs(math.log10(p / o)) <= tolerance for _, _, p, o in found]
    out = []
    for arm, shape, p, _ in found:
      seeds = [self.measures.max_stable_lr(arm, shape, seed) for seed in self.seeds]
      if any(rate is not None and rate >= max(self.measures.lrs) for rate in seeds):
        out.append(None)
      else:
        out.append(2 * sum(rate is not None and abs(math.log10(p / rate)) <= tolerance for rate in seeds) > len(seeds))
    return out

  def _max_lr_verdict(self, claim, protocol) -> Verdict:
    found = self.max_lrs()
    if not found or any(p is None or o is None for _, _, p, o in found):
      return Verdict(claim, NOT_TESTABLE, (), None,
                           "a prediction and an observed maximum stable rate for every configuration")
    tolerance, target = protocol.threshold("lr_tolerance"), protocol.threshold("target_right")
    right = self.right(found, protocol)
    fraction = float(np.mean(right))
    effect = Effect(f"{len(found)} configurations", fraction, math.nan, math.nan, len(self.seeds),
                          f"fraction predicted within {tolerance:g} decades")
    held = fraction >= target
    return Verdict(claim, REPRODUCED if held else NOT_REPRODUCED,
                         (effect,), None, f"{sum(right)} of {len(right)} right; "
                         f"{'fewer' if held else 'at least'} {math.ceil(target * len(right))} would change it")

  def unjudgeable(self, arms) -> list[str]:
    """The configurations of `arms` that a prediction of each one's maximum stable rate cannot be
    judged on: not measured, or a seed without a prediction or without a stable rate."""
    measured = {arm for arm, _ in self.configurations(arms)}
    missing = [f"{arm} (not measured)" for arm in arms if arm not in measured]
    return missing + [f"{arm}, {shape}" + (" (no prediction)" if p is None else " (a seed stable at no rate)")
                      for arm, shape, p, o in self.max_lrs(arms) if p is None or o is None]

  def _configuration_verdict(self, claim, protocol) -> Verdict:
    """The per-configuration claims (CONFIGURATION_METRICS) over the lab protocol's `arms`: the
    prediction of each one's maximum stable rate, against the measured rate and a baseline."""
    arms = protocol.arms if protocol.arms is not None else self.measures.arms
    lacking = self.unjudgeable(arms)
    if lacking:
      return Verdict(claim, NOT_TESTABLE, (), None, "a prediction and a measured maximum stable rate in every seed "
                     f"of every configuration; lacking: {'; '.join(lacking)}")
    verdict = self._configuration_claim(claim, protocol, arms)
    given = next((c for c in protocol.claims if c.id == claim.given), None)
    if given is None or verdict.verdict != REPRODUCED:
      return verdict
    first = self._configuration_claim(given, protocol, arms)
    if first.verdict == REPRODUCED:
      return verdict
    return dataclasses.replace(verdict, verdict=NOT_REPRODUCED,
                               would_change=f"{given.id} reproduced (it reads {first.verdict}), then: {verdict.would_change}")

  def _configuration_claim(self, claim, protocol, arms) -> Verdict:
    n, seeds = len(self.configurations(arms)), len(self.seeds)
    where = f"{n} configurations"
    if claim.metric == "right_more_than":
      ours, theirs = (self.right(self.max_lrs(arms, b), protocol) for b in (None, claim.baseline))
      judged = [(a, b) for a, b in zip(ours, theirs) if a is not None]  # not where a seed is censored at the top
      wins, losses = sum(a and not b for a, b in judged), sum(b and not a for a, b in judged)
      p, alpha = exact.sign_p(wins, losses), protocol.threshold("sign_p")
      tolerance = protocol.threshold("lr_tolerance")
      effect = Effect(where, wins - losses, math.nan, math.nan, seeds, f"right within {tolerance:g} decades of a "
                      f"majority of seeds, the lab ({sum(a for a, _ in judged)} of {len(judged)} judged) − the "
                      f"{claim.baseline} ({sum(b for _, b in judged)}); one-sided exact sign test p = {p:.3g}")
      held = p <= alpha
      change = (f"a sign test p above {alpha:g} ({wins} right where the {claim.baseline} was wrong, {losses} the "
                f"other way)" if held else f"p at most {alpha:g}: {wins} against {losses} is too few")
      return Verdict(claim, REPRODUCED if held else NOT_REPRODUCED, (effect,), None, change)
    if n < 3:
      return Verdict(claim, NOT_TESTABLE, (), None, "at least 3 configurations scored and swept")
    rows = self.paired("max_stable_lr", arms)
    if len({float(r.measured_S.mean()) for r in rows}) < 2:
      return Verdict(claim, NOT_TESTABLE, (), None, "measured maximum stable rates that differ between "
                     "configurations: there is no ranking to predict")
    if claim.metric == "max_lr_rho_above_zero":
      found, what = self.rho(rows), "Spearman's rho, lab score vs measured maximum stable rate (-log10)"
    else:  # ranks_better_than
      found = self.rho_difference(rows, self.paired("max_stable_lr", arms, claim.baseline))
      what = f"Spearman's rho vs measured maximum stable rate, the lab − the {claim.baseline}"
    held = found[1] > 0
    return Verdict(claim, REPRODUCED if held else NOT_REPRODUCED, (Effect(where, *found, seeds, what),), None,
                   f"{'an interval reaching 0' if held else 'an interval above 0'} (over seeds and configurations, "
                   f"{protocol.bootstrap_resamples} draws)")

  def verdict(self, claim, protocol) -> Verdict:
    return partly_run(self._verdict(claim, protocol), getattr(self.measures, "missing", {}))

  def _verdict(self, claim, protocol) -> Verdict:
    if claim.metric == "max_lr_right":
      return self._max_lr_verdict(claim, protocol)
    if claim.metric in CONFIGURATION_METRICS:
      return self._configuration_verdict(claim, protocol)
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


def judges_configurations(protocol) -> bool:
  """Whether a lab protocol judges one prediction per configuration (CONFIGURATION_METRICS):
  the lab scores it with the range test, the rule's version 4."""
  return any(c.metric in CONFIGURATION_METRICS for c in protocol.claims)


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
