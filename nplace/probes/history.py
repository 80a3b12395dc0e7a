"""A run's probe history: its `probe/*` scalars read back from the event files, gathered per
probe into [steps, values] arrays (what the heatmaps, `nplace plot` and the reports draw)."""
import dataclasses

import numpy as np

from nplace.logs import events
from nplace.probes import catalog


@dataclasses.dataclass
class ProbeHistory:
  steps: np.ndarray  # [R]
  values: np.ndarray  # [R, Y]; NaN where a step lacks a value
  labels: list[str]  # the Y tag suffixes, in the suite's order ("layer_001", "attn_003", ...)
  kind: str  # catalog.KINDS


def read(run_dir) -> dict[str, ProbeHistory]:
  """The `probe/*` scalars of a run, gathered per probe into [steps, values] arrays."""
  by_name = {}  # name -> {label: (steps, values)}
  for tag, series in events.read_scalars(run_dir).items():
    parts = tag.split("/")
    if parts[0] == "probe" and len(parts) in (2, 3):
      by_name.setdefault(parts[1], {})[parts[2] if len(parts) == 3 else ""] = series
  out = {}
  for name, series in by_name.items():
    kind = catalog.probe(name).kind
    labels = [label for label in catalog.labels(kind, _count(kind, series)) if label in series]
    steps = np.unique(np.concatenate([series[label][0] for label in labels]))
    values = np.full((steps.size, len(labels)), np.nan)
    for j, label in enumerate(labels):
      s, v = series[label]
      values[np.searchsorted(steps, s), j] = v
    out[name] = ProbeHistory(steps, values, labels, kind)
  return out


def _count(kind, series) -> int:
  """How many values a probe has, from the largest layer number among its tags."""
  if kind == "single":
    return 1
  top = max(int(label.rsplit("_", 1)[1]) for label in series)
  return {"block": top, "source": top + 1, "sublayer": 2 * top}[kind]
