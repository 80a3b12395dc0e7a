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
  An interval must clear the margin by more than rounding: seeds that are all alike give a
  zero-width interval, which decides nothing exactly at the margin.
- max_stable_lr with `method` PERMUTATION: per shape, two one-sided exact permutation tests of
  a shift of `worse` above `better` against `min_lr_gap`, each at (1 - interval) / 2. The test
  is of a shift: an arm whose values mix two grid points can move its mean by the margin
  without shifting, and 5 seeds cannot tell the two apart. A seed stable at the sweep's top rate
  may be stable higher still: where `better` has one, the claim is not contradicted; where
  `worse` has one, it is not reproduced.
- divergences and fails_more: the exact stratified test over
  model shapes and rates (one stratum: Fisher's exact test), each way, at `failure_p`;
  fails_more claims Holm-adjusted over the protocol's fails_more claims.
- exponential_rate: one arm's per-seed fits over depth (growth protocol 3),
  nplace/studies/growth_curves.py.
- a scale ladder's edges at every width and trends against size: nplace/studies/ladder.py.
- failure_rate: one arm's failed runs at the claim's `lr`, its Clopper-Pearson interval against
  the seed's rate r: contradicted when the interval excludes r (the arm fails less often, or
  more, than the seed says); reproduced when it holds r and excludes 0 (the arm fails, as often
  as the seed's own 1 of 5 allows); inconclusive when it holds both. For a seed rate of 0:
  reproduced when the top is below `never_rate`, contradicted when the low end reaches it.

False positives: each claim is judged on samples drawn with no effect, its reproduced share the
larger over its nulls: the arms' values pooled and reassigned at random, and (continuous
values) both arms drawn at the claim's margin from the spread the seeds show; for a failure
rate, runs that never fail (a seed rate above 0) or fail at `never_rate` (a seed rate of 0); for
growth over depth, curves of the shape the claim denies (growth_curves.Curves.nulls).
"""
import dataclasses
import math

import numpy as np

from nplace.protocol import COUNTED_METRICS, PERMUTATION
from nplace.studies import exact, growth_curves, intervals, ladder
from nplace.studies.verdict import (INCONCLUSIVE, NOT_TESTABLE, REPRODUCED, ROUNDING, Effect, Verdict, effect_what,
                                   partly_run, reading)

CONTINUOUS = ("lr_sensitivity", "best_loss", "final_loss", "max_stable_lr")
METRICS = CONTINUOUS + COUNTED_METRICS + growth_curves.METRICS + ladder.METRICS
DRAWS = 200  # samples drawn for a claim's false-positive rate and for its power


@dataclasses.dataclass(frozen=True)
class Shifts:
  """Per model shape, each seed's value of `better` and of `worse`; `margin` the claim's (minus
  `min_effect` for a "matches" claim)."""
  by_shape: dict  # shape -> (better_S, worse_S)
  margin: float
  top: float | None = None  # max_stable_lr: the value of a seed stable at the sweep's top rate

  def nulls(self, claim) -> list:
    """Draws with no effect: the arms pooled and reassigned (not for a "matches" claim, which
    holds with no difference), and both arms at the claim's margin."""
    return ([] if claim.matches else [self._pooled]) + [lambda claim, rng: self._shifted(self.margin, rng)]

  def _pooled(self, claim, rng) -> "Shifts":
    out = {}
    for shape, (better, worse) in self.by_shape.items():
      pooled = rng.permutation(np.concatenate([better, worse]))
      out[shape] = (pooled[:len(better)], pooled[len(better):])
    return dataclasses.replace(self, by_shape=out)

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
    return dataclasses.replace(self, by_shape=out, top=None)


@dataclasses.dataclass(frozen=True)
class Counts:
  """Per stratum (a model shape and rate), whether each run of `worse` and of `better` failed."""
  by_stratum: dict  # stratum -> (worse_failed_R, better_failed_R), bool arrays

  def table(self):
    return [(int(w.sum()), len(w), int(b.sum()), len(b)) for w, b in self.by_stratum.values()]

  def nulls(self, claim) -> list:
    return [self._pooled]

  def _pooled(self, claim, rng) -> "Counts":
    """Each stratum's runs reassigned to the arms at random."""
    out = {}
    for stratum, (worse, better) in self.by_stratum.items():
      pooled = rng.permutation(np.concatenate([worse, better]))
      out[stratum] = (pooled[:len(worse)], pooled[len(worse):])
    return Counts(out)

  def alternative(self, claim, rng) -> "Counts":
    """The claim's (worse's, better's) failure rates in every stratum where some run failed and
    some did not; a stratum where all failed, or none did, stays as it is."""
    worse_rate, better_rate = claim.power_at
    out = {}
    for stratum, (worse, better) in self.by_stratum.items():
      runs = np.concatenate([worse, better])
      out[stratum] = ((rng.random(len(worse)) < worse_rate, rng.random(len(better)) < better_rate)
                      if 0 < runs.sum() < len(runs) else (worse, better))
    return Counts(out)


@dataclasses.dataclass(frozen=True)
class Rate:
  """One arm's runs at one rate: whether each failed; `never_rate` the protocol's threshold."""
  failed_R: np.ndarray
  never_rate: float

  def nulls(self, claim) -> list:
    """Runs that never fail (a seed rate above 0: no instability at this recipe), or that fail
    at `never_rate` (a seed rate of 0)."""
    rate = 0.0 if claim.seed_rate > 0 else self.never_rate
    return [lambda claim, rng: Rate(rng.random(len(self.failed_R)) < rate, self.never_rate)]

  def alternative(self, claim, rng) -> "Rate":
    return Rate(rng.random(len(self.failed_R)) < claim.power_at, self.never_rate)


def sample(claim, protocol, measures):
  """The data `claim` is judged on, or a string saying what is missing."""
  if claim.metric in growth_curves.METRICS:
    return measures.curves(claim, protocol)
  if claim.metric in ladder.METRICS:
    return measures.sample(claim, protocol)
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
    top = -math.log10(max(measures.lrs)) if claim.metric == "max_stable_lr" else None
    return Shifts(by_shape, -gap if claim.matches else gap, top) if by_shape else "every shape run"
  if claim.metric == "failure_rate":
    found = [p.failed for shape in measures.shapes for p in measures.of(claim.arm, shape, claim.lr)]
    never = next((t.value for t in protocol.thresholds if t.name == "never_rate"), math.nan)
    return Rate(np.array(found, bool), never) if found else f"runs of {claim.arm} at lr {claim.lr:g}"
  rates = measures.lrs if claim.metric == "divergences" else [claim.lr]
  failed = (lambda p: p.outcome == "diverged") if claim.metric == "divergences" else (lambda p: p.failed)
  by_stratum = {}
  for shape in measures.shapes:
    for lr in rates:
      worse = [failed(p) for p in measures.of(claim.worse, shape, lr)]
      better = [failed(p) for p in measures.of(claim.better, shape, lr)]
      if worse and better:
        by_stratum[shape, lr] = (np.array(worse, bool), np.array(better, bool))
  return Counts(by_stratum) if by_stratum else "runs of both arms at a common rate"


def decide(claim, protocol, data, family=()) -> Verdict:
  """The verdict on `data` (a Sample); `family`: the p-values of the protocol's other
  `fails_more` claims, each way, for Holm's adjustment."""
  if isinstance(data, str):
    return Verdict(claim, NOT_TESTABLE, (), None, data)
  if isinstance(data, Shifts):
    return _decide_shifts(claim, protocol, data)
  if isinstance(data, Rate):
    return _decide_rate(claim, protocol, data)
  if isinstance(data, growth_curves.Curves):
    return growth_curves.decide(claim, protocol, data)
  if isinstance(data, (ladder.Separation, ladder.Trend)):
    return ladder.decide(claim, protocol, data)
  return _decide_counts(claim, protocol, data, family)


def _decide_shifts(claim, protocol, data: Shifts) -> Verdict:
  margin = data.margin
  unit = "decades" if claim.metric == "max_stable_lr" else "nats"
  what = effect_what(claim.metric)
  effects, held, against, notes = [], [], [], []
  alpha = (1 - protocol.interval) / 2
  for shape, (better, worse) in data.by_shape.items():
    n = min(len(better), len(worse))
    if claim.method == PERMUTATION:
      mean = float(worse.mean() - better.mean())
      p_for, p_against = exact.shift_p(better, worse, margin), exact.shift_p(worse, better, -margin)
      effects.append(Effect(shape, mean, math.nan, math.nan, n, what))
      # a seed stable at the top rate may be stable higher: `better`'s lead, or `worse`'s, is a floor
      held.append(p_for < alpha and not _at_top(worse, data.top))
      against.append(p_against < alpha and not _at_top(better, data.top))
      notes.append(f"{shape}: p = {p_for:.3g} above {margin:g}, {p_against:.3g} below")
      if exact.smallest_shift_p(len(better), len(worse)) >= alpha:
        notes.append(f"no permutation test of {len(better)} and {len(worse)} seeds reaches {alpha:g}")
      continue
    mean, low, high = intervals.difference(better, worse, protocol, np.random.default_rng(protocol.bootstrap_seed))
    effects.append(Effect(shape, mean, low, high, n, what))
    tolerance = ROUNDING * max(1.0, abs(margin))
    held.append(low > margin + tolerance), against.append(high < margin - tolerance)
  verdict = reading(all(held), any(against))
  method = ("exact permutation tests at " + f"{alpha:g} each way: " + "; ".join(notes)
            if claim.method == PERMUTATION else
            f"{protocol.interval:.0%} {protocol.interval_method} intervals against {margin:g} {unit}")
  return Verdict(claim, verdict, tuple(effects), None, method)


def _at_top(values, top) -> bool:
  """Whether a seed's maximum stable rate is the sweep's top rate (censored: it may be higher)."""
  return top is not None and bool(np.any(np.isclose(values, top)))


def _decide_rate(claim, protocol, data: Rate) -> Verdict:
  failed, runs = int(data.failed_R.sum()), len(data.failed_R)
  low, high = exact.rate_interval(failed, runs, protocol.interval)
  effect = Effect(f"lr {claim.lr:g}", failed / runs, low, high, runs, "failure rate [Clopper-Pearson]")
  if claim.seed_rate > 0:
    verdict = reading(low > 0, not low <= claim.seed_rate <= high)
  else:
    verdict = reading(high < data.never_rate, low >= data.never_rate)
  return Verdict(claim, verdict, (effect,), None, f"{failed} of {runs} failed; the seed's rate {claim.seed_rate:g}"
                 + ("" if claim.seed_rate > 0 else f", counted as none below {data.never_rate:g}"))


def _decide_counts(claim, protocol, data: Counts, family) -> Verdict:
  table = data.table()
  counts = tuple(sum(t[i] for t in table) for i in (2, 3, 0, 1))  # better's failed and runs, then worse's
  p_for, p_against = raw_ps(data)
  how = (f"exact stratified test over {len(table)} strata" if len(table) > 1 else "one-sided Fisher's exact tests")
  if family:
    p_for, p_against = _holm_of(p_for, p_against, family)
    how += f", Holm-adjusted over {len(family) + 1} claims"
  level = protocol.threshold("failure_p")
  if all(t[0] + t[2] in (0, t[1] + t[3]) for t in table):
    how += "; every run of both arms failed, or none did, wherever both ran: no test can decide"
  verdict = reading(p_for < level, p_against < level)
  return Verdict(claim, verdict, (), counts, f"{how}: p = {p_for:.3g} that {claim.worse} fails more, "
                                             f"{p_against:.3g} less; level {level:g}")


def _holm_of(p_for, p_against, family):
  """This claim's p-values each way, adjusted with its family's (a list of (p_for, p_against))."""
  adjusted_for = exact.holm([p_for, *(f for f, _ in family)])[0]
  adjusted_against = exact.holm([p_against, *(a for _, a in family)])[0]
  return adjusted_for, adjusted_against


def raw_ps(data: Counts) -> tuple[float, float]:
  """The unadjusted one-sided p-values that `worse` fails more, and less, within strata."""
  table = data.table()
  return exact.stratified_p(table), exact.stratified_p([(fb, rb, fw, rw) for fw, rw, fb, rb in table])


def judge_all(protocol, measures) -> list[Verdict]:
  """The protocol's verdicts: its three-way claims here, any other by `measures.verdict`."""
  samples = {c.id: sample(c, protocol, measures) for c in protocol.claims if c.metric in METRICS}
  ps = {c.id: raw_ps(samples[c.id]) for c in protocol.claims
        if c.metric == "fails_more" and isinstance(samples[c.id], Counts)}
  verdicts = []
  for claim in protocol.claims:
    if claim.metric not in METRICS:
      verdicts.append(measures.verdict(claim, protocol))
      continue
    family = [p for other, p in ps.items() if other != claim.id] if claim.id in ps else ()
    verdicts.append(partly_run(decide(claim, protocol, samples[claim.id], family), measures.missing))
  return [_given(v, verdicts) for v in verdicts]


def _given(found: Verdict, verdicts: list) -> Verdict:
  """A claim whose `given` claim is not reproduced is at most inconclusive (a lead that is not
  shown cannot be shown to hold)."""
  given = found.claim.given and next(v for v in verdicts if v.claim.id == found.claim.given)
  if not given or given.verdict == REPRODUCED or found.verdict != REPRODUCED:
    return found
  return dataclasses.replace(found, verdict=INCONCLUSIVE, would_change=f"{found.would_change}; at most inconclusive "
                             f"while `{given.claim.id}` is {given.verdict}")


def operating(claim, protocol, measures, seed: int) -> tuple[float, float] | str | None:
  """(false-positive rate, power) of the claim's test: the largest share of DRAWS samples called
  reproduced under its nulls (`Sample.nulls`), and the share with the effect at
  `claim.power_at` (`Sample.alternative`); None where the claim has no data or no stated
  effect; why not, where seeds that agree exactly leave the draws nothing to spread. A
  fails_more claim is judged with its Holm family at their worst (every other p 1)."""
  data = sample(claim, protocol, measures)
  if isinstance(data, str) or claim.power_at is None:
    return None
  if isinstance(data, Shifts):
    still = [shape for shape, arms in data.by_shape.items() if all(np.ptp(seeds) == 0 for seeds in arms)]
    if still:  # its draws would have no spread there: every draw one value, the test's power forced
      return f"not estimable: every seed of both arms at one value ({', '.join(still)})"
  family = [(1.0, 1.0)] * (sum(c.metric == "fails_more" for c in protocol.claims) - 1) \
      if claim.metric == "fails_more" else ()
  rng = np.random.default_rng(seed)

  def share(draw):
    return float(np.mean([decide(claim, protocol, draw(claim, rng), family).verdict == REPRODUCED
                          for _ in range(DRAWS)]))
  return max(share(null) for null in data.nulls(claim)), share(data.alternative)
