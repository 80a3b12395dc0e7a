"""A study's pre-registered protocol: the claims it tests, the metric of each, the thresholds,
the seeds and what verdict each outcome gives -- declared in the grid file next to the grid,
with a version. A rule changed after results exist is a new version, declared beside the old.

`judge` turns a grid's measurements (nplace/studies/lr_sensitivity.py's `Measures`) into one
`Verdict` per claim; `sensitivity` judges again with each threshold halved and doubled.

Intervals (`interval_method`): version 1 protocols use a percentile bootstrap over seeds. With
3 seeds its "95%" interval is the seeds' [min, max] (all three draws land on the minimum with
probability 1/27 > 2.5%), about 75-80% coverage. Later versions use Welch's t-interval, whose
coverage is the stated one for normal per-seed values at any number of seeds.
"""
import dataclasses

import numpy as np
from scipy import stats

BOOTSTRAP, WELCH_T = "bootstrap", "welch_t"

REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE = "reproduced", "not reproduced", "not testable at this tier"
SEED_CLAIM, FINDING = "seed", "finding"


@dataclasses.dataclass(frozen=True)
class Threshold:
  name: str
  value: float
  doc: str
  bound: float | None = None  # the value no measure can pass (a similarity's 1): varied by its distance to it

  def scaled(self, factor: float) -> "Threshold":
    """Halving or doubling a bounded threshold's value could push it past the bound, where it
    changes verdicts trivially; its distance to the bound is what is halved or doubled instead."""
    value = self.value * factor if self.bound is None else self.bound - (self.bound - self.value) * factor
    return dataclasses.replace(self, value=value)


@dataclasses.dataclass(frozen=True)
class Claim:
  """`better` has the lower metric than `worse` in every model shape of the grid, by more than
  the protocol's `min_effect` at the whole confidence interval over seeds. With `matches`,
  `better` only has to be no worse than `worse` by `min_effect` (the interval's top).
  `divergences` is counted over every run of the arm instead: `better` diverged less often."""
  id: str
  statement: str
  metric: str  # lr_sensitivity | best_loss | final_loss | divergences, or one its grid's Measures judges
  better: str  # arm labels of the grid
  worse: str
  matches: bool = False
  source: str = SEED_CLAIM  # SEED_CLAIM: what the reproduced paper says; FINDING: this project's own


@dataclasses.dataclass(frozen=True)
class Protocol:
  name: str
  version: int
  summary: str
  seeds: int
  bootstrap_resamples: int
  bootstrap_seed: int
  interval: float  # the confidence level of every interval
  thresholds: tuple[Threshold, ...]
  claims: tuple[Claim, ...]
  interval_method: str = BOOTSTRAP  # BOOTSTRAP | WELCH_T (module doc)
  outcome_rules: int = 1  # nplace/studies/outcomes.py: which definition of a run's outcome
  horizons: tuple[float, ...] = (1.0,)  # fractions of the run at which every verdict is judged
  arms: dict | None = None  # label -> overrides; None: the grid module's ARMS

  def threshold(self, name: str) -> float:
    return next(t.value for t in self.thresholds if t.name == name)

  def scaled(self, name: str, factor: float) -> "Protocol":
    """This protocol with one threshold scaled by `factor` (`Threshold.scaled`; for the sensitivity table)."""
    return dataclasses.replace(self, thresholds=tuple(
        t.scaled(factor) if t.name == name else t for t in self.thresholds))


@dataclasses.dataclass(frozen=True)
class Effect:
  """What a claim is judged on in one model shape; by default `worse` minus `better` (so
  positive supports the claim). `low`/`high` NaN: no interval."""
  shape: str
  mean: float
  low: float
  high: float
  seeds: int
  what: str = "worse − better, nats"


@dataclasses.dataclass(frozen=True)
class Verdict:
  claim: Claim
  verdict: str
  effects: tuple[Effect, ...]  # per shape; () for divergence counts
  counts: tuple[int, int] | None  # (better, worse) divergences, for `divergences`
  would_change: str


def arm_of(arms: dict, overrides: dict) -> str | None:
  """The label of the arm (label -> model overrides) whose every key the trial's overrides
  match; of several, the one that names the most keys (an arm that adds one key to another,
  as study B's matched control adds its init scale to Post-LN, is its own)."""
  matching = [(len(model), label) for label, model in arms.items()
              if all(overrides.get(key) == value for key, value in model.items())]
  return max(matching, key=lambda m: m[0])[1] if matching else None


def _resampled_means(values_S, protocol: Protocol, rng) -> np.ndarray:
  values_S = np.asarray(values_S, float)
  return values_S[rng.integers(0, len(values_S), (protocol.bootstrap_resamples, len(values_S)))].mean(axis=1)


def bounds(means_R, protocol: Protocol) -> tuple[float, float]:
  """The protocol's percentile interval of resampled statistics."""
  tail = (1 - protocol.interval) / 2 * 100
  low, high = np.percentile(means_R, [tail, 100 - tail])
  return float(low), float(high)


def _t_bounds(mean: float, variance_of_mean: float, dof: float, protocol: Protocol) -> tuple[float, float]:
  if not variance_of_mean > 0:  # every seed alike (or one seed): no spread to widen by
    return (mean, mean) if variance_of_mean == 0 else (np.nan, np.nan)
  half = stats.t.ppf(1 - (1 - protocol.interval) / 2, dof) * np.sqrt(variance_of_mean)
  return float(mean - half), float(mean + half)


def mean_interval(values_S, protocol: Protocol, rng) -> tuple[float, float, float]:
  """Mean over seeds and its interval (the protocol's method)."""
  values_S = np.asarray(values_S, float)
  mean = float(np.mean(values_S))
  if protocol.interval_method == WELCH_T:
    n = len(values_S)
    return (mean, *_t_bounds(mean, np.var(values_S, ddof=1) / n if n > 1 else np.nan, n - 1, protocol))
  return (mean, *bounds(_resampled_means(values_S, protocol, rng), protocol))


def interval(better_S, worse_S, protocol: Protocol, rng) -> tuple[float, float, float]:
  """Mean of worse - better and its interval: the bootstrap resamples each arm's seeds; Welch's
  t-interval takes each arm's variance and the Welch-Satterthwaite degrees of freedom."""
  better_S, worse_S = np.asarray(better_S, float), np.asarray(worse_S, float)
  mean = float(np.mean(worse_S) - np.mean(better_S))
  if protocol.interval_method == WELCH_T:
    if min(len(better_S), len(worse_S)) < 2:
      return mean, np.nan, np.nan
    v_b, v_w = np.var(better_S, ddof=1) / len(better_S), np.var(worse_S, ddof=1) / len(worse_S)
    total = v_b + v_w
    dof = total ** 2 / (v_b ** 2 / (len(better_S) - 1) + v_w ** 2 / (len(worse_S) - 1)) if total > 0 else 1
    return (mean, *_t_bounds(mean, total, dof, protocol))
  diff_R = _resampled_means(worse_S, protocol, rng) - _resampled_means(better_S, protocol, rng)
  return (mean, *bounds(diff_R, protocol))


COMPARED = ("lr_sensitivity", "best_loss", "final_loss", "max_stable_lr")  # per-seed values compared between arms
# The threshold a compared metric's interval must clear, and its unit (max_stable_lr is per seed
# -log10 of the rate, so worse - better is how many decades higher `better` still learns).
MIN_EFFECT = {"max_stable_lr": ("min_lr_gap", "decades")}


def _divergence_verdict(claim, protocol, measures) -> Verdict:
  """Diverged-run counts over the grid. With `failure_p` declared (protocol 2): Fisher's exact
  test, one-sided, that `worse` diverges more often; else (protocol 1) the raw counts."""
  (b, b_runs), (w, w_runs) = measures.divergences(claim.better), measures.divergences(claim.worse)
  if not b_runs or not w_runs:
    return Verdict(claim, NOT_TESTABLE, (), (b, w), "runs of both arms")
  if b == w == 0:
    return Verdict(claim, NOT_TESTABLE, (), (b, w), "a tier at which some run diverges (no run of either arm did)")
  if not any(t.name == "failure_p" for t in protocol.thresholds):
    return Verdict(claim, REPRODUCED if w > b else NOT_REPRODUCED, (), (b, w),
                   "more seeds: counts this small move with one run")
  p = float(stats.fisher_exact([[w, w_runs - w], [b, b_runs - b]], alternative="greater").pvalue)
  held = p < protocol.threshold("failure_p")
  return Verdict(claim, REPRODUCED if held else NOT_REPRODUCED, (), (b, w),
                 f"one-sided Fisher's exact p = {p:.3g} over {w_runs} and {b_runs} runs; "
                 f"{'a p at or above' if held else 'a p below'} {protocol.threshold('failure_p'):g}")


def judge(protocol: Protocol, measures) -> list[Verdict]:
  """One verdict per claim. `measures`: per_seed(metric, arm, shape) -> [value per seed] (None
  where a seed lacks a learning rate), shapes, divergences(arm) -> (count, runs); a claim
  with another metric is judged by `measures.verdict(claim, protocol)`."""
  rng = np.random.default_rng(protocol.bootstrap_seed)
  verdicts = []
  for claim in protocol.claims:
    if claim.metric not in COMPARED + ("divergences",):
      verdicts.append(measures.verdict(claim, protocol))
      continue
    verdicts.append(partly_run(judge_one(claim, protocol, measures, rng), getattr(measures, "missing", {})))
  return verdicts


def partly_run(verdict: Verdict, missing: dict) -> Verdict:
  """A grid run in part (`missing`: where -> trials not yet filed) is not testable yet; the
  verdict says what its finished part shows."""
  if not missing:
    return verdict
  return dataclasses.replace(verdict, verdict=NOT_TESTABLE, would_change=f"the grid's remaining trials: "
                             f"{not_filed(missing)}; on the finished ones: {verdict.verdict}")


def not_filed(missing: dict) -> str:
  """`depth 12, width 32 (50 trials), ...`: where each of a grid's unfiled trials belongs."""
  return ", ".join(f"{where} ({n} trials)" for where, n in missing.items())


def judge_one(claim: Claim, protocol: Protocol, measures, rng) -> Verdict:
  """`judge`'s verdict on one claim of a compared metric or of divergence counts."""
  if claim.metric == "divergences":
    return _divergence_verdict(claim, protocol, measures)
  threshold, unit = MIN_EFFECT.get(claim.metric, ("min_effect", "nats"))
  min_effect = protocol.threshold(threshold)
  effects, complete = [], True
  for shape in measures.shapes:
    better = measures.per_seed(claim.metric, claim.better, shape)
    worse = measures.per_seed(claim.metric, claim.worse, shape)
    if not better or not worse or None in better or None in worse or min(len(better), len(worse)) < protocol.seeds:
      complete = False
      continue
    what = {"nats": Effect.what}.get(unit, f"worse − better, {unit}")
    effects.append(Effect(shape, *interval(better, worse, protocol, rng), min(len(better), len(worse)), what))
  if not complete or not effects:
    return Verdict(claim, NOT_TESTABLE, tuple(effects), None,
                   "every shape run at every learning rate and seed"
                   + (" (a seed that learned at no rate has no maximum stable rate)"
                      if claim.metric == "max_stable_lr" else ""))
  if claim.matches:  # better may be worse by less than min_effect: worse - better > -min_effect
    held = [e.low > -min_effect for e in effects]
  else:
    held = [e.low > min_effect for e in effects]
  verdict = REPRODUCED if all(held) else NOT_REPRODUCED
  width = max(e.high - e.low for e in effects)
  change = (f"an interval crossing {'-' if claim.matches else ''}{min_effect:g} in any shape "
            if verdict == REPRODUCED else
            f"intervals clear of {'-' if claim.matches else ''}{min_effect:g} in every shape ")
  return Verdict(claim, verdict, tuple(effects), None,
                 change + f"(widest interval now {width:.2f} {unit}, {effects[0].seeds} seeds)")


def sensitivity(protocol: Protocol, measures_for) -> list[tuple[str, float, list[str]]]:
  """For each threshold at half, its value and double (`Threshold.scaled`): (threshold, value,
  [verdict per claim]).
  `measures_for(protocol)` measures the grid under a protocol (outcomes depend on thresholds)."""
  rows = []
  for t in protocol.thresholds:
    for factor in (0.5, 1.0, 2.0):
      scaled = protocol.scaled(t.name, factor)
      rows.append((t.name, scaled.threshold(t.name), [v.verdict for v in judge(scaled, measures_for(scaled))]))
  return rows
