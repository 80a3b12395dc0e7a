"""Draws one probe of several runs (post vs pre vs peri, ...) on one axis. A RUN is a training
run directory (its TensorBoard event files; local or `gs://`) or a `nplace probe --json` output.
Per-layer probes are drawn over layers at step N (default: each run's last probe step);
one-value probes over training steps."""
import io
import json
import pathlib

import numpy as np
from absl import flags
from etils import epath
from matplotlib.backend_bases import FigureCanvasBase

from nplace.commands.flags import Command
from nplace.errors import UsageError
from nplace.logs import events, plots
from nplace.probes import catalog, history
from nplace.runtime import workdirs


def _define(fv):
  flags.DEFINE_string("probe", None, "probe name, e.g. similarity (docs/guide/probes.md) (required)",
                      flag_values=fv)
  flags.DEFINE_string("out", None, "output image file (.png, .pdf, .svg) (required)", flag_values=fv)
  flags.DEFINE_integer("step", None, "probe step (default: each run's last)", flag_values=fv)


COMMAND = Command("nplace plot RUN... --probe NAME --out FILE.png [--step N]", __doc__, _define, config="none",
                  args=True, output_files=("out",))


def _from_events(path, name, step):
  """(label, x, y) of one run directory."""
  found = history.read(path)
  if name not in found:
    raise UsageError(f"{path}: no probe {name!r} in its event files (has: {', '.join(sorted(found)) or 'none'})")
  h = found[name]
  if h.kind == "single":
    return path.name, h.steps, h.values[:, 0]
  at = np.flatnonzero(h.steps == (h.steps[-1] if step is None else step))
  if not at.size:
    raise UsageError(f"{path}: no probe step {step} (have {h.steps.tolist()})")
  i = at[0]
  return f"{path.name} (step {h.steps[i]})", [catalog.position(label) for label in h.labels], h.values[i]


def _from_json(path, name, step):
  """(label, x, y) of one `nplace probe --json` file."""
  try:
    result = json.loads(path.read_text())
  except ValueError as e:
    raise UsageError(f"{path}: not a probe JSON file ({e})") from None
  if not isinstance(result, dict) or not isinstance(result.get("step"), int) or isinstance(result["step"], bool):
    raise UsageError(f"{path}: not a probe JSON file (no integer 'step': nplace probe --json writes one)")
  if name not in result:
    raise UsageError(f"{path}: no probe {name!r}")
  if step is not None and result["step"] != step:
    raise UsageError(f"{path}: probed at step {result['step']}, not {step}")
  try:
    values = np.asarray(result[name], np.float64)
  except (TypeError, ValueError):
    raise UsageError(f"{path}: probe {name!r} holds {result[name]!r}, not numbers") from None
  kind = catalog.probe(name).kind
  x = [result["step"]] if kind == "single" else [catalog.position(l) for l in catalog.labels(kind, values.size)]
  return f"{path.stem} (step {result['step']})", x, values


def figure(runs, name, step=None):
  """The comparison figure of probe `name` over `runs` (paths)."""
  series = {}
  for run in map(epath.Path, runs):  # a local path as given, or a bucket run
    if run.is_dir() and events.event_files(run):
      label, x, y = _from_events(run, name, step)
    elif run.suffix == ".json" and run.is_file():
      label, x, y = _from_json(run, name, step)
    else:
      raise UsageError(f"{run}: neither a run directory with event files nor a probe JSON file")
    series[label] = (x, y)
  p = catalog.probe(name)
  return plots.curves(series, catalog.XLABELS[p.kind], p.ylabel, name, log_y=p.log)


def _image_format(out: str) -> str:
  """The file type `out`'s suffix names; a UsageError unless matplotlib writes it (before any
  drawing: its own error is a traceback after it)."""
  formats = FigureCanvasBase.get_supported_filetypes()
  suffix = pathlib.PurePath(out).suffix.lstrip(".").lower()
  if suffix not in formats:
    raise UsageError(f"--out {out}: not an image file type matplotlib writes (.png, .pdf, .svg, "
                     f"{', '.join('.' + f for f in sorted(formats) if f not in ('png', 'pdf', 'svg'))})")
  return suffix


def main(argv):
  fv, runs = COMMAND.parse(argv)
  for flag in ("probe", "out"):
    if fv[flag].value is None:
      raise UsageError(f"--{flag} is required")
  if not runs:
    raise UsageError("name at least one RUN_DIR or probe JSON file")
  image_format = _image_format(fv.out)
  image = io.BytesIO()
  plots.save(figure(runs, fv.probe, fv.step), image, image_format)
  workdirs.write_atomic(workdirs.resolve(fv.out), image.getvalue())
  print(f"wrote {fv.out}")
