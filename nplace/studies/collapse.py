"""Study B's measurements per arm and seed, and the claims a protocol can make about them.

From a trial's committed results (nplace/studies/results.py): its train loss on the plateau
(the mean over the last quarter, `outcomes.plateau_gap`) against the frequency loss; its probes
at every probed step -- token similarity per block (raw and centered), the residual gradient
per block (grad_h) and the norm backward factor per norm site. A claim holds when it holds in
every seed of its arm, and is not testable until every seed of the protocol (0..seeds-1) of
each arm it names is filed and probed.

Metrics of version 1 (a claim about one `arm`):
  collapses / escapes    the plateau within / farther than `collapse_margin` of the frequency loss
  similarity_rises       the top block's similarity at the first probe (init) exceeds block 1's
  similarity_centered_rises   by more than `min_similarity_rise`
  gradient_starves       |dL/dh_1| / |dL/dh_L| falls below `max_gradient_ratio` at some probe
  gradient_kept          ... stays at or above it at every probe
  backward_below_one     the mean backward factor over the norm sites after the first (the
                         first reads the embedding) is below 1 at every probe after init
Version 2's (the thresholds are its protocol's):
  clones / no_clones     the top block's similarity at init, raw and centered (the smaller of
                         the two), is at least / below `clone_similarity`
  factor_falls / factor_stays   that mean backward factor at the last probe lies below its
                         value at init by more than / at most `min_factor_fall`
  norms_account          at the probe where |dL/dh_1| / |dL/dh_L| is smallest, the product of
                         the norm factors between h_1 and h_L is at least `min_explained` of
                         the ratio's log10 (a norm on the residual path only: Post-LN's)
  starves_first          the ratio falls below `max_gradient_ratio` before the train loss
                         reaches its plateau (`plateau_step`), resolved by the probe steps
  escapes_unlike_control `better` escapes and `worse` (the matched-magnitude control) collapses

The accounting: in Post-LN the stream's cotangent passes, sublayer by sublayer, through the
branch (I + J_F)^T and the norm's backward; with |dL/dz| / |dL/dy| measured at every norm site on
the same batch as the grad_h probe, the ratio's log10 is exactly the norms' sum plus the
branches' (the rest), so `accounting` splits the measured starvation between the two.
"""
import dataclasses
import math

import numpy as np

from nplace.placements import AFTER, PLACEMENTS
from nplace.studies import outcomes, results
from nplace.studies.verdict import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Effect, Verdict

SEED = "seed"
# The norm on the residual path (post) or on the branch input (pre: norm, peri: norm_in).
BACKWARD = ("norm_backward", "norm_in_backward")
METRICS = ("collapses", "escapes", "similarity_rises", "similarity_centered_rises", "gradient_starves",
           "gradient_kept", "backward_below_one", "clones", "no_clones", "factor_falls", "factor_stays",
           "norms_account", "starves_first", "escapes_unlike_control")
STARVED_FIRST, PLATEAU_FIRST, UNRESOLVED = "starved first", "plateau first", "cannot tell"


def probe_series(trial, name):
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
  found = probe_series(trial, name)
  return math.nan if found is None else float(found[1][0, -1] - found[1][0, 0])


def bottom_over_top(grad_h_PL) -> np.ndarray:
  """|dL/dh_1| / |dL/dh_L| per probe, from the grad_h probe's [probe, block] values."""
  grad_h_PL = np.asarray(grad_h_PL, np.float64)
  return grad_h_PL[:, 0] / grad_h_PL[:, -1]


def gradient_ratios(trial):
  """(steps, |dL/dh_1| / |dL/dh_L| at each probe), or None."""
  found = probe_series(trial, "grad_h")
  return None if found is None else (found[0], bottom_over_top(found[1]))


def backward_factors(trial):
  """(steps, mean factor over the norm sites after the first, at each probe), or None."""
  found = next((f for f in (probe_series(trial, name) for name in BACKWARD) if f is not None), None)
  return None if found is None else (found[0], found[1][:, 1:].mean(axis=1))


def top_similarity_at_init(trial) -> float:
  """The top block's similarity at the first probe (init): the smaller of the raw and the
  centered cosine, so that clones must be clones by both."""
  found = [probe_series(trial, name) for name in ("similarity", "similarity_centered")]
  return math.nan if None in found else float(min(f[1][0, -1] for f in found))


def factor_fall(trial) -> float:
  """The mean backward factor at init minus at the last probe (positive: it fell)."""
  found = backward_factors(trial)
  return math.nan if found is None or len(found[0]) < 2 else float(found[1][0] - found[1][-1])


def residual_norms(trial) -> bool:
  """Whether the trial's norms sit on the residual path (every sublayer N(h + F)): where the
  norm factors multiply the stream's cotangent, and the accounting applies."""
  placement = PLACEMENTS.get(trial.overrides.get("model.placement"))
  return placement is not None and placement.attn.norms == placement.mlp.norms == (AFTER,)


@dataclasses.dataclass(frozen=True)
class Accounting:
  """log10 of |dL/dh_1| / |dL/dh_L| per probe step, split into the norms' share (the backward
  factors of the 2L - 2 sites from h_1 up to h_L) and the branches' (the rest)."""
  steps: np.ndarray
  measured: np.ndarray
  norms: np.ndarray

  @property
  def branches(self) -> np.ndarray:
    return self.measured - self.norms

  def explained(self, i: int) -> float:
    """The norms' fraction of the measured log10 at probe i (NaN where nothing is lost)."""
    return float(self.norms[i] / self.measured[i]) if self.measured[i] < 0 else math.nan


def accounting(trial) -> Accounting | None:
  ratio = gradient_ratios(trial)
  factors = probe_series(trial, "norm_backward")
  if ratio is None or factors is None or not residual_norms(trial) or list(ratio[0]) != list(factors[0]):
    return None
  # site order: attn_1, mlp_1 (whose output is h_1), attn_2, ...: h_1's cotangent has crossed sites 3..2L
  return Accounting(ratio[0], np.log10(ratio[1]), np.log10(factors[1][:, 2:]).sum(axis=1))


def plateau_step(trial, margin: float, window: int) -> int | None:
  """The first logged step from which the mean train loss over the next `window` steps lies
  within `margin` of the plateau (the last quarter's mean): when the loss reached it."""
  level = outcomes.plateau_gap(trial.loss, 0.0)
  if level is None:
    return None
  steps, values = np.array([s for s, _ in trial.loss]), np.array([v for _, v in trial.loss], np.float64)
  for step in steps:
    ahead = values[(steps >= step) & (steps < step + window)]
    if abs(ahead.mean() - level) <= margin:
      return int(step)
  return None


@dataclasses.dataclass(frozen=True)
class Order:
  """When the bottom/top gradient ratio fell below the threshold, between two probe steps
  (`starved` None: it never did), against when the loss reached its plateau."""
  last_unstarved: int | None
  starved: int | None
  plateau: int | None

  @property
  def outcome(self) -> str:
    if self.starved is None or self.plateau is None:
      return UNRESOLVED
    if self.starved < self.plateau:
      return STARVED_FIRST
    return PLATEAU_FIRST if self.last_unstarved is not None and self.plateau <= self.last_unstarved else UNRESOLVED


def order_of_events(trial, protocol) -> Order | None:
  ratio = gradient_ratios(trial)
  if ratio is None:
    return None
  plateau = plateau_step(trial, protocol.threshold("collapse_margin"), int(protocol.threshold("plateau_window")))
  below = np.flatnonzero(ratio[1] < protocol.threshold("max_gradient_ratio"))
  if not len(below):
    return Order(int(ratio[0][-1]), None, plateau)
  first = below[0]
  return Order(int(ratio[0][first - 1]) if first else None, int(ratio[0][first]), plateau)


class Measures:
  """A collapse grid's trials by arm (ARMS: label -> model overrides) and seed."""

  def __init__(self, protocol, arms: dict, trials):
    self.protocol, self.by_arm = protocol, {}
    for trial in trials:
      arm = results.arm_of(arms, trial.overrides)
      if arm is not None:
        self.by_arm.setdefault(arm, []).append(trial)
    self.arms = [a for a in arms if a in self.by_arm]
    self.seeds = sorted({t.overrides.get(SEED) for ts in self.by_arm.values() for t in ts}, key=str)

  def missing_seeds(self, arm: str) -> list[int]:
    """The protocol's seeds (0..seeds-1) of which `arm` has no filed trial."""
    filed = {t.overrides.get(SEED) for t in self.by_arm.get(arm, [])}
    return [s for s in range(self.protocol.seeds) if s not in filed]

  def per_seed(self, metric: str, arm: str) -> tuple[list[float], list[bool], str]:
    """(value per seed, held per seed, what the value is) of `metric` for `arm`."""
    threshold = self.protocol.threshold
    trials = self.by_arm.get(arm, [])
    if metric in ("collapses", "escapes"):
      gaps = [plateau_gap(t) for t in trials]
      margin = threshold("collapse_margin")
      held = [abs(g) <= margin if metric == "collapses" else g < -margin for g in gaps]
      return gaps, held, "plateau − frequency loss, nats"
    if metric in ("similarity_rises", "similarity_centered_rises"):
      name = "similarity" if metric == "similarity_rises" else "similarity_centered"
      values = [similarity_rise(t, name) for t in trials]
      return values, [v > threshold("min_similarity_rise") for v in values], f"{name} at init, top block − block 1"
    if metric in ("clones", "no_clones"):
      values = [top_similarity_at_init(t) for t in trials]
      limit = threshold("clone_similarity")
      return values, [v >= limit if metric == "clones" else v < limit for v in values], \
          "top block's similarity at init, the smaller of raw and centered"
    if metric in ("gradient_starves", "gradient_kept"):
      limit = threshold("max_gradient_ratio")
      ratios = [gradient_ratios(t) for t in trials]
      values = [math.nan if r is None else float(r[1].min()) for r in ratios]
      held = [v < limit if metric == "gradient_starves" else v >= limit for v in values]
      return values, held, "smallest |dL/dh_1| / |dL/dh_L| over the probes"
    if metric == "backward_below_one":
      found = [backward_factors(t) for t in trials]
      values = [math.nan if f is None or len(f[0]) < 2 else float(f[1][1:].max()) for f in found]
      return values, [v < 1 for v in values], "largest mean backward factor after init"
    if metric in ("factor_falls", "factor_stays"):
      values = [factor_fall(t) for t in trials]
      limit = threshold("min_factor_fall")
      return values, [v > limit if metric == "factor_falls" else v <= limit for v in values], \
          "mean backward factor, init − last probe"
    if metric == "norms_account":
      values = []
      for t in trials:
        found = accounting(t)
        values.append(math.nan if found is None else found.explained(int(np.argmin(found.measured))))
      return values, [v >= threshold("min_explained") for v in values], \
          "the norms' share of log10 |dL/dh_1| / |dL/dh_L| where it is smallest"
    raise ValueError(f"collapse metric {metric!r}: expected one of {', '.join(METRICS)}")

  def verdict(self, claim, protocol) -> Verdict:
    missing = {arm: seeds for arm in claim.arms if (seeds := self.missing_seeds(arm))}
    if missing:
      return Verdict(claim, NOT_TESTABLE, (), None, "every seed filed: missing " + "; ".join(
          f"{arm} seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}" for arm, seeds in missing.items()))
    if claim.metric == "starves_first":
      return self._order_verdict(claim, protocol)
    if claim.metric == "escapes_unlike_control":
      return self._control_verdict(claim, protocol)
    values, held, what = self.per_seed(claim.metric, claim.arm)
    if any(math.isnan(v) for v in values):
      return Verdict(claim, NOT_TESTABLE, (), None,
                                  "every seed of the arm run and probed")
    if claim.metric.startswith("gradient"):  # ratios over orders of magnitude: shown as log10
      values, what = np.log10(values), f"log10 of the {what}"
    verdict = REPRODUCED if all(held) else NOT_REPRODUCED
    change = ("one seed the other way" if verdict == REPRODUCED else
              f"{sum(held)} of {len(held)} seeds hold it: every seed")
    return Verdict(claim, verdict, (_spread(values, what),), None, change)

  def orders(self, arm: str) -> list[Order | None]:
    return [order_of_events(t, self.protocol) for t in self.by_arm.get(arm, [])]

  def _order_verdict(self, claim, protocol):
    orders = self.orders(claim.arm)
    if None in orders:
      return Verdict(claim, NOT_TESTABLE, (), None, "every seed of the arm probed")
    outcomes_ = [o.outcome for o in orders]
    if PLATEAU_FIRST in outcomes_:
      verdict, change = NOT_REPRODUCED, f"{outcomes_.count(PLATEAU_FIRST)} of {len(orders)} seeds reach the plateau first"
    elif UNRESOLVED in outcomes_:
      verdict, change = NOT_TESTABLE, ("probes dense enough to tell (or a ratio that falls below the "
                                                    "threshold) in every seed")
    else:
      verdict, change = REPRODUCED, "one seed the other way"
    lead = [o.plateau - o.starved for o in orders if o.starved is not None and o.plateau is not None]
    effects = (_spread(lead, "plateau step − first starved probe step"),) if len(lead) == len(orders) else ()
    return Verdict(claim, verdict, effects, None, change)

  def _control_verdict(self, claim, protocol):
    (gaps, escaped, _), (control_gaps, control_escaped, _) = (
        self.per_seed("escapes", arm) for arm in (claim.better, claim.worse))
    _, control_collapsed, _ = self.per_seed("collapses", claim.worse)
    effects = (_spread(gaps, f"{claim.better}: plateau − frequency loss, nats"),
               _spread(control_gaps, f"{claim.worse}: plateau − frequency loss, nats"))
    if all(escaped) and all(control_collapsed):
      return Verdict(claim, REPRODUCED, effects, None, "one seed of either arm the other way")
    if all(escaped) and all(control_escaped):
      why = "the matched control escapes too: a small branch at init is enough, with the average kept"
    elif not all(escaped):
      why = f"{claim.better} does not escape in every seed"
    else:
      why = "the matched control neither collapses nor escapes in every seed"
    return Verdict(claim, NOT_REPRODUCED, effects, None, why)


def _spread(values, what: str) -> Effect:
  values = np.asarray(values, np.float64)
  return Effect(f"{len(values)} seeds", float(np.mean(values)), float(np.min(values)),
                             float(np.max(values)), len(values), f"{what}, mean [min, max]")
