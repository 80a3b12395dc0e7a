"""`nplace lab`'s default model: study A's CPU model (`stability.py:cpu`: its data, batches and
AdamW), which `nplace lab` then makes --depth blocks deep and --width wide. The lab measures at
init and after a warmup at its own constant rate, so the grid's schedule does not enter."""
from nplace.config import experiment


def get_config(arg: str = "cpu"):
  if arg != "cpu":
    raise ValueError(f"placements variant {arg!r}: expected cpu")
  c = experiment("stability", "cpu")
  # the lab's probes (training leaves probe.every at 0): spectral norms cost O(L^2) passes
  c.probe.update(power_iters=0, hutchinson_probes=2)
  return c
