"""Exact tests for the quantities a t-interval does not cover: counts of failed runs, and per-seed
values that move in steps (a maximum stable rate on a half-decade grid). Each gives exact
p-values at any number of seeds, so a verdict can say when no test at that size could reach
its level.
"""
import itertools
import math

import numpy as np
from scipy import stats


def rate_interval(failed: int, runs: int, level: float) -> tuple[float, float]:
  """Clopper-Pearson's exact interval of a failure rate: every rate the observed count does not
  reject at (1 - level) / 2 on either side."""
  ci = stats.binomtest(failed, runs).proportion_ci(confidence_level=level, method="exact")
  return float(ci.low), float(ci.high)


def shift_p(better_S, worse_S, margin: float) -> float:
  """One-sided exact permutation p-value that mean(worse) - mean(better) exceeds `margin`: the
  share of the arms' relabellings, after `margin` is taken off `worse`, whose difference in
  means is at least the observed one. Every relabelling is enumerated (C(n, k) of them), so
  ties and steps in the values cost no coverage; the smallest p it can give is 1 / C(n, k).
  NaN where a value is not finite."""
  better_S = np.asarray(better_S, float)
  worse_S = np.asarray(worse_S, float) - margin
  if not (np.all(np.isfinite(better_S)) and np.all(np.isfinite(worse_S))):
    return math.nan  # a value that is not a number decides nothing
  pooled = np.concatenate([worse_S, better_S])
  n, k = len(pooled), len(worse_S)
  observed = worse_S.mean() - better_S.mean()
  total = pooled.sum()
  picks = np.array(list(itertools.combinations(range(n), k)))
  sums = pooled[picks].sum(axis=1)
  differences = sums / k - (total - sums) / (n - k)
  return float(np.mean(differences >= observed - 1e-12))


def smallest_shift_p(n_better: int, n_worse: int) -> float:
  """The smallest p-value `shift_p` can give at these numbers of seeds."""
  return 1 / math.comb(n_better + n_worse, n_worse)


def fisher_p(failed_worse: int, runs_worse: int, failed_better: int, runs_better: int) -> float:
  """One-sided Fisher's exact p-value that `worse` fails more often than `better`."""
  table = [[failed_worse, runs_worse - failed_worse], [failed_better, runs_better - failed_better]]
  return float(stats.fisher_exact(table, alternative="greater").pvalue)


def stratified_p(strata) -> float:
  """One-sided exact test that `worse` fails more often than `better` within strata (each a
  (failed_worse, runs_worse, failed_better, runs_better)), Cochran-Mantel-Haenszel's statistic
  (worse's failures summed over strata) under its exact conditional distribution: given each
  stratum's margins the count is hypergeometric, and the strata are independent. A stratum in
  which every run failed, or none did, has one possible count: it adds nothing to the test."""
  distribution, observed = np.array([1.0]), 0
  for failed_worse, runs_worse, failed_better, runs_better in strata:
    failed = failed_worse + failed_better
    support = np.arange(max(0, failed - runs_better), min(failed, runs_worse) + 1)
    pmf = stats.hypergeom.pmf(support, runs_worse + runs_better, failed, runs_worse)
    offset = np.zeros(support[0] + len(support))
    offset[support[0]:] = pmf
    distribution = np.convolve(distribution, offset)
    observed += failed_worse
  return float(min(1.0, distribution[observed:].sum()))


def holm(p_values) -> list[float]:
  """Holm's step-down adjusted p-values: each compared with the family's level controls the
  chance of any false rejection in it."""
  p_values = list(p_values)
  order = sorted(range(len(p_values)), key=lambda i: p_values[i])
  adjusted, running = [0.0] * len(p_values), 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
    adjusted[i] = running
  return adjusted
