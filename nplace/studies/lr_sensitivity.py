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
nplace/studies/protocol.py's `judge`; a grid without a learning-rate sweep (one point per arm
and seed) is measured by its `final_loss`.
"""
import math

import numpy as np

from nplace.studies import outcomes, protocol as protocol_lib

LR, SEED = "optim.lr", "seed"
SHAPE_KEYS = (("model.n_layer", "depth"), ("model.d_model", "width"))


def sensitivity(losses, cap: float) -> float:
  """mean(min(loss, cap)) - min(min(loss, cap)) over one seed's learning rates."""
  capped = np.array([min(x, cap) if math.isfinite(x) else cap for x in losses], float)
  return float(capped.mean() - capped.min())


def shape_of(overrides: dict) -> str:
  parts = [f"{name} {overrides[key]}" for key, name in SHAPE_KEYS if key in overrides]
  return ", ".join(parts) or "as configured"


class Measures:
  """The trials of an LR-sensitivity grid, grouped by arm (ARMS: label -> model overrides),
  shape, seed and learning rate, classified under `protocol`."""

  def __init__(self, protocol, arms: dict, trials):
    self.protocol = protocol
    self.trials = []  # (arm, shape, seed, lr, trial, outcome)
    did_not_learn = protocol.threshold("did_not_learn")
    for trial in trials:
      arm = protocol_lib.arm_of(arms, trial.overrides)
      if arm is None:
        continue
      outcome = outcomes.classify(trial.summary, trial.loss, trial.warmup, did_not_learn, protocol.outcome_rules)
      lr = trial.overrides.get(LR)
      self.trials.append((arm, shape_of(trial.overrides), trial.overrides.get(SEED),
                          None if lr is None else float(lr), trial, outcome))
    self.arms = [a for a in arms if any(t[0] == a for t in self.trials)]
    self.shapes = list(dict.fromkeys(t[1] for t in self.trials))
    self.lrs = sorted({t[3] for t in self.trials}, key=lambda lr: -math.inf if lr is None else lr)
    self.swept = None not in self.lrs  # a learning-rate sweep, not one point per arm
    self.seeds = sorted({t[2] for t in self.trials}, key=str)

  def cell(self, arm, shape, seed, lr):
    return next((t for t in self.trials if t[:4] == (arm, shape, seed, lr)), None)

  def final_loss(self, entry) -> float:
    """The final val loss, NaN for a diverged run (so every cap treats it as the cap)."""
    _, _, _, _, trial, outcome = entry
    val = trial.summary.val_loss
    return math.nan if outcome == outcomes.DIVERGED or val is None else float(val)

  def curve(self, arm, shape, seed) -> list[float] | None:
    """The seed's final losses at every learning rate of the grid; None when one is missing."""
    entries = [self.cell(arm, shape, seed, lr) for lr in self.lrs]
    return None if None in entries else [self.final_loss(e) for e in entries]

  def cap(self, arm, shape, which: str) -> float:
    trial = next(t[4] for t in self.trials if t[:2] == (arm, shape))
    return math.log(trial.vocab_size) if which == "init" else trial.summary.frequency_loss

  def per_seed(self, metric: str, arm: str, shape: str) -> list[float | None]:
    """lr_sensitivity | frequency_sensitivity | best_loss of each seed (a sweep), or
    final_loss (one point per arm); a diverged run's loss is the loss at init."""
    if (metric == "final_loss") == self.swept:
      raise ValueError(f"metric {metric!r} is not defined on {'a' if self.swept else 'no'} learning-rate sweep")
    values = []
    for seed in self.seeds:
      curve = self.curve(arm, shape, seed)
      if curve is None:
        values.append(None)
      elif metric in ("best_loss", "final_loss"):
        finite = [x for x in curve if math.isfinite(x)]
        values.append(min(finite) if finite else self.cap(arm, shape, "init"))
      else:
        values.append(sensitivity(curve, self.cap(arm, shape, "init" if metric == "lr_sensitivity" else "frequency")))
    return values

  def divergences(self, arm: str) -> tuple[int, int]:
    """(diverged runs, runs) of the arm over the whole grid."""
    mine = [t for t in self.trials if t[0] == arm]
    return sum(t[5] == outcomes.DIVERGED for t in mine), len(mine)

  def counts(self, arm: str, shape: str, lr: float) -> dict:
    """Outcome class -> runs, over the seeds at one grid point."""
    found = [t[5] for t in self.trials if t[:2] == (arm, shape) and t[3] == lr]
    return {c: found.count(c) for c in outcomes.CLASSES}

  def mean_curve(self, arm: str, shape: str) -> tuple[np.ndarray, np.ndarray]:
    """(lrs, mean final loss over the seeds that stayed finite) for the figure and the best lr."""
    lrs, means = [], []
    for lr in self.lrs:
      losses = [self.final_loss(t) for t in self.trials if t[:2] == (arm, shape) and t[3] == lr]
      finite = [x for x in losses if math.isfinite(x)]
      if finite:
        lrs.append(lr), means.append(np.mean(finite))
    return np.array(lrs), np.array(means)
