"""Lab rule version 4: a short learning-rate range test predicts a configuration's maximum stable
learning rate.

A configuration (a model config: its placement and options, depth and width; the grid's training
config otherwise) trains one seed that no grid uses, RANGE_SEED, at each rate of the grid's sweep
for the first RANGE_STEPS steps of the full run's schedule: the config's own train.steps, warmup
and cosine, so its losses are the first RANGE_STEPS steps of a full run with that seed. The rates
train as one cell (nplace/train/cell.py: one compiled program, as `nplace sweep --batch K`),
without evaluation, checkpoints or probes. Each rate reads

  L = the mean train loss over steps RANGE_STEPS - READ_STEPS + 1 .. RANGE_STEPS, capped at ln V
      (ln V where the run logged a non-finite loss or gradient by then: the train loop stops it);
  blew up = nplace.studies.outcomes.blew_up over its losses up to RANGE_STEPS, after the config's
      warmup, at the grid protocol's `blow_up_rise`.

The predicted maximum stable rate is the largest rate of the sweep whose drop ln V - L is at least
DROP_FRACTION of the best rate's drop and that neither blew up nor went non-finite; where no rate
qualifies, the lowest rate less a half-decade step. The score is -log10 of it: higher ranks as
less stable, as rule version 3's.
"""
import dataclasses
import math
import time

import jax
import numpy as np

from nplace.config import validate
from nplace.errors import ConfigError
from nplace.runtime import cpu_split, startup
from nplace.studies import grid, outcomes, results
from nplace.studies.lab import measure
from nplace.studies.lr_sensitivity import LR, SEED, shape_of
from nplace.train.cell import Cell, Run
from nplace.train.summary import Summary

RANGE_SEED = 1000  # no grid of this repository trains it
RANGE_STEPS = 100  # a tenth of the placements grid's 1,000: with 1 seed of its 3, 1/30 of its steps
READ_STEPS = 10  # L is the mean over the last 10 read steps: one batch's loss is ~0.2 nats of noise
DROP_FRACTION = 0.5  # of the best rate's drop below ln V that a rate must reach to count as learning
BELOW_THE_SWEEP = 10 ** -0.5  # where no rate qualifies: the lowest rate times this, one half-decade step down
RULE = (f"predicted max stable lr = the largest rate of the sweep that, trained {RANGE_STEPS} steps of its "
        f"full run's schedule from seed {RANGE_SEED}, brought the mean train loss of steps "
        f"{RANGE_STEPS - READ_STEPS + 1}-{RANGE_STEPS} (ln V where not finite, capped at ln V) at least "
        f"{DROP_FRACTION:g} of the best rate's drop below ln V and never blew up (a rise of the protocol's "
        f"blow_up_rise above the running minimum after warmup); else the lowest rate / 10^0.5; "
        "score = -log10 of it, a higher score ranks as less stable")


@dataclasses.dataclass(frozen=True)
class Reading:
  """One rate's range test."""
  lr: float
  loss: float  # L: the mean train loss over the read steps, capped at ln V (ln V where not finite)
  finite: bool  # every step up to the last read step ran, with a finite loss and gradient
  blew_up: bool

  @property
  def stable(self) -> bool:
    return self.finite and not self.blew_up


def read(lr: float, loss, cap: float, warmup: int, rise: float, steps: int = RANGE_STEPS) -> Reading:
  """One rate's Reading from its logged train loss `[(step, loss)]` (NaN where a step was not
  finite), `cap` = ln V."""
  loss = [(s, v) for s, v in loss if s <= steps]
  finite = len(loss) == steps and all(math.isfinite(v) for _, v in loss)
  tail = [v for s, v in loss if s > steps - READ_STEPS]
  level = min(float(np.mean(tail)), cap) if finite else cap
  return Reading(lr, level, finite, outcomes.blew_up(loss, warmup, rise))


def predicted_max_lr(readings: list[Reading], cap: float) -> float:
  """The rule's prediction from each rate's Reading (module doc). A rate must have dropped below
  ln V at all: where no rate did, none learned, and none qualifies."""
  best = max(cap - r.loss for r in readings)
  qualified = [r.lr for r in readings if r.stable and cap - r.loss >= DROP_FRACTION * best and cap - r.loss > 0]
  return max(qualified) if qualified else min(r.lr for r in readings) * BELOW_THE_SWEEP


def predict(losses: dict, cap: float, warmup: int, rise: float, steps: int = RANGE_STEPS) -> dict:
  """The lab's card from each rate's logged train loss (`losses`: lr -> [(step, loss)]): the
  predicted maximum stable rate, its score and a line saying it, and every rate's Reading."""
  readings = [read(lr, loss, cap, warmup, rise, steps) for lr, loss in sorted(losses.items())]
  rate = predicted_max_lr(readings, cap)
  return {"score": -math.log10(rate), "predicted_max_lr": rate, "prediction": prediction(rate, readings, steps),
          "range_test": [dataclasses.asdict(r) for r in readings]}


def mark(reading: Reading) -> str:
  """L at one rate as the range test's tables print it: `nan` where not finite, `!` where it blew up."""
  return "nan" if not reading.finite else f"{reading.loss:.2f}" + ("!" if reading.blew_up else "")


def prediction(rate: float, readings: list[Reading], steps: int) -> str:
  return (f"predicted max stable lr {rate:.1e} (range test: L after {steps} steps at lr "
          + ", ".join(f"{r.lr:.1e} {mark(r)}" for r in readings) + "; ! blew up)")


def readings_of(card: dict) -> list[Reading]:
  return [Reading(**r) for r in card["range_test"]]


def blow_up_rise(protocol) -> float:
  """The grid protocol's `blow_up_rise`, at which the range test reads blow-ups; GridError where
  it declares none."""
  found = [t.value for t in protocol.thresholds if t.name == "blow_up_rise"]
  if not found:
    raise grid.GridError(f"protocol {protocol.name} v{protocol.version} declares no blow_up_rise, at which the range "
                         "test reads blow-ups")
  return found[0]


def configurations(module, arg: str, base, arms: dict) -> dict:
  """(arm, shape) -> the config of its range test at each of its rates, for every configuration
  of the grid `module` ARG declares (its trials grouped by arm and shape, `arms`: label ->
  overrides), over `base`: each trial's overrides but its seed, which is RANGE_SEED. Every config
  is validated (GridError naming the trial) before anything compiles."""
  found = {}
  for overrides in module.get_sweep(arg):
    arm = results.arm_of(arms, overrides)
    if arm is not None and LR in overrides:
      found.setdefault((arm, shape_of(overrides)), {})[overrides[LR]] = _config(base, overrides)
  return {key: [by_rate[lr] for lr in sorted(by_rate)] for key, by_rate in found.items()}


def _config(base, overrides: dict):
  """A trial's config with RANGE_SEED for its seed; GridError naming the trial where it is not one
  the range test can train."""
  where = f"trial {grid.trial_name(overrides)}"
  config = grid.apply(base, {**overrides, SEED: RANGE_SEED}, where)
  try:
    validate(config)
    if config.train.steps < RANGE_STEPS:
      raise ConfigError("train.steps", config.train.steps, f"the range test reads the first {RANGE_STEPS} steps "
                        "of the run's schedule")
  except ConfigError as e:
    raise grid.GridError(f"{where}: {e}") from None
  return config


def train_losses(configs: list, steps: int = RANGE_STEPS) -> list[list[tuple[int, float]]]:
  """Each config's train loss at steps 1..`steps` of its schedule (NaN at a step whose loss or
  gradient was not finite), the configs (which differ only in nplace.train.cell.FREE) trained as
  one cell from their init, on their own data order, by the train loop's own step."""
  startup.prepare_process(configs[0])
  # every run stays active: a run's non-finite step leaves its state as it was (nplace/train/steps.py),
  # and reads ln V whatever follows, so nothing is fetched before the last step
  runs = [Run(str(i), config, workdir=None, summary=Summary()) for i, config in enumerate(configs)]
  cell = Cell(runs, cpu_split.mesh_devices(configs[0]))
  cell.open_data()
  state = cell.init()
  cell.compile()
  metrics = []
  for _ in range(steps):
    state, step_metrics = cell.step(state, cell.next_batch())
    metrics.append({key: step_metrics[key] for key in ("loss", "finite")})
  fetched = jax.device_get(metrics)
  jax.clear_caches()  # each configuration compiles its own program; do not keep the last one's
  per_run = [[cell.metrics_of(m, i) for m in fetched] for i in range(len(runs))]
  return [[(step, float(m["loss"]) if m["finite"] else math.nan) for step, m in enumerate(run, 1)] for run in per_run]


def run(configs: list, rise: float, steps: int = RANGE_STEPS) -> dict:
  """The range test of one configuration (`configs`: its config at each rate) and its card
  (`predict`), at the protocol's `blow_up_rise`."""
  first = configs[0]
  losses = dict(zip((c.optim.lr for c in configs), train_losses(configs, steps)))
  return predict(losses, math.log(first.model.vocab_size), first.optim.warmup_steps, rise, steps)


def run_all(configurations: dict, rise: float) -> dict:
  """(arm, shape) -> the card of its range test (`run`), for each of `configurations` (as
  `configurations` gives them), compiled through the lab's persistent cache; a line as each ends."""
  measure.persistent_cache()
  cards = {}
  for i, (key, configs) in enumerate(configurations.items(), 1):
    start = time.perf_counter()
    cards[key] = run(configs, rise)
    print(f"range test {i}/{len(configurations)}, {', '.join(key)}: {cards[key]['prediction']} "
          f"({time.perf_counter() - start:.0f} s)", flush=True)
  return cards
