"""What a study's pre-registered protocol declares: its kind, its claims, the metric of each, the
thresholds, the seeds, and every rule that decides a verdict, each a named field. A rule
changed after results exist is a new version, declared beside the old.

Protocols are declared in the grid files (experiments/*.py) next to their grids; this module is
the vocabulary they declare with, and imports nothing of nplace. nplace/studies/judge.py turns
a grid's measurements into verdicts under a protocol.

Intervals (`interval_method`): a percentile bootstrap over seeds (`BOOTSTRAP`). With 3 seeds its
"95%" interval is the seeds' [min, max] (all three draws land on the minimum with probability
1/27 > 2.5%), about 75-80% coverage. Welch's t-interval (`WELCH_T`) has the stated coverage for
normal per-seed values.
"""
import dataclasses
from typing import Callable

# What a study measures, and so which measuring class and page section it gets
# (nplace/studies/measures.py, nplace/studies/report/page.py).
# each arm's final loss over a learning-rate sweep: LR sensitivity, failure regions, maximum stable rates,
# blow-ups, horizons
STABILITY_SWEEP = "stability sweep"
COMPARISON = "unswept comparison"  # one learning rate: each arm's final loss
GROWTH_PER_SEED = "growth over depth, per seed"  # fits per seed, intervals over the seeds
COLLAPSE_MECHANISMS = "collapse mechanisms"  # study B: plateaus, probes, the norms' accounting, the order of events
FIXED_RATES = "failures at fixed rates"  # many seeds per arm at a few declared learning rates
# maximum stable rates over model widths: per-width comparisons, trends against size, a blind prediction
SCALE_LADDER = "scale ladder"
KINDS = (STABILITY_SWEEP, COMPARISON, GROWTH_PER_SEED, COLLAPSE_MECHANISMS, FIXED_RATES, SCALE_LADDER)
# The metrics a claim of each kind may name: what the kind's measuring class measures
SWEPT_METRICS = ("lr_sensitivity", "frequency_sensitivity", "best_loss", "max_stable_lr")  # each seed's, over rates
COUNTED_METRICS = ("divergences", "failure_rate", "fails_more")  # failed runs, counted
GROWTH_METRICS = ("exponential_rate",)
LADDER_METRICS = ("edge_above_every_width", "gap_slope_within", "edge_slope_below", "tuned_distance_slope_below")
COLLAPSE_METRICS = ("collapses", "escapes", "clones", "no_clones", "stays_starved", "gradient_kept", "factor_falls",
                    "factor_stays", "norms_starve", "stays_starved_first", "escapes_unlike_control")
METRICS = {STABILITY_SWEEP: SWEPT_METRICS + COUNTED_METRICS, FIXED_RATES: SWEPT_METRICS + COUNTED_METRICS,
           COMPARISON: ("final_loss",) + COUNTED_METRICS, GROWTH_PER_SEED: GROWTH_METRICS,
           SCALE_LADDER: LADDER_METRICS, COLLAPSE_MECHANISMS: COLLAPSE_METRICS}

BOOTSTRAP, WELCH_T = "bootstrap", "welch_t"
# A claim's own method where its values are quantised (nplace/studies/exact.py): an exact
# permutation test of the shift between the arms, against the margin both ways.
PERMUTATION = "exact permutation"
# How a verdict is read: reproduced / not reproduced, or reproduced / contradicted /
# inconclusive (nplace/studies/three_way.py); either may be "not testable" for missing data.
TWO_WAY, THREE_WAY = "two-way", "three-way"

SEED_CLAIM, FINDING = "seed", "finding"  # a claim's source: the reproduced paper, or this project's own


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
  """A comparison of two arms: `better` has the lower metric than `worse` in every model shape of
  the grid, by more than the protocol's `min_effect` at the whole confidence interval over seeds.
  With `matches`, `better` only has to be no worse than `worse` by `min_effect` (the interval's
  top). `divergences` counts diverged runs instead, by an exact test within strata (each model
  shape and rate: Cochran-Mantel-Haenszel's statistic under its exact conditional distribution), so
  that rates where every run failed decide nothing: `better` diverged less often (three-way only).
  A claim about one arm names it as `arm` and leaves `better` and `worse` unset."""
  id: str
  statement: str
  metric: str  # lr_sensitivity | best_loss | final_loss | divergences | max_stable_lr, or its kind's own
  # (a scale ladder's: experiments/ladder.py)
  better: str | None = None  # arm labels of the grid
  worse: str | None = None
  arm: str | None = None
  matches: bool = False
  method: str | None = None  # PERMUTATION for quantised values; None: the protocol's interval_method
  lr: float | None = None  # the learning rate a fixed-rate claim is about
  seed_rate: float | None = None  # the failure rate the seed reports for the arm at that recipe
  # The effect at which the page states the claim's power (worse - better in the metric's unit;
  # (worse's, better's) failure rates for counts; the failure rate for one arm's rate).
  power_at: float | tuple[float, float] | None = None
  source: str = SEED_CLAIM  # SEED_CLAIM: what the reproduced paper says; FINDING: this project's own
  widths: tuple[int, ...] | None = None  # a scale ladder's claim: the widths it reads (None: where its arms ran)
  given: str | None = None  # a claim of the same protocol that must be reproduced for this one to be

  @property
  def arms(self) -> tuple[str, ...]:
    """The arms the claim is about."""
    return (self.arm,) if self.arm is not None else (self.better, self.worse)


@dataclasses.dataclass(frozen=True)
class FixedRate:
  """A learning rate a fixed-rate protocol's claims are about, and why that rate: a verdict at
  one rate says what holds there, so the page prints the reason beside the failure counts."""
  lr: float
  name: str  # what the claims call it ("Pre-LN's tuned rate")
  why: str


@dataclasses.dataclass(frozen=True)
class ScaleLadder:
  """What a scale ladder declares beside its claims: the widths its lines are fitted over, the
  width they predict blind (and the prediction, once committed), the variant whose widths they
  predict beyond this machine, what its page describes without judging, and the filed grid at
  its smallest width on the earlier data that its section sets beside its own."""
  fit_widths: tuple[int, ...]
  blind_width: int
  predicted: dict | None  # arm -> (log10 rate, interval low, high): committed before the blind width runs
  beyond: str  # the grid variant of the widths predicted, not run here
  share: tuple[str, str, str]  # (Pre-LN, Peri-LN, Pre-LN + embedding norm): the embedding norm's share of the lead
  described: tuple[tuple[str, str], ...]  # (better, worse): trends of the gap described, not judged
  beside: tuple[str, str]  # (grid file:variant, results directory name) of the earlier data's trials


@dataclasses.dataclass(frozen=True)
class Protocol:
  name: str
  version: int
  kind: str  # one of KINDS
  summary: str
  seeds: int
  bootstrap_resamples: int
  bootstrap_seed: int
  interval: float  # the confidence level of every interval
  thresholds: tuple[Threshold, ...]
  claims: tuple[Claim, ...]
  interval_method: str = BOOTSTRAP  # BOOTSTRAP | WELCH_T (module doc)
  verdicts: str = TWO_WAY  # TWO_WAY | THREE_WAY
  # Every step's loss is read for blow-ups above the loss at init (nplace/studies/outcomes.py):
  # one the run did not recover from is a divergence, spikes count from the first step, and the
  # page reports the transient ones.
  blow_ups: bool = False
  # A diverged seed counts as the cap (ln V) in the mean loss curve and so in the best rate, so a
  # rate where seeds diverged cannot be best; else the curve is over the seeds that stayed finite.
  diverged_at_cap: bool = False
  # A seed is stable at a rate when its run learned and never blew up: no rise of `blow_up_rise`
  # nats above its running minimum after warmup (nplace/studies/outcomes.py: `blew_up`). Else a
  # seed's maximum stable rate is the largest at which it learned.
  stable_needs_no_blow_up: bool = False
  horizons: tuple[float, ...] = (1.0,)  # fractions of the run at which every verdict is judged
  arms: dict | None = None  # label -> overrides; None: the grid module's ARMS
  rates: tuple[FixedRate, ...] = ()  # FIXED_RATES: the rates its claims are about, and why each
  ladder: ScaleLadder | None = None  # a scale ladder's fit, prediction and what its page sets beside it

  def __post_init__(self):
    """A claim its kind cannot measure is refused where the protocol is declared, not when a
    page is built from its trials."""
    if self.kind not in METRICS:
      raise ValueError(f"protocol {self.name} v{self.version}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
    for claim in self.claims:
      if claim.metric not in METRICS[self.kind]:
        raise ValueError(f"protocol {self.name} v{self.version}: claim {claim.id!r} has metric {claim.metric!r}, "
                         f"which kind {self.kind!r} does not measure ({', '.join(METRICS[self.kind])})")

  def threshold(self, name: str) -> float:
    return next(t.value for t in self.thresholds if t.name == name)

  def scaled(self, name: str, factor: float) -> "Protocol":
    """This protocol with one threshold scaled by `factor` (`Threshold.scaled`; for the sensitivity table)."""
    return dataclasses.replace(self, thresholds=tuple(
        t.scaled(factor) if t.name == name else t for t in self.thresholds))


def _none(arg: str) -> tuple:
  return ()


@dataclasses.dataclass(frozen=True)
class Grid:
  """What a grid file (experiments/NAME.py) offers the library, declared once as its `GRID`:
  nplace/studies reads a grid file through this object alone. `config` and `sweep` are the file's
  `get_config(arg)` and `get_sweep(arg)` (which `--config FILE:ARG` and `nplace sweep` call);
  `judged_by(arg)` the current protocols that judge a variant's filed trials, the one it was
  declared under first where that one is current (none: a grid with nothing to judge);
  `declared(arg)` the version its grid was declared under, where a protocol of another version
  judges its trials (None: the first of `judged_by`); `reuses(arg)` the variants whose filed
  trials its sweep shares by name and config."""
  config: Callable
  sweep: Callable
  seed_setting: str = ""  # where the seed's claims were made
  arms: dict | None = None  # label -> overrides: the arms of a protocol that names none
  judged_by: Callable = _none
  declared: Callable | None = None
  reuses: Callable = _none

  def declared_version(self, arg: str) -> int:
    return self.declared(arg) if self.declared else self.judged_by(arg)[0].version
