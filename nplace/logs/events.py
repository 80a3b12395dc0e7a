"""Reading a run's TensorBoard event files back (tensorboard's own reader, no TensorFlow).

A resumed run writes a new event file that opens with a session START at its first step;
as TensorBoard does, everything an earlier file recorded from that step on is dropped.
"""
import numpy as np
from etils import epath
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util


def event_files(run_dir) -> list[epath.Path]:
  """The run's event files, oldest first (tensorboardX names them by the second they were
  opened in, so the name sorts by time)."""
  return sorted(epath.Path(run_dir).glob("events.out.tfevents.*"))


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
