"""Means over seeds and their intervals, by the protocol's `interval_method`
(nplace/protocol.py): a percentile bootstrap over seeds, or Welch's t-interval."""
import numpy as np
from scipy import stats

from nplace.protocol import WELCH_T


def _resampled_means(values_S, protocol, rng) -> np.ndarray:
  values_S = np.asarray(values_S, float)
  return values_S[rng.integers(0, len(values_S), (protocol.bootstrap_resamples, len(values_S)))].mean(axis=1)


def bounds(means_R, protocol) -> tuple[float, float]:
  """The protocol's percentile interval of resampled statistics."""
  tail = (1 - protocol.interval) / 2 * 100
  low, high = np.percentile(means_R, [tail, 100 - tail])
  return float(low), float(high)


def _t_bounds(mean: float, variance_of_mean: float, dof: float, protocol) -> tuple[float, float]:
  if not variance_of_mean > 0:  # every seed alike (or one seed): no spread to widen by
    return (mean, mean) if variance_of_mean == 0 else (np.nan, np.nan)
  half = stats.t.ppf(1 - (1 - protocol.interval) / 2, dof) * np.sqrt(variance_of_mean)
  return float(mean - half), float(mean + half)


def mean_interval(values_S, protocol, rng) -> tuple[float, float, float]:
  """Mean over seeds and its interval (the protocol's method)."""
  values_S = np.asarray(values_S, float)
  mean = float(np.mean(values_S))
  if protocol.interval_method == WELCH_T:
    n = len(values_S)
    return (mean, *_t_bounds(mean, np.var(values_S, ddof=1) / n if n > 1 else np.nan, n - 1, protocol))
  return (mean, *bounds(_resampled_means(values_S, protocol, rng), protocol))


def difference(better_S, worse_S, protocol, rng) -> tuple[float, float, float]:
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
