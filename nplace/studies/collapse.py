"""Study B's measurements per arm and seed, and the claims a protocol can make about them.

From a trial's committed results (nplace/studies/results.py): its train loss on the plateau
(the mean over the last quarter, `outcomes.plateau_gap`) against the frequency loss; its probes
at every probed step -- token similarity per block (raw and centered), the residual gradient
per block (grad_h) and the norm backward factor per norm site. A claim holds when it holds in
every seed of its arm.

Metrics (a claim's `better` and `worse` name the same arm):
  collapses / escapes    the plateau within / farther than `collapse_margin` of the frequency loss
  similarity_rises       the top block's similarity at the first probe (init) exceeds block 1's
  similarity_centered_rises   by more than `min_similarity_rise`
  gradient_starves       |dL/dh_1| / |dL/dh_L| falls below `max_gradient_ratio` at some probe
  gradient_kept          ... stays at or above it at every probe
  backward_below_one     the mean backward factor over the norm sites after the first (the
                         first reads the embedding) is below 1 at every probe after init
"""
import math

import numpy as np

from nplace.studies import outcomes, protocol as protocol_lib

SEED = "seed"
# The norm on the residual path (post) or on the branch input (pre: norm, peri: norm_in).
BACKWARD = ("norm_backward", "norm_in_backward")
METRICS = ("collapses", "escapes", "similarity_rises", "similarity_centered_rises", "gradient_starves",
           "gradient_kept", "backward_below_one")


def _series(trial, name):
  """(steps, values[probe, site]) of a filed probe, or None."""
  probe = trial.probes.get(name)
  if not probe or not probe["steps"]:
    return None
  return np.asarray(probe["steps"]), np.asarray(probe["values"], np.float64)


def plateau_gap(trial) -> float:
  """Mean train loss over the last quarter minus the frequency loss (NaN without either)."""
  freq = trial.summary.frequency_loss
  gap = outcomes.plateau_gap(trial.loss, freq) if freq is not None else None
  return math.nan if gap is None else gap


def similarity_rise(trial, name="similarity") -> float:
  """The top block's value minus block 1's at the first probe (init)."""
  found = _series(trial, name)
  return math.nan if found is None else float(found[1][0, -1] - found[1][0, 0])


def bottom_over_top(grad_h_PL) -> np.ndarray:
  """|dL/dh_1| / |dL/dh_L| per probe, from the grad_h probe's [probe, block] values."""
  grad_h_PL = np.asarray(grad_h_PL, np.float64)
  return grad_h_PL[:, 0] / grad_h_PL[:, -1]


def gradient_ratios(trial):
  """(steps, |dL/dh_1| / |dL/dh_L| at each probe), or None."""
  found = _series(trial, "grad_h")
  return None if found is None else (found[0], bottom_over_top(found[1]))


def backward_factors(trial):
  """(steps, mean factor over the norm sites after the first, at each probe), or None."""
  found = next((f for f in (_series(trial, name) for name in BACKWARD) if f is not None), None)
  return None if found is None else (found[0], found[1][:, 1:].mean(axis=1))


class Measures:
  """A collapse grid's trials by arm (ARMS: label -> model overrides) and seed."""

  def __init__(self, protocol, arms: dict, trials):
    self.protocol, self.by_arm = protocol, {}
    for trial in trials:
      arm = protocol_lib.arm_of(arms, trial.overrides)
      if arm is not None:
        self.by_arm.setdefault(arm, []).append(trial)
    self.arms = [a for a in arms if a in self.by_arm]
    self.seeds = sorted({t.overrides.get(SEED) for ts in self.by_arm.values() for t in ts}, key=str)

  def per_seed(self, metric: str, arm: str) -> tuple[list[float], list[bool], str]:
    """(value per seed, held per seed, what the value is) of `metric` for `arm`."""
    margin = self.protocol.threshold("collapse_margin")
    trials = self.by_arm.get(arm, [])
    if metric in ("collapses", "escapes"):
      gaps = [plateau_gap(t) for t in trials]
      held = [abs(g) <= margin if metric == "collapses" else g < -margin for g in gaps]
      return gaps, held, "plateau − frequency loss, nats"
    if metric in ("similarity_rises", "similarity_centered_rises"):
      rise = self.protocol.threshold("min_similarity_rise")
      name = "similarity" if metric == "similarity_rises" else "similarity_centered"
      values = [similarity_rise(t, name) for t in trials]
      return values, [v > rise for v in values], f"{name} at init, top block − block 1"
    if metric in ("gradient_starves", "gradient_kept"):
      limit = self.protocol.threshold("max_gradient_ratio")
      ratios = [gradient_ratios(t) for t in trials]
      values = [math.nan if r is None else float(r[1].min()) for r in ratios]
      held = [v < limit if metric == "gradient_starves" else v >= limit for v in values]
      return values, held, "smallest |dL/dh_1| / |dL/dh_L| over the probes"
    if metric == "backward_below_one":
      found = [backward_factors(t) for t in trials]
      values = [math.nan if f is None or len(f[0]) < 2 else float(f[1][1:].max()) for f in found]
      return values, [v < 1 for v in values], "largest mean backward factor after init"
    raise ValueError(f"collapse metric {metric!r}: expected one of {', '.join(METRICS)}")

  def verdict(self, claim, protocol) -> protocol_lib.Verdict:
    values, held, what = self.per_seed(claim.metric, claim.worse)
    if not values or any(math.isnan(v) for v in values):
      return protocol_lib.Verdict(claim, protocol_lib.NOT_TESTABLE, (), None,
                                  "every seed of the arm run and probed")
    if claim.metric.startswith("gradient"):  # ratios over orders of magnitude: shown as log10
      values, what = np.log10(values), f"log10 of the {what}"
    effect = protocol_lib.Effect(f"{len(values)} seeds", float(np.mean(values)), float(np.min(values)),
                                 float(np.max(values)), len(values), f"{what}, mean [min, max]")
    verdict = protocol_lib.REPRODUCED if all(held) else protocol_lib.NOT_REPRODUCED
    change = ("one seed the other way" if verdict == protocol_lib.REPRODUCED else
              f"{sum(held)} of {len(held)} seeds hold it: every seed")
    return protocol_lib.Verdict(claim, verdict, (effect,), None, change)
