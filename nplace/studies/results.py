"""A study's committed results: what its verdicts are recomputed from, without the run directories.

`results/NAME/grid.json` names the grid (`experiments/FILE.py:ARG`, relative to the repository);
`results/NAME/trials.jsonl` holds one trial per line: its name, its overrides, its summary, the
logged train loss `[[step, loss], ...]` (rounded to `DIGITS` decimals: every step's loss under
`train.log_every=1`), the validation loss at every evaluation, its warmup and vocabulary size,
and for a probed run the probes the verdicts read (`PROBED`), per layer at every probed step. A
few KB a trial, ~15 KB at every step's loss.
A grid run in parts (a sweep directory each) is filed part by part into the same NAME; a trial
filed again must be the same record, or is replaced only when asked (`file_sweep`). A grid
that widens another of its file (its module's `reuses(arg)` names that variant) is judged on its
own trials and on the other's filed trials that its sweep lists by name (`with_reused`).
`results/NAME/NOTES.md`, where present, says which trials were rerun and why; the page prints it.
"""
import dataclasses
import json
import pathlib
import re

from nplace.config import flatten
from nplace.studies import grid
from nplace.studies import runs as runs_lib
from nplace.train.summary import Summary, SummaryError

TRIALS, GRID = "trials.jsonl", "grid.json"
NOTES = "NOTES.md"  # optional, written by hand when data is filed: what was rerun and why (export keeps it)
DIGITS = 5  # decimals of a filed loss: 1e-5 nats is below every rule's resolution, and halves the file
PROBED = ("mean_abs", "var_entry", "var_data", "rms", "max_abs",  # growth over depth
          "similarity", "similarity_centered", "grad_h", "norm_backward", "norm_in_backward")  # collapse


@dataclasses.dataclass
class Trial:
  name: str
  overrides: dict
  summary: Summary
  loss: list[tuple[int, float]]  # the logged train loss
  warmup: int
  vocab_size: int
  probes: dict = dataclasses.field(default_factory=dict)  # name -> {"steps": [...], "values": [[per layer], ...]}
  val_loss: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # at every evaluation; [] if not filed

  def val_loss_at(self, step: int) -> float | None:
    """The validation loss of the evaluation at `step`; None where none was filed."""
    return next((v for s, v in self.val_loss if s == step), None)

  def to_json(self) -> str:
    record = dataclasses.asdict(self)
    record["summary"] = self.summary.to_dict()
    record["loss"], record["val_loss"] = ([[int(s), round(float(v), DIGITS)] for s, v in series]
                                          for series in (self.loss, self.val_loss))
    return json.dumps(record)


@dataclasses.dataclass
class Study:
  path: pathlib.Path
  config: str  # experiments/FILE.py:ARG
  trials: list[Trial]
  reused: tuple[tuple[str, int], ...] = ()  # (results NAME, how many of `trials` are its) each: `with_reused`


def grid_of(study: Study, repo=None):
  """(the study's grid file's `GRID`, its ARG), which names the current protocols that judge it
  (`judged_by`); grid files are found relative to `repo` (default: the results directory's
  parent, the repository)."""
  repo = pathlib.Path(repo) if repo else study.path.absolute().parent.parent
  file, _, arg = study.config.partition(":")
  try:
    found = grid.load_grid(repo / file)
  except grid.GridError as e:
    raise runs_lib.RunsError(f"{study.path}: its grid: {e}") from None
  if not found.judged_by(arg):
    raise runs_lib.RunsError(f"{study.path}: its grid {study.config} names no current protocol for {arg!r}: "
                             "nothing to judge it by (an archived grid's data belongs in results/archive/data)")
  return found, arg


def with_reused(study: Study, found, arg: str, filed: dict[str, Study] | None = None) -> Study:
  """`study` with the filed trials of the variants its grid reuses (`GRID.reuses(arg)`, same
  config) that its own sweep lists and it has not filed itself; `filed`: the results
  directory's studies by NAME (`studies`), so none is read twice (None: read the ones it reuses)."""
  others = found.reuses(arg)
  if not others:
    return study
  listed = {grid.trial_name(overrides) for overrides in found.sweep(arg)}
  have, reused = {t.name for t in study.trials}, []
  for other in others:
    source = name_of(f"{study.config.partition(':')[0]}:{other}")
    source_dir = study.path.parent / source
    found = (filed or {}).get(source) or (load(source_dir) if filed is None and (source_dir / GRID).is_file() else None)
    if found is None:
      raise runs_lib.RunsError(f"{study.path}: its grid {study.config} reuses {source}'s trials, "
                               f"which are not filed: no {source_dir / GRID}")
    shared = [t for t in found.trials if t.name in listed and t.name not in have]
    have |= {t.name for t in shared}
    study = dataclasses.replace(study, trials=study.trials + shared)
    reused.append((source, len(shared)))
  return dataclasses.replace(study, reused=tuple(reused))


def arms(found, protocol) -> dict:
  """The arms a protocol judges (label -> overrides): its own where it declares them (study A's
  protocol 2 makes weight decay part of the arm), else its grid's."""
  return protocol.arms if protocol.arms is not None else found.arms


def arm_of(arms: dict, overrides: dict) -> str | None:
  """The label of the arm (label -> model overrides) whose every key the trial's overrides
  match; of several, the one that names the most keys (an arm that adds one key to another,
  as study B's matched control adds its init scale to Post-LN, is its own)."""
  matching = [(len(model), label) for label, model in arms.items()
              if all(overrides.get(key) == value for key, value in model.items())]
  return max(matching, key=lambda m: m[0])[1] if matching else None


def name_of(config: str) -> str:
  """The results directory of a grid: `experiments/stability.py:cpu` -> `stability_cpu`."""
  file, _, arg = config.partition(":")
  return re.sub(r"[^\w.-]+", "_", "_".join(p for p in (pathlib.Path(file).stem, arg) if p))


# Config keys that say how a trial is computed, not what it computes: a filed trial may differ
# from its grid's declared one there (another attention kernel, remat, a cache directory).
HOW_NOT_WHAT = ("model.attention_impl", "model.remat", "model.scan_unroll", "model.loss_chunks", "model.head_loss",
                "model.head_vocab_multiple", "model.qkv_projection", "data.cache_dir", "data.tfds_data_dir")
WHAT = ("seed", "train.steps", "train.batch_size", "model.", "data.", "optim.")  # prefixes of the keys compared


@dataclasses.dataclass
class Filing:
  """A sweep's finished trials filed into its grid's study (nothing written yet: `write`)."""
  study: Study  # every trial of the grid after filing
  added: list[str]  # names of trials filed for the first time
  replaced: list[str]  # filed before with another record (only with `replace`)
  unchanged: list[str]  # filed before with the same record
  kept: int  # trials filed before that this sweep does not hold (a grid run in parts)


def differing_key(trained, declared) -> str | None:
  """The first key (of `WHAT`, less `HOW_NOT_WHAT`) where the config a trial trained differs
  from the one its grid declares; None where they agree."""
  trained, declared = flatten(trained.to_dict()), flatten(declared.to_dict())
  return next((key for key, value in trained.items()
               if key.startswith(WHAT) and key not in HOW_NOT_WHAT and declared.get(key) != value), None)


def _declared(spec: str):
  """The config of a trial of the grid `experiments/FILE.py:ARG` as the grid declares it:
  `declared(run)`, from its base config and the run's overrides."""
  file, _, arg = spec.partition(":")
  found = grid.load_grid(file)
  base = found.config(arg) if arg else found.config()
  return lambda run: grid.apply(base, run.overrides, f"trial {run.name}")


def _check_declared(run, trained, declared, spec: str) -> None:
  """RunsError (one line naming the trial and the key) unless `run` trained its grid's trial as
  the grid declares it: a 30-step trial of a 1,000-step grid is another experiment."""
  key = differing_key(trained, declared)
  if key:
    value, wanted = flatten(trained.to_dict())[key], flatten(declared.to_dict()).get(key)
    raise runs_lib.RunsError(f"{run.path}: trial {run.name} trained {key}={value!r}, but its grid {spec} "
                             f"declares {key}={wanted!r}: not filed (rerun it as declared)")


def _trial(run, config) -> Trial:
  """A finished run as filed: its summary, logged losses, evaluations and the probes read."""
  scalars = runs_lib.scalars(run)
  steps, values = scalars.get("train/loss", ((), ()))
  probes = {name: {"steps": [int(s) for s in h.steps], "values": [[float(v) for v in row] for row in h.values]}
            for name, h in runs_lib.probes(run).items() if name in PROBED and len(h.steps)}
  return Trial(run.name, run.overrides, run.summary, list(zip(steps, values)), config.optim.warmup_steps,
               config.model.vocab_size, probes, list(zip(*scalars.get("eval/loss", ((), ())))))


def file_sweep(sweep_dir, results_dir, config_of, filed: dict | None = None, replace: bool = False) -> Filing:
  """Files the finished trials of the sweep in `sweep_dir` as RESULTS/NAME (`name_of` its grid),
  beside the trials of the same grid filed there before from other sweep directories (a grid
  run in parts, each part its own sweep), or in `filed` (NAME -> Study: filed by this command,
  not yet written). A trial filed before with the same record stays; with another, it is
  replaced in place only with `replace`, else a RunsError names the trials. A trial trained
  otherwise than its grid declares (`_check_declared`) is a RunsError. `config_of(run)` is the
  config its command trains."""
  source = runs_lib.load(sweep_dir)
  if not source.config:
    raise runs_lib.RunsError(f"{sweep_dir}: not a sweep (no sweep.json): only sweeps are filed as results")
  trials = []
  try:
    declared = _declared(source.config)
    for run in runs_lib.finished(source.runs):
      config = config_of(run)
      _check_declared(run, config, declared(run), source.config)
      trials.append(_trial(run, config))
  except grid.GridError as e:
    raise runs_lib.RunsError(f"{sweep_dir}: its grid: {e}") from None
  if not trials:
    raise runs_lib.RunsError(f"{sweep_dir}: no finished trials to file")
  into = pathlib.Path(results_dir) / name_of(source.config)
  before = (filed or {}).get(into.name) or (load(into) if (into / GRID).is_file() else None)
  before = before.trials if before and before.config == source.config else []
  new = {t.name: t for t in trials}
  unchanged = [t.name for t in before if t.name in new and new[t.name].to_json() == t.to_json()]
  replaced = [t.name for t in before if t.name in new and t.name not in unchanged]
  if replaced and not replace:
    shown = ", ".join(replaced[:3]) + (f" and {len(replaced) - 3} more" if len(replaced) > 3 else "")
    raise runs_lib.RunsError(f"{sweep_dir}: {len(replaced)} of its trials are filed in {into} with other results "
                             f"({shown}); --replace files them in their place")
  merged = [new.pop(t.name, t) for t in before] + list(new.values())
  return Filing(Study(into, source.config, merged), list(new), replaced, unchanged,
                len(merged) - len(trials))


def write(study: Study, staged) -> None:
  """Stages the study's grid.json and trials.jsonl (nplace/studies/staging.py)."""
  staged.path(study.path / GRID).write_text(json.dumps({"config": study.config}, indent=2) + "\n")
  staged.path(study.path / TRIALS).write_text("".join(t.to_json() + "\n" for t in study.trials))


def load(path) -> Study:
  path = pathlib.Path(path)
  try:
    config = json.loads((path / GRID).read_text())["config"]
    lines = (path / TRIALS).read_text().splitlines()
  except (OSError, ValueError, KeyError) as e:
    raise runs_lib.RunsError(f"{path}: {e}") from None
  trials = []
  for n, line in enumerate(lines, 1):
    where = f"{path / TRIALS}:{n}"
    try:
      record = json.loads(line)
      summary = Summary.from_dict(record.pop("summary"), where)
      series = {k: [tuple(p) for p in record.get(k, [])] for k in ("loss", "val_loss")}
      trials.append(Trial(summary=summary, **{**record, **series}))
    except (ValueError, KeyError, TypeError, SummaryError) as e:
      raise runs_lib.RunsError(f"{where}: {e}") from None
  return Study(path, config, trials)


def studies(results_dir) -> list[Study]:
  """Every results/NAME with a grid.json, by name."""
  return [load(d) for d in sorted(pathlib.Path(results_dir).iterdir()) if (d / GRID).is_file()]
