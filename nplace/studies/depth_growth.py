"""Growth over depth of trained models (study A's O(D) vs O(e^D)): a quantity of the top layer
(mean |h| by default) at the end of training, against the depth D of models trained on the
same tokens, per arm and weight decay; and the claims about it a protocol can make.

Fits over the depths (nplace/studies/fits.py for linear and exponential R²): the power law
`y = a D^p` (least squares on log y against log D) gives the growth exponent p with its
t-interval over the depths (n - 2 degrees of freedom): p <= 1 is at most linear growth.
"""
import math

import numpy as np
from scipy import stats

from nplace.studies import fits, growth_curves, intervals, results
from nplace.studies.verdict import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Effect, Verdict

DEPTH, WEIGHT_DECAY = "model.n_layer", "optim.weight_decay"
QUANTITIES = {"mean_abs": "mean |h|", "var_entry": "entry-wise variance", "var_data": "data-wise variance"}
METRICS = ("exponential_over_linear", "power_at_most", "lower_at_every_depth", "slope_rises",
           "variance_power_at_most")


def power_fit(depths, values, interval: float) -> tuple[float, float, float]:
  """(p, low, high) of values ~ a D^p; NaNs with fewer than 3 depths or a value <= 0."""
  x, y = np.log(np.asarray(depths, float)), np.asarray(values, float)
  if len(x) < 3 or not np.all(y > 0):
    return math.nan, math.nan, math.nan
  y = np.log(y)
  p, a = np.polyfit(x, y, 1)
  residual = y - (a + p * x)
  se = math.sqrt(np.sum(residual ** 2) / (len(x) - 2) / np.sum((x - x.mean()) ** 2))
  half = stats.t.ppf(0.5 + interval / 2, len(x) - 2) * se
  return float(p), float(p - half), float(p + half)


class Measures:
  """A growth grid's trials by arm (ARMS: label -> model overrides) and weight decay (the
  "shapes" a claim must hold in), each with its probed top-layer values."""

  def __init__(self, protocol, arms: dict, trials):
    self.protocol, self.points = protocol, {}  # (arm, shape) -> {depth: trial}
    for trial in trials:
      arm = results.arm_of(arms, trial.overrides)
      if arm is not None and DEPTH in trial.overrides:
        shape = f"weight decay {trial.overrides.get(WEIGHT_DECAY, 'as configured')}"
        self.points.setdefault((arm, shape), {})[int(trial.overrides[DEPTH])] = trial
    self.arms = [a for a in arms if any(k[0] == a for k in self.points)]
    self.shapes = list(dict.fromkeys(shape for _, shape in self.points))
    self.seeds = [None]

  def top(self, arm, shape, quantity="mean_abs", when=-1) -> tuple[np.ndarray, np.ndarray]:
    """(depths, the top layer's `quantity` at the first (0) or last (-1) probe), depths ascending."""
    by_depth = self.points.get((arm, shape), {})
    found = [(d, t.probes[quantity]["values"][when][-1]) for d, t in sorted(by_depth.items())
             if quantity in t.probes]
    return np.array([d for d, _ in found]), np.array([v for _, v in found], float)

  def verdict(self, claim, protocol) -> Verdict:
    effects, held = [], []
    for shape in self.shapes:
      if claim.metric == "lower_at_every_depth":
        depths, values = self.top(claim.worse, shape)
        d_better, v_better = self.top(claim.better, shape)
        if len(depths) < 2 or list(depths) != list(d_better):
          return self._untestable(claim, effects)
        ratio = float(np.max(v_better / values))
        effects.append(Effect(shape, ratio, math.nan, math.nan, 1, "largest ratio over depths"))
        held.append(ratio < 1)
        continue
      depths, values = self.top(claim.arm, shape)
      p, low, high = power_fit(depths, values, protocol.interval)
      if math.isnan(p):
        return self._untestable(claim, effects)
      if claim.metric == "power_at_most":
        effects.append(Effect(shape, p, low, high, 1, "exponent p of D^p"))
        held.append(high <= claim.at_most + 1e-9)  # exactly linear data fits p = 1 to rounding
      else:  # exponential_over_linear
        gap = fits.exponential(depths, values) - fits.linear(depths, values)
        effects.append(Effect(shape, gap, math.nan, math.nan, 1, "R² exponential − linear"))
        held.append(gap > protocol.threshold("min_r2_gap"))
    verdict = REPRODUCED if all(held) else NOT_REPRODUCED
    return Verdict(claim, verdict, tuple(effects), None,
                                "seeds per depth, more depths, longer training (one seed here)")

  @staticmethod
  def _untestable(claim, effects):
    return Verdict(claim, NOT_TESTABLE, tuple(effects), None,
                                "every depth trained and probed (>= 3, values > 0)")


def _slope_weights(log_depths) -> np.ndarray:
  """w with w . log y = the least-squares slope of log y against these log depths."""
  centred = log_depths - log_depths.mean()
  return centred / np.sum(centred ** 2)


def _rise_weights(depths) -> np.ndarray:
  """w with w . log y = slope_rise: the deepest three depths' slope minus the shallowest three's."""
  depths = np.asarray(depths, float)
  order, w = np.argsort(depths), np.zeros(len(depths))
  log_depths = np.log(depths)
  w[order[-3:]] += _slope_weights(log_depths[order[-3:]])
  w[order[:3]] -= _slope_weights(log_depths[order[:3]])
  return w


def slope_rise(depths, values) -> float:
  """Protocol 2's test of exponential against power-law growth, both in log-log space: the slope
  of log y against log D over the deepest three depths minus that over the shallowest three. A
  power law a D^p gives 0 at any p; e^{rD} gives r times a positive factor of the depths (~45
  for 3..96). NaN with fewer than 6 depths or a value <= 0."""
  values = np.asarray(values, float)
  if len(values) < 6 or not np.all(values > 0):
    return math.nan
  return float(_rise_weights(depths) @ np.log(values))


def detectable_rate(depths, seeds: int, min_rise: float, log_noise: float, interval: float,
                    power: float = 0.8, draws: int = 20000) -> float:
  """The smallest rate r of exponential growth e^{rD} that `slope_rises` calls exponential with
  probability `power`, when each seed's log growth carries independent N(0, log_noise) noise
  and the t-interval's low end over the seeds must clear `min_rise`. The rise is linear in
  log y, so a seed's rise is r c + w . noise (c the noise-free rise of e^D): the rate each
  draw needs is closed-form, and the answer is their `power` quantile. Draws from seed 0, so
  the same declaration always states the same number."""
  depths = np.asarray(depths, float)
  w = _rise_weights(depths)
  c = float(w @ depths)
  noise_NS = np.random.default_rng(0).normal(0, log_noise, (draws, seeds, len(depths))) @ w
  t = stats.t.ppf(0.5 + interval / 2, seeds - 1)
  low_N = noise_NS.mean(1) - t * noise_NS.std(1, ddof=1) / math.sqrt(seeds)
  return float(np.quantile((min_rise - low_N) / c, power))


FLOAT16_MAX, BFLOAT16_MAX = 65504.0, 3.3895e38  # the largest finite values of the formats


def growth_power(depths, growth) -> float:
  """The least-squares exponent p of growth ~ a D^p (log-log); NaN with fewer than 3 depths or
  a growth <= 0."""
  growth = np.asarray(growth, float)
  if len(growth) < 3 or not np.all(growth > 0):
    return math.nan
  return float(np.polyfit(np.log(np.asarray(depths, float)), np.log(growth), 1)[0])


class SeedMeasures:
  """Protocols 2 and 3's growth grids: per arm, depth and seed, the top layer's growth above init
  (the value at the horizon's probe minus at init) and its level, fitted per seed and compared
  over the seeds (experiments/growth.py, the rules under PROTOCOL and PROTOCOL_V3; protocol 3's
  three-way claims read `curves`, judged in nplace/studies/three_way.py). `expected`: the grid's trials' overrides,
  so that a missing depth or seed leaves a claim not testable."""

  SHAPE = "as configured"  # the claims hold in one setting here: no weight-decay axis

  def __init__(self, protocol, arms: dict, trials, horizon: float = 1.0, expected=()):
    self.protocol, self.horizon = protocol, horizon
    self.points = {}  # arm -> {(depth, seed): trial}
    for trial in trials:
      arm = results.arm_of(arms, trial.overrides)
      if arm is not None and DEPTH in trial.overrides:
        self.points.setdefault(arm, {})[(int(trial.overrides[DEPTH]), trial.overrides.get("seed"))] = trial
    self.arms = [a for a in arms if a in self.points]
    self.shapes = [self.SHAPE]
    self.seeds = sorted({seed for points in self.points.values() for _, seed in points}, key=str)
    self.depths = sorted({depth for points in self.points.values() for depth, _ in points
                          if protocol.depths is None or depth in protocol.depths})
    # The power statement belongs to the design, not to the part of it filed so far.
    self.declared_depths = sorted({int(o[DEPTH]) for o in expected if DEPTH in o}) or self.depths
    self.missing = {}
    for overrides in expected:
      arm = results.arm_of(arms, overrides)
      if arm is not None and (int(overrides[DEPTH]), overrides.get("seed")) not in self.points.get(arm, {}):
        self.missing[arm] = self.missing.get(arm, 0) + 1

  def _probe_index(self, trial, quantity) -> int | None:
    """The index of the probe at this horizon (the last probe at or before it)."""
    steps = trial.probes[quantity]["steps"]
    at = round(self.horizon * max(steps))
    found = [i for i, s in enumerate(steps) if s <= at]
    return found[-1] if found else None

  def top(self, arm, depth, seed, quantity="mean_abs", when=None) -> float | None:
    """The top layer's `quantity` at the horizon's probe (or at probe index `when`)."""
    trial = self.points.get(arm, {}).get((depth, seed))
    if trial is None or quantity not in trial.probes:
      return None
    index = self._probe_index(trial, quantity) if when is None else when
    return None if index is None else float(trial.probes[quantity]["values"][index][-1])

  def growth(self, arm, seed, quantity="mean_abs") -> tuple[list, list] | None:
    """(depths, growth above init) of one seed over every depth of the grid; None if one is missing."""
    values = [(self.top(arm, d, seed, quantity), self.top(arm, d, seed, quantity, when=0)) for d in self.depths]
    if any(end is None or init is None for end, init in values):
      return None
    return self.depths, [end - init for end, init in values]

  def curves(self, claim, protocol) -> "growth_curves.Curves | str":
    """A three-way claim's per-seed curves (growth above init for a rate, else the level at the
    horizon) over every depth, or what is missing."""
    quantity = growth_curves.QUANTITY[claim.metric]
    if claim.metric == growth_curves.RATE:
      found = [self.growth(claim.arm, seed, quantity) for seed in self.seeds]
    else:
      found = [self.level(claim.arm, seed, quantity) for seed in self.seeds]
    if self.missing or len(found) < protocol.seeds or None in found:
      left = "; ".join(f"{arm}: {n} trials not filed" for arm, n in self.missing.items())
      return left or f"every depth with all {protocol.seeds} seeds"
    margin = protocol.threshold("min_rate") if claim.metric == growth_curves.RATE else math.nan
    return growth_curves.Curves(tuple(self.depths), np.array([values for _, values in found], float), margin)

  def level(self, arm, seed, quantity="mean_abs") -> tuple[list, list] | None:
    """(depths, the top layer's `quantity` at the horizon) of one seed; None if a depth is missing."""
    values = [self.top(arm, d, seed, quantity) for d in self.depths]
    return None if None in values else (self.depths, values)

  def per_seed(self, metric, arm) -> list[float]:
    """The per-seed statistic of a claim's metric (NaN for a seed it is not defined for)."""
    quantity = "var_entry" if metric in ("variance_power_at_most", growth_curves.LEVEL_VARIANCE) else "mean_abs"
    values = []
    for seed in self.seeds:
      levels = metric in (growth_curves.LEVEL, growth_curves.LEVEL_VARIANCE)
      found = (self.level if levels else self.growth)(arm, seed, quantity)
      if found is None:
        values.append(math.nan)
      elif metric in growth_curves.METRICS:
        values.append(float(growth_curves.Curves(tuple(found[0]), np.array([found[1]], float)).statistic(metric)[0]))
      elif metric == "slope_rises":
        values.append(slope_rise(*found))
      else:
        values.append(growth_power(*found))
    return values

  def verdict(self, claim, protocol) -> Verdict:
    values = self.per_seed(claim.metric, claim.arm)
    rng = np.random.default_rng(protocol.bootstrap_seed)
    if self.missing or len(values) < protocol.seeds or not np.all(np.isfinite(values)):
      left = "; ".join(f"{arm}: {n} trials not filed" for arm, n in self.missing.items())
      return Verdict(claim, NOT_TESTABLE, (), None,
                                  left or f"every depth with all {protocol.seeds} seeds, growth above init > 0 "
                                          "at every depth")
    mean, low, high = intervals.mean_interval(values, protocol, rng)
    if claim.metric == "slope_rises":
      bound = protocol.threshold("min_slope_rise")
      effect = Effect(self.SHAPE, mean, low, high, len(values), "slope rise, deep − shallow")
      verdict = REPRODUCED if low > bound else NOT_REPRODUCED
      change = f"the interval's low end {'below' if low > bound else 'above'} {bound:g}"
    else:
      bound = claim.at_most
      effect = Effect(self.SHAPE, mean, low, high, len(values), "exponent p of D^p")
      verdict = (REPRODUCED if high <= bound + 1e-9 else  # exact D^bound fits it to rounding
                 NOT_REPRODUCED if low > bound else NOT_TESTABLE)
      change = (f"an interval reaching above {bound:g}" if verdict == REPRODUCED else
                f"an interval reaching {bound:g} or below" if verdict == NOT_REPRODUCED else
                f"more seeds: the interval straddles {bound:g}")
    return Verdict(claim, verdict, (effect,), None, change)
