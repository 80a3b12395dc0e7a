"""Learning-rate sensitivity (Wortsman et al. 2023, "Small-scale proxies for large-scale
Transformer training instabilities", arXiv 2309.14322, section 2.2, as we read it): over a sweep
of learning rates eta, the mean of the final loss capped at the loss at initialisation l0, minus
the best final loss of the sweep,

    sensitivity = mean_eta min(l(eta), l0) - min_eta l(eta)

so a configuration whose loss barely moves across the sweep scores near 0 and one that diverges
at half the rates scores near (l0 - l*)/2. A non-finite loss counts as l0. l0 here is ln(vocab):
the loss of uniform predictions, where a GPT-2-initialised model starts. `frequency_sensitivity`
caps at the frequency loss instead: how far above unigram statistics the sweep stays.

`Measures` computes them per arm, model shape and seed from a study's committed trials, for
nplace/studies/judge.py; a grid without a learning-rate sweep (one point per arm and seed) is
measured by its `final_loss`. It also measures each seed's maximum stable learning rate, and
the trials as they stood at an earlier `horizon` (a fraction of the run) from their filed
evaluations and per-step losses; the protocol's `blow_ups` and `diverged_at_cap` say how a
run's outcome and the mean curve are read.
"""
import dataclasses
import math

import numpy as np

from nplace.studies import outcomes, results

LR, SEED = "optim.lr", "seed"
EVERY_RATE = "every rate"  # a `Point.at` / `Measures.of` rate: not one rate (a rate may be None: no sweep)
SHAPE_KEYS = (("model.n_layer", "depth"), ("model.d_model", "width"))


def sensitivity(losses, cap: float) -> float:
  """mean(min(loss, cap)) - min(min(loss, cap)) over one seed's learning rates."""
  capped = np.array([min(x, cap) if math.isfinite(x) else cap for x in losses], float)
  return float(capped.mean() - capped.min())


def shape_of(overrides: dict) -> str:
  parts = [f"{name} {overrides[key]}" for key, name in SHAPE_KEYS if key in overrides]
  return ", ".join(parts) or "as configured"


@dataclasses.dataclass(frozen=True)
class Point:
  """One trial of the grid where it sits: its arm, model shape, seed and learning rate (None
  without a sweep), and its outcome under the protocol."""
  arm: str
  shape: str
  seed: object
  lr: float | None
  trial: object  # nplace/studies/results.py's Trial, as it stood at the horizon
  outcome: str
  blew_up: bool = False  # only where the protocol's stability needs no blow-up (outcomes.blew_up)

  @property
  def failed(self) -> bool:
    return self.outcome != outcomes.LEARNED

  def at(self, arm, shape, lr=EVERY_RATE) -> bool:
    """Whether the point is the arm's in the shape (at the rate, when one is given)."""
    return (self.arm, self.shape) == (arm, shape) and (lr == EVERY_RATE or lr == self.lr)


def at_horizon(trial, step: int):
  """The trial as it stood at `step`: its losses up to there, its evaluation there, and not
  diverged if it diverged later. Its own object at or past its last step."""
  if step >= trial.summary.step:
    return trial
  summary = trial.summary
  diverged_later = summary.status == "diverged" and (summary.diverged_at or 0) > step
  loss = [(s, v) for s, v in trial.loss if s <= step]
  summary = dataclasses.replace(summary, step=step, val_loss=trial.val_loss_at(step),
                                status="completed" if diverged_later else summary.status,
                                train_loss=loss[-1][1] if loss else None)
  return dataclasses.replace(trial, summary=summary, loss=loss)


class Measures:
  """The trials of an LR-sensitivity grid, grouped by arm (ARMS: label -> model overrides),
  shape, seed and learning rate, classified under `protocol`."""

  def __init__(self, protocol, arms: dict, trials, horizon: float = 1.0, expected=()):
    """`expected`: the grid's trials' overrides (grid.expand), so a grid run in part knows what
    is missing; `horizon`: the fraction of the run (of the longest trial's steps) measured."""
    self.protocol, self.horizon = protocol, horizon
    self.points: list[Point] = []
    did_not_learn = protocol.threshold("did_not_learn")
    # text has no entropy rate to measure a learned fraction against: a margin below the frequency loss
    learned_margin = next((t.value for t in protocol.thresholds if t.name == "learned_margin"), 0.0)
    trials = list(trials)
    self.steps = max((t.summary.step for t in trials), default=0)
    for trial in trials:
      arm = results.arm_of(arms, trial.overrides)
      if arm is None:
        continue
      trial = at_horizon(trial, round(horizon * self.steps))
      outcome = outcomes.classify(trial.summary, trial.loss, trial.warmup, did_not_learn, protocol.blow_ups,
                                  learned_margin)
      lr = trial.overrides.get(LR)
      blew_up = protocol.stable_needs_no_blow_up and outcomes.blew_up(trial.loss, trial.warmup,
                                                                       protocol.threshold("blow_up_rise"))
      self.points.append(Point(arm, shape_of(trial.overrides), trial.overrides.get(SEED),
                               None if lr is None else float(lr), trial, outcome, blew_up))
    self.arms = [a for a in arms if any(p.arm == a for p in self.points)]
    self.shapes = list(dict.fromkeys(p.shape for p in self.points))
    self.lrs = sorted({p.lr for p in self.points}, key=lambda lr: -math.inf if lr is None else lr)
    self.swept = None not in self.lrs  # a learning-rate sweep, not one point per arm
    self.seeds = sorted({p.seed for p in self.points}, key=str)
    run = {(p.arm, p.shape, p.seed, p.lr) for p in self.points}
    self.missing = {}  # shape -> trials of the grid not (yet) filed
    for overrides in expected:
      arm = results.arm_of(arms, overrides)
      lr = overrides.get(LR)
      key = (arm, shape_of(overrides), overrides.get(SEED), None if lr is None else float(lr))
      if arm is not None and key not in run:
        self.missing[key[1]] = self.missing.get(key[1], 0) + 1

  def of(self, arm, shape, lr=EVERY_RATE) -> list[Point]:
    """The arm's points in the shape (at the rate, when one is given)."""
    return [p for p in self.points if p.at(arm, shape, lr)]

  def cell(self, arm, shape, seed, lr) -> Point | None:
    return next((p for p in self.of(arm, shape, lr) if p.seed == seed), None)

  def final_loss(self, point: Point) -> float:
    """The final val loss, NaN for a diverged run (so every cap treats it as the cap)."""
    val = point.trial.summary.val_loss
    return math.nan if point.outcome == outcomes.DIVERGED or val is None else float(val)

  def curve(self, arm, shape, seed) -> list[float] | None:
    """The seed's final losses at every learning rate of the grid; None when one is missing."""
    entries = [self.cell(arm, shape, seed, lr) for lr in self.lrs]
    return None if None in entries else [self.final_loss(e) for e in entries]

  def cap(self, arm, shape, which: str) -> float:
    trial = self.of(arm, shape)[0].trial
    return math.log(trial.vocab_size) if which == "init" else trial.summary.frequency_loss

  def max_stable_lr(self, arm, shape, seed) -> float | None:
    """The largest rate at which the seed's run was stable: it learned (and, where the protocol
    says so, never blew up); None if it was stable at none (or a rate of the grid is missing)."""
    entries = [self.cell(arm, shape, seed, lr) for lr in self.lrs]
    if None in entries:
      return None
    return max((p.lr for p in entries if not p.failed and not p.blew_up), default=None)

  def per_seed(self, metric: str, arm: str, shape: str) -> list[float | None]:
    """lr_sensitivity | frequency_sensitivity | best_loss | max_stable_lr of each seed (a
    sweep), or final_loss (one point per arm); a diverged run's loss is the loss at init.
    max_stable_lr is compared as -log10(rate), so that lower is better like the others."""
    if (metric == "final_loss") == self.swept:
      raise ValueError(f"metric {metric!r} is not defined on {'a' if self.swept else 'no'} learning-rate sweep")
    values = []
    for seed in self.seeds:
      curve = self.curve(arm, shape, seed)
      if metric == "max_stable_lr":
        rate = self.max_stable_lr(arm, shape, seed)
        values.append(None if rate is None else -math.log10(rate))
      elif curve is None:
        values.append(None)
      elif metric in ("best_loss", "final_loss"):
        finite = [x for x in curve if math.isfinite(x)]
        values.append(min(finite) if finite else self.cap(arm, shape, "init"))
      else:
        values.append(sensitivity(curve, self.cap(arm, shape, "init" if metric == "lr_sensitivity" else "frequency")))
    return values

  def sensitivity_over(self, arm: str, shape: str, lrs) -> list[float | None]:
    """Each seed's LR sensitivity (cap ln V) over the sweep's rates in `lrs` only."""
    index = [self.lrs.index(lr) for lr in lrs]
    curves = [self.curve(arm, shape, seed) for seed in self.seeds]
    return [None if c is None else sensitivity([c[i] for i in index], self.cap(arm, shape, "init")) for c in curves]

  def blow_ups(self, arm: str, shape: str, lr=EVERY_RATE) -> list:
    """The transient blow-ups (above the loss at init, then recovered: outcomes.blow_up) of the
    arm's runs in the shape (at one rate, or all)."""
    found = [outcomes.blow_up(p.trial.summary, p.trial.loss, p.trial.warmup) for p in self.of(arm, shape, lr)
             if p.outcome != outcomes.DIVERGED]
    return [b for b in found if b is not None and b.recovered]

  def counts(self, arm: str, shape: str, lr: float) -> dict:
    """Outcome class -> runs, over the seeds at one grid point."""
    found = [p.outcome for p in self.of(arm, shape, lr)]
    return {c: found.count(c) for c in outcomes.CLASSES}

  def mean_curve(self, arm: str, shape: str) -> tuple[np.ndarray, np.ndarray]:
    """(lrs, mean final loss) for the figure and the best lr: over the seeds that stayed
    finite, or with a diverged seed counted as the cap ln V (the protocol's `diverged_at_cap`)."""
    lrs, means = [], []
    cap = self.cap(arm, shape, "init") if self.protocol.diverged_at_cap else None
    for lr in self.lrs:
      losses = [self.final_loss(p) for p in self.of(arm, shape, lr)]
      kept = [x if math.isfinite(x) else cap for x in losses if math.isfinite(x) or cap is not None]
      if kept:
        lrs.append(lr), means.append(np.mean(kept))
    return np.array(lrs), np.array(means)

  def best_lr(self, arm: str, shape: str) -> tuple[float | None, bool]:
    """(the rate of the lowest mean loss, whether it is bracketed: inside the sweep, with the
    mean loss at both neighbouring rates at least the protocol's `bracket_margin` above it)."""
    lrs, means = self.mean_curve(arm, shape)
    if not len(lrs):
      return None, False
    i = int(np.argmin(means))
    if lrs[i] in (self.lrs[0], self.lrs[-1]) or i in (0, len(lrs) - 1):
      return float(lrs[i]), False
    margin = self.protocol.threshold("bracket_margin")
    return float(lrs[i]), bool(min(means[i - 1], means[i + 1]) - means[i] >= margin)

  def top_rate_fails(self, arm: str, shape: str) -> bool:
    """Every run at the sweep's top rate failed (diverged or did not learn): the sweep reached
    the arm's failure region."""
    counts = self.counts(arm, shape, self.lrs[-1])
    return sum(counts.values()) > 0 and counts[outcomes.LEARNED] == 0
