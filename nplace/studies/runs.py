"""Finding the runs a report covers: a sweep (`sweep.json`), one run, or a folder of runs.

Every run comes with its directory, its summary, the overrides that made it differ from its
sweep's base config, and the command that reproduces it (a sweep's own, or for a plain run
one rebuilt from the config its checkpoints hold).
"""
import dataclasses
import functools
import json
import pathlib

from etils import epath

from nplace.config import EXPERIMENTS, experiment, flatten
from nplace.logs import events
from nplace.probes import history
from nplace.runtime import workdirs
from nplace.studies.sweep import FINISHED, status_of  # FINISHED: statuses whose summary is final
from nplace.train.summary import Summary, SummaryError

STUDIES = {"stability": "stability", "collapse": "collapse", "growth": "growth"}  # grid file stem -> study


@dataclasses.dataclass
class Run:
  name: str
  path: epath.Path  # the run's workdir (local or in a bucket)
  summary: Summary | None  # summary.json; None while a trial has not finished
  overrides: dict  # dotted config key -> value (a sweep trial's); {} for a plain run
  command: str
  status: str  # the trial's status (pending, running, ...) or the summary's
  error: str | None = None  # a failed trial's error, as the sweep recorded it


@dataclasses.dataclass
class Source:
  """The runs found under one DIR argument of `nplace report`."""
  path: epath.Path
  study: str  # stability | collapse | growth | runs (anything else)
  config: str | None  # sweep.json's `config` (experiments/NAME.py:ARG)
  runs: list[Run]
  left_out: dict[str, str] = dataclasses.field(default_factory=dict)  # a folder's other runs and sweeps -> why


class RunsError(ValueError):
  """A DIR holds no runs, or a sweep.json / summary.json that cannot be read."""


def study_of(config: str | None) -> str:
  """The report section for a grid `experiments/NAME.py:ARG`: by NAME."""
  if not config:
    return "runs"
  return STUDIES.get(pathlib.Path(config.partition(":")[0]).stem, "runs")


def load(path) -> Source:
  path = epath.Path(path)
  if (path / workdirs.SWEEP_RECORD).is_file():
    sweep = _json(path / workdirs.SWEEP_RECORD)
    try:
      runs = [_trial(path, t) for t in sweep["trials"]]
    except (KeyError, TypeError) as e:
      raise RunsError(f"{path / workdirs.SWEEP_RECORD}: a trial lacks {e}") from None
    return Source(path, study_of(sweep.get("config")), sweep.get("config"), runs)
  if (path / workdirs.SUMMARY).is_file():
    dirs, left_out = [path], {}
  else:
    children = sorted(d for d in path.iterdir() if d.is_dir()) if path.is_dir() else []
    dirs = [d for d in children if (d / workdirs.SUMMARY).is_file()]
    left_out = {d.name: why for d in children if d not in dirs and (why := _not_a_finished_run(d))}
  if not dirs:
    raise RunsError(f"{path}: no sweep.json, summary.json or run directories with a summary.json")
  return Source(path, "runs", None, [_plain(d) for d in dirs], left_out)


def _not_a_finished_run(directory: epath.Path) -> str | None:
  """Why a folder's subdirectory that holds a sweep or a run is not among its finished runs."""
  if (directory / workdirs.SWEEP_RECORD).is_file():
    return "a sweep: name its directory"
  if (directory / "checkpoints").is_dir() or events.event_files(directory):
    return "a run without summary.json: still training, or stopped; rerun it to finish"
  if any((d / f).is_file() for d in directory.iterdir() if d.is_dir() for f in (workdirs.SUMMARY, workdirs.SWEEP_RECORD)):
    return "a folder of runs: name its directory"
  return None


def _trial(root: epath.Path, trial: dict) -> Run:
  workdir = root / trial["workdir"]
  try:
    summary = (Summary.from_dict(trial["summary"], root / workdirs.SWEEP_RECORD) if trial.get("summary")
               else _read_summary(workdir))
  except SummaryError as e:
    raise RunsError(str(e)) from None
  return Run(trial["name"], workdir, summary, trial.get("overrides") or {}, trial["command"],
             trial.get("status") or status_of(summary), trial.get("error"))


def _plain(workdir: epath.Path) -> Run:
  summary = _read_summary(workdir)
  config = run_config(workdir)
  command = train_command(config, workdir) if config else f"nplace train --config ? --workdir {workdir}"
  return Run(workdir.name, workdir, summary, {}, command, summary.status)


def _json(file: epath.Path):
  try:
    return json.loads(file.read_text())
  except (OSError, ValueError) as e:
    raise RunsError(f"{file}: {e}") from None


def _read_summary(workdir: epath.Path) -> Summary | None:
  file = workdir / workdirs.SUMMARY
  try:
    return Summary.read(file) if file.is_file() else None
  except SummaryError as e:
    raise RunsError(str(e)) from None


def value(run: Run, key: str):
  """A summary field of the run; None while it has no summary."""
  return getattr(run.summary, key) if run.summary else None


def run_config(workdir) -> dict | None:
  """The config (as a dict) saved with the run's newest checkpoint; None without one."""
  steps = [d for d in (epath.Path(workdir) / "checkpoints").glob("*/config/metadata")
           if d.parts[-3].isdigit()]
  if not steps:
    return None
  return _json(max(steps, key=lambda d: int(d.parts[-3])))


def warmup(run: Run) -> int:
  """The run's optim.warmup_steps, from the config its checkpoints hold; 0 for a run that
  saved none (then every logged step is judged)."""
  config = run_config(run.path)
  return config["optim"]["warmup_steps"] if config else 0


def train_command(config: dict, workdir) -> str:
  """`nplace train` for this config: the experiment variant it differs least from, plus
  `--config.KEY=VALUE` for every difference (values as JSON holds them)."""
  want = flatten(config)
  best = None
  for file in sorted(EXPERIMENTS.glob("*.py")):
    for arg in (want.get("model.placement"), None):
      try:
        base = flatten(json.loads(json.dumps(experiment(file.stem, arg).to_dict())))
      except Exception:  # an experiment file may reject this ARG in any way; try the next
        continue
      # lists (mesh.rules) have no --config.KEY=VALUE form; they are left at the file's
      diff = {k: v for k, v in want.items() if k in base and base[k] != v and not isinstance(v, list)}
      spec = f"experiments/{file.name}" + (f":{arg}" if arg else "")
      if best is None or len(diff) < len(best[1]):
        best = (spec, diff)
  spec, diff = best or ("?", {})
  flags = [f"--config.{k}={v}" for k, v in diff.items()]
  return " ".join(["nplace train --config", spec, "--workdir", str(workdir), *flags])


def is_finished(run: Run) -> bool:
  return bool(run.summary) and run.status in FINISHED


def finished(runs) -> list:
  return [run for run in runs if is_finished(run)]


@functools.cache
def _scalars(path: str) -> dict:
  return events.read_scalars(path)


@functools.cache
def _probes(path: str) -> dict:
  return history.read(path)


def scalars(run: Run) -> dict:
  """The run's TensorBoard scalars (read once per report); {} without a run directory."""
  return _scalars(str(run.path)) if run.path.is_dir() else {}


def probes(run: Run) -> dict:
  """The run's probe histories (read once per report); {} without a run directory."""
  return _probes(str(run.path)) if run.path.is_dir() else {}


def groups(runs, skip=("seed",)) -> dict:
  """Runs that differ only in the `skip` keys (seeds): {((key, value), ...): [runs]}, in order."""
  out = {}
  for run in runs:
    out.setdefault(tuple((k, v) for k, v in run.overrides.items() if k not in skip), []).append(run)
  return out

