"""Reading a run's TensorBoard event files back (tensorboard's own reader, no TensorFlow).

A resumed run writes a new event file that opens with a session START at its first step;
as TensorBoard does, everything an earlier file recorded from that step on is dropped.
"""
import dataclasses
import pathlib

import numpy as np
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from nplace.probes import catalog


@dataclasses.dataclass
class ProbeHistory:
  steps: np.ndarray  # [S]
  values: np.ndarray  # [S, n]; NaN where a step lacks a value
  labels: list[str]  # the n tag suffixes, in the suite's order ("layer_001", "attn_003", ...)
  kind: str  # catalog.KINDS


def event_files(run_dir) -> list[pathlib.Path]:
  """The run's event files, oldest first (tensorboardX names them by the second they were
  opened in, so the name sorts by time)."""
  return sorted(pathlib.Path(run_dir).glob("events.out.tfevents.*"))


def _scalar(value) -> float | None:
  if value.HasField("simple_value"):
    return value.simple_value
  if value.HasField("tensor") and value.metadata.plugin_data.plugin_name == "scalars":
    return float(tensor_util.make_ndarray(value.tensor))
  return None


def read_scalars(run_dir) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Every scalar tag of a run dir -> (steps, values), steps ascending."""
  points = {}  # tag -> {step: value}; a later write of a step wins
  for path in event_files(run_dir):
    for event in EventFileLoader(str(path)).Load():
      if event.session_log.status == event_pb2.SessionLog.START:
        for series in points.values():
          for step in [s for s in series if s >= event.step]:
            del series[step]
      for value in event.summary.value:
        scalar = _scalar(value)
        if scalar is not None:
          points.setdefault(value.tag, {})[event.step] = scalar
  return {tag: (np.array(sorted(series), np.int64), np.array([series[s] for s in sorted(series)]))
          for tag, series in points.items() if series}


def read_probe_history(run_dir) -> dict[str, ProbeHistory]:
  """The `probe/*` scalars of a run, gathered per probe into [steps, values] arrays."""
  by_name = {}  # name -> {label: (steps, values)}
  for tag, series in read_scalars(run_dir).items():
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
