"""Growth over depth of trained models (study A's O(D) vs O(e^D)): per arm, depth and seed, the
top layer's growth above init (the value at the horizon's probe minus at init) and its level,
fitted per seed over the depths and compared over the seeds (experiments/growth.py, the rules
under PROTOCOL). Its three-way claims read `curves`, judged in nplace/studies/three_way.py by
nplace/studies/growth_curves.py; the level's exponents over depth are described, not judged.
"""
import math

import numpy as np

from nplace.studies import growth_curves, intervals, results

DEPTH = "model.n_layer"
QUANTITIES = {"mean_abs": "mean |h|", "var_entry": "entry-wise variance", "var_data": "data-wise variance"}
# The exponent p of D^p that an output-normed stream's level cannot exceed, by construction: with
# rms(h_L) <= rms(h_0) + 2 dt D times the norms' scale, the mean |h| (at most the rms) is O(D)
# and the entry-wise variance (at most the mean square) O(D^2).
BOUND_EXPONENT = {"mean_abs": 1.0, "var_entry": 2.0}
FLOAT16_MAX = 65504.0  # float16's largest finite value (bfloat16's is 3.4e38)


class SeedMeasures:
  """A growth grid's trials by arm, depth and seed. `expected`: the grid's trials' overrides, so
  that a grid run in part (any arm's trial not filed) leaves every rate claim not testable."""

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
    self.depths = sorted({depth for points in self.points.values() for depth, _ in points})
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

  def level(self, arm, seed, quantity="mean_abs") -> tuple[list, list] | None:
    """(depths, the top layer's `quantity` at the horizon) of one seed; None if a depth is missing."""
    values = [self.top(arm, d, seed, quantity) for d in self.depths]
    return None if None in values else (self.depths, values)

  def curves(self, claim, protocol) -> "growth_curves.Curves | str":
    """A three-way claim's per-seed growth above init over every depth, or what is missing."""
    found = [self.growth(claim.arm, seed) for seed in self.seeds]
    if self.missing or len(found) < protocol.seeds or None in found:
      left = "; ".join(f"{arm}: {n} trials not filed" for arm, n in self.missing.items())
      return left or f"every depth with all {protocol.seeds} seeds"
    return growth_curves.Curves(tuple(self.depths), np.array([values for _, values in found], float),
                                protocol.threshold("min_rate"))

  def rates(self, arm) -> list[float]:
    """Each seed's rate r̂ of its growth above init (growth_curves.fitted_rates); NaN for a seed
    missing a depth."""
    found = [self.growth(arm, seed) for seed in self.seeds]
    return [math.nan if f is None else float(growth_curves.fitted_rates(f[0], [f[1]])[0]) for f in found]

  def exponents(self, arm, quantity="mean_abs") -> list[float]:
    """Each seed's exponent p of the top layer's `quantity` at the horizon as a D^p
    (growth_curves.level_powers); NaN for a seed missing a depth."""
    found = [self.level(arm, seed, quantity) for seed in self.seeds]
    return [math.nan if f is None else float(growth_curves.level_powers(f[0], [f[1]])[0]) for f in found]

  def exponent(self, arm, quantity="mean_abs") -> tuple[float, float, float]:
    """The seeds' mean exponent of `quantity`'s D^p and its interval (the protocol's method);
    NaNs unless every seed has one."""
    values = self.exponents(arm, quantity)
    if len(values) < self.protocol.seeds or not np.all(np.isfinite(values)):
      return math.nan, math.nan, math.nan
    return intervals.mean_interval(values, self.protocol, np.random.default_rng(self.protocol.bootstrap_seed))
