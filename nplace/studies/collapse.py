"""Study B's measurements per arm and seed, and the claims its protocol makes about them
(experiments/collapse.py: PROTOCOL).

From a trial's committed results (nplace/studies/results.py): its train loss on the plateau
(the mean over the last quarter, `outcomes.plateau_gap`) against the frequency loss; its probes
at every probed step -- token similarity per block (raw and centered), the residual gradient
per block (grad_h) and the norm backward factor per norm site. A claim holds when it holds in
every seed of its arm, and is not testable until every seed of the protocol (0..seeds-1) of
each arm it names is filed and probed.

The metrics (a claim about one `arm`; the thresholds are its protocol's). Starvation and the
factor are read at `READ_STEPS`, fixed steps whatever the run's length and its probing:
  collapses / escapes    the plateau within / farther than `collapse_margin` of the frequency loss
  clones / no_clones     the top block's similarity at init, raw and centered (the smaller of
                         the two), is at least / below `clone_similarity`
  stays_starved          |dL/dh_1| / |dL/dh_L| below `max_gradient_ratio` at every read step
  gradient_kept          ... at or above it at every read step
  factor_falls / factor_stays   the mean backward factor over the norm sites after the first
                         (the first reads the embedding) at the last read step lies below its
                         value at init by more than / at most `min_factor_fall`
  norms_starve           the norms' log10 product, by its change from init alone, below
                         log10 `max_gradient_ratio` at every read step: the norms by themselves
                         starve the gradient (their share of the change, which no threshold
                         separates from the escaping arms', is a description beside it)
  stays_starved_first    the ratio falls below the threshold for good (never back above it at a
                         later probe) before the train loss reaches its plateau (`plateau_step`),
                         resolved by the probe steps: a warmup dip that recovers is no
                         starvation; not testable without a probe at every read step ("for
                         good" reaches the last of them)
  escapes_unlike_control `better` escapes and `worse` (the matched-magnitude control) collapses
A change "from init" is read at step 0, which a run without that probe does not have.
A claim of a MECHANISMS metric holds only if no escaping trial of the grid (any arm, its plateau
more than `collapse_margin` below the frequency loss) holds it too: a test the escaping runs
pass does not tell collapse from escape. It is not testable until every arm of the grid is
filed, every run's plateau is known, and every escaping run the test applies to is measured (the
norms' test applies to a norm on the residual path only).

The accounting: in Post-LN the stream's cotangent passes, sublayer by sublayer, through the
branch (I + J_F)^T and the norm's backward; with |dL/dz| / |dL/dy| measured at every norm site on
the same batch as the grad_h probe, the ratio's log10 is exactly the norms' sum plus the
branches' (the rest), so `accounting` splits the measured starvation between the two.
"""
import dataclasses
import math

import numpy as np

from nplace.placements import AFTER, PLACEMENTS
from nplace.protocol import COLLAPSE_METRICS
from nplace.studies import outcomes, results
from nplace.studies.verdict import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Effect, Verdict

SEED = "seed"
# The norm on the residual path (post) or on the branch input (pre: norm, peri: norm_in).
BACKWARD = ("norm_backward", "norm_in_backward")
METRICS = COLLAPSE_METRICS
# What a collapsing arm is claimed to show and an escaping one must not.
MECHANISMS = ("clones", "stays_starved", "factor_falls", "norms_starve", "stays_starved_first")
# The steps the sustained claims read (starved at each), whatever the run's length and probing:
# every tier of experiments/collapse.py probes at each of them.
READ_STEPS = (500, 1000, 1500, 2000)
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


def at_steps(found, steps) -> np.ndarray | None:
  """A probed (steps, values) series at the given steps; None where one of them was not probed."""
  if found is None:
    return None
  index = {int(step): i for i, step in enumerate(found[0])}
  return None if any(step not in index for step in steps) else np.asarray(found[1])[[index[s] for s in steps]]


def factor_fall(trial) -> float:
  """The mean backward factor at step 0 minus at the last read step (positive: it fell)."""
  at = at_steps(backward_factors(trial), (0, READ_STEPS[-1]))
  return math.nan if at is None else float(at[0] - at[1])


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
  """When the gradient starved for good (below the threshold from that probe on, never back
  above) against when the loss reached its plateau. None without the probe, or without a probe
  at each read step: "for good" reaches at least the last read step, not only the end of a
  short run."""
  ratio = gradient_ratios(trial)
  if ratio is None or at_steps(ratio, READ_STEPS) is None:
    return None
  plateau = plateau_step(trial, protocol.threshold("collapse_margin"), int(protocol.threshold("plateau_window")))
  starved = ratio[1] < protocol.threshold("max_gradient_ratio")
  starved = np.flip(np.logical_and.accumulate(np.flip(starved)))  # starved at a probe and at every later one
  below = np.flatnonzero(starved)
  if not len(below):
    return Order(int(ratio[0][-1]), None, plateau)
  first = below[0]
  return Order(int(ratio[0][first - 1]) if first else None, int(ratio[0][first]), plateau)


def norms_change(trial, steps=READ_STEPS) -> float:
  """The largest change from init (step 0), over `steps`, of log10 of the norms' product from
  h_1 up to h_L (NaN off the residual path, or without a probe at step 0 or at one of them)."""
  found = accounting(trial)
  at = None if found is None else at_steps((found.steps, found.norms), (0, *steps))
  return math.nan if at is None else float(np.max(at[1:] - at[0]))


def norms_share_of_change(trial, step: int) -> float:
  """The norms' share of the change from init of log10 |dL/dh_1| / |dL/dh_L| at `step`: a
  description (the escaping Post-LN arms' is as large), not a claim."""
  found = accounting(trial)
  at = None if found is None else at_steps((found.steps, np.stack([found.norms, found.measured], 1)), (step,))
  if at is None:
    return math.nan
  (norms, measured), = at
  return float((norms - found.norms[0]) / (measured - found.measured[0]))


class Measures:
  """A collapse grid's trials by arm (ARMS: label -> model overrides) and seed."""

  missing: dict = {}  # a claim names its own missing seeds (`missing_seeds`), not the grid's unfiled trials

  def __init__(self, protocol, arms: dict, trials):
    self.protocol, self.by_arm = protocol, {}
    for trial in trials:
      arm = results.arm_of(arms, trial.overrides)
      if arm is not None:
        self.by_arm.setdefault(arm, []).append(trial)
    self.arms = [a for a in arms if a in self.by_arm]
    self.grid_arms = tuple(arms)  # every arm of the grid, filed or not: the escaping runs a mechanism must miss
    self.seeds = sorted({t.overrides.get(SEED) for ts in self.by_arm.values() for t in ts}, key=str)

  def missing_seeds(self, arm: str) -> str:
    """What is missing before every seed of `arm` is filed ('' when nothing is): by name where
    the protocol's seeds are 0..seeds-1, else by count (a later protocol re-judging them)."""
    filed = {t.overrides.get(SEED) for t in self.by_arm.get(arm, [])}
    if not filed:
      return f"{arm} (no seed filed)"
    if filed <= set(range(self.protocol.seeds)):
      missing = [s for s in range(self.protocol.seeds) if s not in filed]
      return f"{arm} seed{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}" if missing else ""
    return "" if len(filed) >= self.protocol.seeds else f"{arm}: {len(filed)} of {self.protocol.seeds} seeds"

  def measure(self, metric: str, trial) -> tuple[float, bool]:
    """(value, whether it holds the claim's test) of `metric` on one trial."""
    threshold = self.protocol.threshold
    if metric in ("collapses", "escapes"):
      gap, margin = plateau_gap(trial), threshold("collapse_margin")
      return gap, abs(gap) <= margin if metric == "collapses" else gap < -margin
    if metric in ("clones", "no_clones"):
      value, limit = top_similarity_at_init(trial), threshold("clone_similarity")
      return value, value >= limit if metric == "clones" else value < limit
    if metric in ("gradient_kept", "stays_starved"):
      ratio = at_steps(gradient_ratios(trial), READ_STEPS)
      value = math.nan if ratio is None else float(ratio.max() if metric == "stays_starved" else ratio.min())
      return value, value >= threshold("max_gradient_ratio") if metric == "gradient_kept" else \
          value < threshold("max_gradient_ratio")
    if metric in ("factor_falls", "factor_stays"):
      value = factor_fall(trial)
      return value, value > threshold("min_factor_fall") if metric == "factor_falls" else \
          value <= threshold("min_factor_fall")
    if metric == "norms_starve":
      value = norms_change(trial)
      return value, value < math.log10(threshold("max_gradient_ratio"))
    if metric == "stays_starved_first":
      order = order_of_events(trial, self.protocol)
      value = (math.nan if order is None else -math.inf if order.starved is None else math.nan
               if order.plateau is None else order.plateau - order.starved)  # -inf: never starved
      return value, order is not None and order.outcome == STARVED_FIRST
    raise ValueError(f"collapse metric {metric!r}: expected one of {', '.join(METRICS)}")

  def per_seed(self, metric: str, arm: str) -> tuple[list[float], list[bool], str]:
    """(value per seed, held per seed, what the value is) of `metric` for `arm`."""
    found = [self.measure(metric, t) for t in self.by_arm.get(arm, [])]
    return [v for v, _ in found], [h for _, h in found], self.what(metric)

  @staticmethod
  def what(metric: str) -> str:
    return {
        "collapses": "plateau − frequency loss, nats", "escapes": "plateau − frequency loss, nats",
        "clones": "top block's similarity at init, the smaller of raw and centered",
        "no_clones": "top block's similarity at init, the smaller of raw and centered",
        "gradient_kept": "smallest |dL/dh_1| / |dL/dh_L| at the read steps",
        "stays_starved": "largest |dL/dh_1| / |dL/dh_L| at the read steps",
        "factor_falls": "mean backward factor, init − last read step",
        "factor_stays": "mean backward factor, init − last read step",
        "norms_starve": "largest change from init of the norms' log10 product, over the read steps",
        "stays_starved_first": "plateau step − the probe step from which it stays starved",
    }[metric]

  def escaping(self) -> list[tuple[str, object]]:
    """(arm, trial) of every trial of the grid, of any arm, whose plateau lies more than
    `collapse_margin` below the frequency loss."""
    return [(arm, t) for arm in self.arms for t in self.by_arm[arm] if self.measure("escapes", t)[1]]

  def verdict(self, claim, protocol) -> Verdict:
    missing = [m for arm in claim.arms if (m := self.missing_seeds(arm))]
    if missing:
      return Verdict(claim, NOT_TESTABLE, (), None, "every seed filed: missing " + "; ".join(missing))
    if claim.metric == "stays_starved_first":
      found = self._order_verdict(claim)
    elif claim.metric == "escapes_unlike_control":
      return self._control_verdict(claim)
    else:
      values, held, what = self.per_seed(claim.metric, claim.arm)
      if any(math.isnan(v) for v in values):
        return Verdict(claim, NOT_TESTABLE, (), None, "every seed of the arm run and probed")
      verdict = REPRODUCED if all(held) else NOT_REPRODUCED
      found = Verdict(claim, verdict, (_spread(_shown(claim.metric, values), _shown_what(claim.metric, what)),), None,
                      "one seed the other way" if verdict == REPRODUCED else
                      f"{sum(held)} of {len(held)} seeds hold it: every seed")
    if claim.metric in MECHANISMS:
      return self._separated(found)
    return found

  def _separated(self, found: Verdict) -> Verdict:
    """`found`, reproduced only if no escaping trial the test applies to holds it too, every arm
    of the grid filed (an escaping run not yet filed could hold it) and each escaping run the
    test applies to measured (NaN: a probe or a read step missing)."""
    claim = found.claim
    _, collapsed, _ = self.per_seed("collapses", claim.arm)
    if not all(collapsed):  # a mechanism of a collapse that did not happen is not tested
      return dataclasses.replace(found, verdict=NOT_TESTABLE, would_change=(
          f"a collapse to explain: {claim.arm} collapses in {sum(collapsed)} of {len(collapsed)} seeds"))
    applies = [(arm, t) for arm, t in self.escaping()
               if claim.metric != "norms_starve" or residual_norms(t)]
    measured = [(arm, t, *self.measure(claim.metric, t)) for arm, t in applies]
    tested = [(arm, t, value, held) for arm, t, value, held in measured if not math.isnan(value)]
    unfiled = [m for arm in self.grid_arms if (m := self.missing_seeds(arm))]
    unmeasured = [f"{arm} seed {t.overrides.get(SEED)}" for arm, t, value, _ in measured if math.isnan(value)]
    unmeasured += [f"{arm} seed {t.overrides.get(SEED)} (its plateau)" for arm in self.arms for t in self.by_arm[arm]
                   if math.isnan(plateau_gap(t))]  # escaping or not: cannot tell
    if found.verdict == REPRODUCED and not any(held for *_, held in tested) and (unfiled or unmeasured):
      return dataclasses.replace(found, verdict=NOT_TESTABLE, would_change="; ".join(
          ([f"every arm of the grid filed (its escaping runs): missing {'; '.join(unfiled)}"] if unfiled else [])
          + ([f"every escaping run measured: {', '.join(unmeasured)}"] if unmeasured else [])))
    if not tested:
      return dataclasses.replace(found, verdict=NOT_TESTABLE if found.verdict == REPRODUCED else found.verdict,
                                 would_change=found.would_change + "; an escaping run the test applies to")
    finite = [value for _, _, value, _ in tested if math.isfinite(value)]  # -inf: never starved
    effects = found.effects + ((_spread(_shown(claim.metric, finite), _shown_what(claim.metric, self.what(claim.metric)),
                                        f"{len(finite)} escaping runs"),) if finite else ())
    passing = [f"{arm} seed {t.overrides.get(SEED)}" for arm, t, _, held in tested if held]
    if not passing:
      if found.verdict != REPRODUCED:
        return dataclasses.replace(found, effects=effects)
      never = "" if finite else f", none of which {'starves for good' if claim.metric == 'stays_starved_first' else 'starves'}"
      return dataclasses.replace(found, effects=effects, would_change=(
          f"{found.would_change}; or one of the {len(tested)} escaping runs holding it{never}"))
    return dataclasses.replace(found, verdict=NOT_REPRODUCED if found.verdict == REPRODUCED else found.verdict,
                               effects=effects, would_change=f"does not separate: {len(passing)} of the "
                               f"{len(tested)} escaping runs hold it too ({', '.join(passing)})")

  def orders(self, arm: str) -> list[Order | None]:
    return [order_of_events(t, self.protocol) for t in self.by_arm.get(arm, [])]

  def _order_verdict(self, claim):
    orders = self.orders(claim.arm)
    if None in orders:
      return Verdict(claim, NOT_TESTABLE, (), None, "every seed of the arm probed")
    outcomes_ = [o.outcome for o in orders]
    never = sum(o.starved is None and o.plateau is not None for o in orders)  # the data refute it
    if PLATEAU_FIRST in outcomes_:
      verdict, change = NOT_REPRODUCED, f"{outcomes_.count(PLATEAU_FIRST)} of {len(orders)} seeds reach the plateau first"
    elif never:
      verdict, change = NOT_REPRODUCED, f"{never} of {len(orders)} seeds never starve for good"
    elif UNRESOLVED in outcomes_:
      verdict, change = NOT_TESTABLE, ("probes dense enough to tell (or a ratio that falls below the "
                                       "threshold) in every seed")
    else:
      verdict, change = REPRODUCED, "one seed the other way"
    lead = [o.plateau - o.starved for o in orders if o.starved is not None and o.plateau is not None]
    effects = (_spread(lead, self.what(claim.metric)),) if len(lead) == len(orders) else ()
    return Verdict(claim, verdict, effects, None, change)

  def _control_verdict(self, claim):
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


RATIOS = ("gradient_kept", "stays_starved")  # over orders of magnitude: shown as log10


def _shown(metric: str, values) -> np.ndarray:
  return np.log10(values) if metric in RATIOS else np.asarray(values, np.float64)


def _shown_what(metric: str, what: str) -> str:
  return f"log10 of the {what}" if metric in RATIOS else what


def _spread(values, what: str, label: str | None = None) -> Effect:
  values = np.asarray(values, np.float64)
  return Effect(label or f"{len(values)} seeds", float(np.mean(values)), float(np.min(values)),
                float(np.max(values)), len(values), f"{what}, mean [min, max]")
