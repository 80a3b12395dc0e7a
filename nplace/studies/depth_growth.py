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

from nplace.studies import fits, protocol as protocol_lib

DEPTH, WEIGHT_DECAY = "model.n_layer", "optim.weight_decay"
QUANTITIES = {"mean_abs": "mean |h|", "var_entry": "entry-wise variance", "var_data": "data-wise variance"}
METRICS = ("exponential_over_linear", "power_at_most_one", "lower_at_every_depth", "slope_rises",
           "variance_power_at_most_two")


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
      arm = protocol_lib.arm_of(arms, trial.overrides)
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

  def verdict(self, claim, protocol) -> protocol_lib.Verdict:
    effects, held = [], []
    for shape in self.shapes:
      depths, values = self.top(claim.worse, shape)
      if claim.metric == "lower_at_every_depth":
        d_better, v_better = self.top(claim.better, shape)
        if len(depths) < 2 or list(depths) != list(d_better):
          return self._untestable(claim, effects)
        ratio = float(np.max(v_better / values))
        effects.append(protocol_lib.Effect(shape, ratio, math.nan, math.nan, 1, "largest ratio over depths"))
        held.append(ratio < 1)
        continue
      p, low, high = power_fit(depths, values, protocol.interval)
      if math.isnan(p):
        return self._untestable(claim, effects)
      if claim.metric == "power_at_most_one":
        effects.append(protocol_lib.Effect(shape, p, low, high, 1, "exponent p of D^p"))
        held.append(high <= 1 + 1e-9)  # exactly linear data fits p = 1 to rounding
      else:  # exponential_over_linear
        gap = fits.exponential(depths, values) - fits.linear(depths, values)
        effects.append(protocol_lib.Effect(shape, gap, math.nan, math.nan, 1, "R² exponential − linear"))
        held.append(gap > protocol.threshold("min_r2_gap"))
    verdict = protocol_lib.REPRODUCED if all(held) else protocol_lib.NOT_REPRODUCED
    return protocol_lib.Verdict(claim, verdict, tuple(effects), None,
                                "seeds per depth, more depths, longer training (one seed here)")

  @staticmethod
  def _untestable(claim, effects):
    return protocol_lib.Verdict(claim, protocol_lib.NOT_TESTABLE, tuple(effects), None,
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
