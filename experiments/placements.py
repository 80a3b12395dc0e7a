"""The lab's ranking check: does `nplace lab`'s init-time score predict which placements
train stably? Every placement of nplace/placements.py x 3 seeds on study A's CPU
stress grid (`stability.py:cpu`: its model, its stress learning rate, weight decay 0.1).

  nplace sweep --config experiments/placements.py --workdir runs/placements
  nplace lab --rank runs/placements      # lab scores vs measured outcomes, Spearman's rho

`get_config()` is also `nplace lab`'s default model (it then sets the depth and width).
"""
from nplace.config import experiment
from nplace.placements import PLACEMENTS

SEEDS = range(3)


def get_config(arg: str = "cpu"):
  if arg != "cpu":
    raise ValueError(f"placements variant {arg!r}: expected cpu")
  c = experiment("stability", "v0_stress")
  # the lab's probes (training leaves probe.every at 0): spectral norms cost O(L^2) passes
  c.probe.update(power_iters=0, hutchinson_probes=2)
  return c


def get_sweep(arg: str = "cpu") -> list[dict]:
  get_config(arg)  # validates arg
  return [{"model.placement": placement, "seed": seed} for placement in PLACEMENTS for seed in SEEDS]
