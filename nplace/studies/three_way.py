"""Three-way verdicts (a protocol's `verdicts` = THREE_WAY, nplace/protocol.py): where a test
decides, a claim is reproduced when it clears the claim's margin in the claim's direction,
contradicted when it clears the margin the other way, inconclusive when it does neither; not
testable where data is missing.

Each claim is judged on a `Sample`, the data it reads, by `decide`; the same `decide` judges
samples drawn with no effect (`Sample.null`: the arms' own values pooled and reassigned) and
with the effect the claim's power is stated at (`Sample.alternative`), so the page prints each
claim's false-positive rate and power from the code that gives its verdict (`operating`).

- lr_sensitivity, best_loss, final_loss: the protocol's interval per model shape (Welch's t).
  Reproduced when every shape's interval clears the margin (`min_effect`; `-min_effect` for a
  "matches" claim), contradicted when some shape's interval lies wholly on the other side.
- max_stable_lr with `method` PERMUTATION: per shape, two one-sided exact permutation tests of
  the shift against `min_lr_gap`, each at (1 - interval) / 2.
- divergences with `divergence_test` STRATIFIED: the exact stratified test over model shapes and
  rates, each way, at `failure_p`.
- failure_rate: one arm's failed runs at the claim's `lr`, its Clopper-Pearson interval against
  the seed's rate: contradicted when its top is below it; reproduced when its low end is above 0
  (for a seed rate of 0: when its top is below `never_rate`).
- fails_more: two arms' failed runs at the claim's `lr`, one-sided Fisher's exact tests each
  way, Holm-adjusted over the protocol's `fails_more` claims, at `failure_p`.
"""
import dataclasses
import math

import numpy as np

from nplace.protocol import PERMUTATION, STRATIFIED
from nplace.studies import exact, intervals
from nplace.studies.verdict import CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE, REPRODUCED, Effect, Verdict, partly_run
CONTINUOUS = ("lr_sensitivity", "best_loss", "final_loss", "max_stable_lr")
METRICS = CONTINUOUS + ("divergences", "failure_rate", "fails_more")
DRAWS = 200  # samples drawn for a claim's false-positive rate and for its power


@dataclasses.dataclass(frozen=True)
class Shifts:
  """Per model shape, each seed's value of `better` and of `worse`; `margin` the claim's (minus
  `min_effect` for a "matches" claim)."""
  by_shape: dict  # shape -> (better_S, worse_S)
  margin: float

  def null(self, claim, rng) -> "Shifts":
    """The arms' values pooled and reassigned at random; for a "matches" claim, whose claim holds
    with no difference, `worse` drawn at the margin's distance below `better` instead."""
    if claim.matches:
      return self._shifted(self.margin, rng)
    out = {}
    for shape, (better, worse) in self.by_shape.items():
      pooled = rng.permutation(np.concatenate([better, worse]))
      out[shape] = (pooled[:len(better)], pooled[len(better):])
    return Shifts(out, self.margin)

  def alternative(self, claim, rng) -> "Shifts":
    return self._shifted(claim.power_at, rng)

  def _shifted(self, effect: float, rng) -> "Shifts":
    """Both arms drawn from the seeds' deviations from their own arm's mean (pooled over the
    arms), around `better`'s mean, `worse` shifted by `effect`: the spread the data shows,
    without the effect it shows."""
    out = {}
    for shape, (better, worse) in self.by_shape.items():
      deviations = np.concatenate([better - better.mean(), worse - worse.mean()])
      centre = better.mean()
      out[shape] = (centre + rng.choice(deviations, len(better)),
                    centre + effect + rng.choice(deviations, len(worse)))
    return Shifts(out, self.margin)


@dataclasses.dataclass(frozen=True)
class Counts:
  """Per stratum (a model shape and rate), whether each run of `worse` and of `better` failed."""
  by_stratum: dict  # stratum -> (worse_failed_R, better_failed_R), bool arrays

  def table(self):
    return [(int(w.sum()), len(w), int(b.sum()), len(b)) for w, b in self.by_stratum.values()]

  def null(self, claim, rng) -> "Counts":
    out = {}
    for stratum, (worse, better) in self.by_stratum.items():
      pooled = rng.permutation(np.concatenate([worse, better]))
      out[stratum] = (pooled[:len(worse)], pooled[len(worse):])
    return Counts(out)

  def alternative(self, claim, rng) -> "Counts":
    worse_rate, better_rate = claim.power_at
    return Counts({s: (rng.random(len(w)) < worse_rate, rng.random(len(b)) < better_rate)
                   for s, (w, b) in self.by_stratum.items()})


@dataclasses.dataclass(frozen=True)
class Rate:
  """One arm's runs at one rate: whether each failed; `never_rate` the protocol's threshold."""
  failed_R: np.ndarray
  never_rate: float

  def null(self, claim, rng) -> "Rate":
    """Runs failing at the rate that bounds the claim: never (a seed rate above 0), or at
    `never_rate` (a seed rate of 0): the data under which the claim must not be reproduced."""
    rate = 0.0 if claim.seed_rate > 0 else self.never_rate
    return Rate(rng.random(len(self.failed_R)) < rate, self.never_rate)

  def alternative(self, claim, rng) -> "Rate":
    return Rate(rng.random(len(self.failed_R)) < claim.power_at, self.never_rate)


def sample(claim, protocol, measures):
  """The data `claim` is judged on, or a string saying what is missing."""
  if claim.metric in CONTINUOUS:
    by_shape = {}
    for shape in measures.shapes:
      better = measures.per_seed(claim.metric, claim.better, shape)
      worse = measures.per_seed(claim.metric, claim.worse, shape)
      if not better or not worse or None in better or None in worse or min(len(better), len(worse)) < protocol.seeds:
        return "every shape run at every learning rate and seed" + (
            " (a seed stable at no rate has no maximum stable rate)" if claim.metric == "max_stable_lr" else "")
      by_shape[shape] = (np.asarray(better, float), np.asarray(worse, float))
    gap = protocol.threshold("min_lr_gap" if claim.metric == "max_stable_lr" else "min_effect")
    return Shifts(by_shape, -gap if claim.matches else gap) if by_shape else "every shape run"
  if claim.metric == "failure_rate":
    found = [p.failed for shape in measures.shapes for p in measures.of(claim.arm, shape, claim.lr)
             if p.lr == claim.lr]
    never = next((t.value for t in protocol.thresholds if t.name == "never_rate"), math.nan)
    return Rate(np.array(found, bool), never) if found else f"runs of {claim.arm} at lr {claim.lr:g}"
  rates = measures.lrs if claim.metric == "divergences" else [claim.lr]
  failed = (lambda p: p.outcome == "diverged") if claim.metric == "divergences" else (lambda p: p.failed)
  by_stratum = {}
  for shape in measures.shapes:
    for lr in rates:
      worse = [failed(p) for p in measures.of(claim.worse, shape) if p.lr == lr]
      better = [failed(p) for p in measures.of(claim.better, shape) if p.lr == lr]
      if worse and better:
        by_stratum[(shape, lr)] = (np.array(worse, bool), np.array(better, bool))
  return Counts(by_stratum) if by_stratum else "runs of both arms at a common rate"


def _three(held: bool, against: bool) -> str:
  return REPRODUCED if held and not against else CONTRADICTED if against else INCONCLUSIVE


def decide(claim, protocol, data, family=()) -> Verdict:
  """The verdict on `data` (a Sample); `family`: the p-values of the protocol's other
  `fails_more` claims, each way, for Holm's adjustment."""
  if isinstance(data, str):
    return Verdict(claim, NOT_TESTABLE, (), None, data)
  if isinstance(data, Shifts):
    return _decide_shifts(claim, protocol, data)
  if isinstance(data, Rate):
    return _decide_rate(claim, protocol, data)
  return _decide_counts(claim, protocol, data, family)


def _decide_shifts(claim, protocol, data: Shifts) -> Verdict:
  margin = data.margin
  unit = "decades" if claim.metric == "max_stable_lr" else "nats"
  effects, held, against, notes = [], [], [], []
  alpha = (1 - protocol.interval) / 2
  for shape, (better, worse) in data.by_shape.items():
    n = min(len(better), len(worse))
    if claim.method == PERMUTATION:
      mean = float(worse.mean() - better.mean())
      p_for, p_against = exact.shift_p(better, worse, margin), exact.shift_p(worse, better, -margin)
      effects.append(Effect(shape, mean, math.nan, math.nan, n, f"worse − better, {unit}"))
      held.append(p_for < alpha), against.append(p_against < alpha)
      notes.append(f"{shape}: p = {p_for:.3g} above {margin:g}, {p_against:.3g} below")
      if exact.smallest_shift_p(len(better), len(worse)) >= alpha:
        notes.append(f"no permutation test of {len(better)} and {len(worse)} seeds reaches {alpha:g}")
      continue
    mean, low, high = intervals.difference(better, worse, protocol, np.random.default_rng(protocol.bootstrap_seed))
    effects.append(Effect(shape, mean, low, high, n, f"worse − better, {unit}"))
    held.append(low > margin), against.append(high < margin)
  verdict = _three(all(held), any(against))
  method = ("exact permutation tests at " + f"{alpha:g} each way: " + "; ".join(notes)
            if claim.method == PERMUTATION else
            f"{protocol.interval:.0%} {protocol.interval_method} intervals against {margin:g} {unit}")
  return Verdict(claim, verdict, tuple(effects), None, method)


def _decide_rate(claim, protocol, data: Rate) -> Verdict:
  failed, runs = int(data.failed_R.sum()), len(data.failed_R)
  low, high = exact.rate_interval(failed, runs, protocol.interval)
  effect = Effect(f"lr {claim.lr:g}", failed / runs, low, high, runs, "failure rate [Clopper-Pearson]")
  if claim.seed_rate > 0:
    verdict = _three(low > 0, high < claim.seed_rate)
  else:
    verdict = _three(high < data.never_rate, low > 0)
  return Verdict(claim, verdict, (effect,), None,
                       f"{failed} of {runs} failed; the seed's rate {claim.seed_rate:g}")


def _decide_counts(claim, protocol, data: Counts, family) -> Verdict:
  table = data.table()
  b = sum(t[2] for t in table)
  w = sum(t[0] for t in table)
  if claim.metric == "divergences" and protocol.divergence_test == STRATIFIED:
    p_for = exact.stratified_p(table)
    p_against = exact.stratified_p([(fb, rb, fw, rw) for fw, rw, fb, rb in table])
    how = f"exact stratified test over {len(table)} strata"
  else:
    (fw, rw, fb, rb), = table
    p_for, p_against = exact.fisher_p(fw, rw, fb, rb), exact.fisher_p(fb, rb, fw, rw)
    how = "one-sided Fisher's exact tests"
    if family:
      p_for, p_against = _holm_of(p_for, p_against, family)
      how += f", Holm-adjusted over {len(family) + 1} claims"
  level = protocol.threshold("failure_p")
  verdict = _three(p_for < level, p_against < level)
  return Verdict(claim, verdict, (), (b, w), f"{how}: p = {p_for:.3g} that {claim.worse} fails more, "
                                                   f"{p_against:.3g} less; level {level:g}")


def _holm_of(p_for, p_against, family):
  """This claim's p-values each way, adjusted with its family's (a list of (p_for, p_against))."""
  adjusted_for = exact.holm([p_for, *(f for f, _ in family)])[0]
  adjusted_against = exact.holm([p_against, *(a for _, a in family)])[0]
  return adjusted_for, adjusted_against


def raw_ps(claim, protocol, data) -> tuple[float, float] | None:
  """A fails_more claim's unadjusted p-values each way (its family's members for Holm)."""
  if not isinstance(data, Counts):
    return None
  (fw, rw, fb, rb), = data.table()
  return exact.fisher_p(fw, rw, fb, rb), exact.fisher_p(fb, rb, fw, rw)


def judge_all(protocol, measures) -> list[Verdict]:
  """The protocol's verdicts: its three-way claims here, any other by `measures.verdict`."""
  samples = {c.id: sample(c, protocol, measures) for c in protocol.claims if c.metric in METRICS}
  ps = {c.id: raw_ps(c, protocol, samples[c.id]) for c in protocol.claims if c.metric == "fails_more"}
  verdicts = []
  for claim in protocol.claims:
    if claim.metric not in METRICS:
      verdicts.append(measures.verdict(claim, protocol))
      continue
    family = [p for other, p in ps.items() if other != claim.id and p is not None] if claim.id in ps else ()
    verdicts.append(partly_run(decide(claim, protocol, samples[claim.id], family),
                                     getattr(measures, "missing", {})))
  return verdicts


def operating(claim, protocol, measures, seed: int) -> tuple[float, float] | None:
  """(false-positive rate, power) of the claim's test: the share of DRAWS samples called
  reproduced with no effect (`Sample.null`), and with the effect at `claim.power_at`
  (`Sample.alternative`); None where the claim has no data or no stated effect. A fails_more
  claim is drawn alone, Holm's adjustment left out: its rates are those of one test."""
  data = sample(claim, protocol, measures)
  if isinstance(data, str) or claim.power_at is None:
    return None
  rng = np.random.default_rng(seed)
  rates = []
  for draw in (data.null, data.alternative):
    rates.append(np.mean([decide(claim, protocol, draw(claim, rng)).verdict == REPRODUCED for _ in range(DRAWS)]))
  return float(rates[0]), float(rates[1])
