"""Runs an experiment grid: the experiment file's get_sweep(ARG) expanded into trials, run in
this process, each in DIR/<trial>/ with its own summary, event files and checkpoints. With
--batch K, trials that differ only in the seed, optim.lr, optim.weight_decay, optim.b1, optim.b2,
optim.eps, optim.min_lr_ratio and model.dt train K at a time as one compiled program (a cell),
each still its own run; --batch 1 runs them one after another. Rerunning the same command skips
finished trials and resumes interrupted ones (a rerun that would train a finished trial otherwise
is refused); a trial (or cell) that fails is recorded and the sweep goes on, to exit 1 at its
end. A grid that reuses another variant's trials (its `reuses(arg)`) skips them. DIR/sweep.json
holds every trial's status and summary, DIR/.jax_cache JAX's compiled programs (unless
JAX_COMPILATION_CACHE_DIR names another). --list prints the command of each trial (`nplace
train`) or cell (`nplace sweep --cell N`) instead, one per pod worker; without --workdir its
commands write to WORKDIR.
--record writes DIR/sweep.json from the trials' own summaries and runs nothing (trials run
elsewhere, a slice each: launch/tpu.py sweep)."""
import re
import shlex
import sys

from absl import flags
from etils import epath

from nplace.commands import train
from nplace.commands.flags import Command
from nplace.config import flatten, from_saved
from nplace.errors import ConfigError, DataError, UsageError
from nplace.logs import progress
from nplace.runtime import compile_cache, workdirs
from nplace.studies import grid, sweep
from nplace.train import checkpoint
from nplace.train.summary import SummaryError


def _define(fv):
  flags.DEFINE_string("workdir", None, "sweep directory: one subdirectory per trial, and sweep.json (required "
                      "unless --list)", flag_values=fv)
  flags.DEFINE_string("only", None, "run only the trials whose name matches this regex", flag_values=fv)
  flags.DEFINE_bool("list", False, "print each trial's (or cell's) name and command; run nothing",
                    flag_values=fv)
  flags.DEFINE_integer("batch", 1, "train up to this many trials that can share a program as one cell",
                       lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("cell", None, "run only this cell (as --list numbers them)", lower_bound=0, flag_values=fv)
  flags.DEFINE_bool("record", False, "write DIR/sweep.json from each trial's own summary.json and run nothing: "
                    "trials run elsewhere (launch/tpu.py sweep, a slice each) become a sweep nplace report files",
                    flag_values=fv)


COMMAND = Command("nplace sweep --config FILE[:ARG] --workdir DIR [--batch K [--cell N]] [--only REGEX] "
                  "[--list | --record] [--config.KEY=VALUE ...]", __doc__, _define, output_dirs=("workdir",),
                  writes_nothing_with=("list",))


LISTED_WORKDIR = "WORKDIR"


def config_args(argv) -> tuple[str, list[str]]:
  """The `--config FILE[:ARG]` value and the `--config.k=v` overrides, as given."""
  spec, overrides = None, []
  for i, arg in enumerate(argv):
    if arg == "--config" and i + 1 < len(argv):
      spec = argv[i + 1]
    elif arg.startswith("--config="):
      spec = arg.removeprefix("--config=")
    elif arg.startswith("--config."):
      overrides.append(arg if "=" in arg or i + 1 == len(argv) else f"{arg}={argv[i + 1]}")
  return spec, overrides


def main(argv):
  fv, _ = COMMAND.parse(argv)
  if fv.list and fv.record:
    raise UsageError("--list and --record: give one")
  given = fv.workdir
  if not given:
    if not fv.list:
      raise UsageError("--workdir is required")
    given = LISTED_WORKDIR  # a dry list alone: its commands name the directory a run would take
    argv = [*argv, f"--workdir={given}"]
  spec, cli_overrides = config_args(argv)
  workdir = epath.Path(given)  # a local path as given (the listed commands keep it), or a bucket's
  try:
    trials = grid.expand(spec, fv.config, cli_overrides, workdir)
    reused = grid.reused_names(spec)
    only = re.compile(fv.only) if fv.only else None
  except grid.GridError as e:
    raise UsageError(str(e)) from None
  except re.error as e:
    raise UsageError(f"--only {fv.only!r}: {e}") from None
  selected = [i for i, t in enumerate(trials) if only is None or only.search(t.name)]
  if not selected:
    raise UsageError(f"--only {fv.only!r} matches none of the {len(trials)} trials")
  for other, names in reused.items():
    selected = _without_reused(other, names, trials, selected)
  groups = sweep.cells(trials, selected, fv.batch)
  numbers = range(len(groups))
  if fv.cell is not None:
    if fv.cell >= len(groups):
      raise UsageError(f"--cell {fv.cell}: --batch {fv.batch} makes {len(groups)} cells (0..{len(groups) - 1})")
    groups, numbers = [groups[fv.cell]], [fv.cell]
  if fv.list:
    for n, cell in zip(numbers, groups):
      if fv.batch == 1:
        print(f"{trials[cell[0]].name}\t{trials[cell[0]].command}")
      else:
        print(f"cell-{n:03d}\t{_cell_command(argv, n)}")
    return
  _check_finished_trials_unchanged(workdir, trials, "give the overrides its slices ran with" if fv.record
                                   else "use another --workdir")
  workdir.mkdir(parents=True, exist_ok=True)
  try:
    record = sweep.new_record(spec, cli_overrides, trials, workdir)
  except SummaryError as e:
    raise UsageError(str(e)) from None
  if fv.record:
    _check_trials_trained_as_given(workdir, trials, record)
  else:
    _check_cells_resume_together(workdir, trials, record, groups, fv.batch)
  sweep.write_record(workdir / workdirs.SWEEP_RECORD, record)
  if fv.record:
    print(f"{sweep.progress_line(record['trials'], [])}; record in {workdir / workdirs.SWEEP_RECORD}")
    return
  running = [trials[i] for i in sorted(i for cell in groups for i in cell)]
  with compile_cache.persistent(workdir / compile_cache.DIRNAME), progress.labelled(_labels(running)):
    record = sweep.run(trials, workdir, record, groups)  # cells of one program compile it once
  failed = [trials[i].name for cell in groups for i in cell if record["trials"][i]["status"] == "failed"]
  if failed:  # a script's `nplace sweep && nplace report` stops here
    named = ", ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
    print(f"nplace sweep: {len(failed)} of {sum(map(len, groups))} trials failed ({named}: their errors are in "
          f"{workdir / workdirs.SWEEP_RECORD}); rerun the same command to retry them", file=sys.stderr)
    return 1


def _check_finished_trials_unchanged(workdir: epath.Path, trials: list[grid.PlannedTrial], advice: str) -> None:
  """UsageError when a trial that sweep.json shows finished would now train another config (a
  changed override or experiment file): the rerun would skip it, and the rewritten record would
  describe it by the new command. An old command that no longer reads (its file moved, or its
  config no longer validates) is let be."""
  # none, or not a record this command wrote: it is rewritten as before
  before = {e["name"]: e for e in sweep.recorded(workdir / workdirs.SWEEP_RECORD)}
  for t in trials:
    old = before.get(t.name)
    if old is None or old.get("status") not in sweep.FINISHED or old.get("command") == t.command:
      continue
    try:
      was, now = flatten(train.config_of(old["command"]).to_dict()), flatten(t.config.to_dict())
    except (UsageError, ConfigError):
      continue
    changed = _first_difference(was, now)
    if changed:
      raise UsageError(f"--workdir {workdir}: trial {t.name} finished with {changed}={was.get(changed)!r}, and this "
                       f"command gives {now[changed]!r}: a finished trial is not rerun, and its record would then "
                       f"describe it by this command; {advice}")


def _check_trials_trained_as_given(workdir: epath.Path, trials: list[grid.PlannedTrial], record: dict) -> None:
  """UsageError when a trial run elsewhere was saved with another config than this command gives
  it: --record would describe it by this command, and filing would judge it as that config."""
  for t, entry in zip(trials, record["trials"]):
    if entry["summary"] is None:
      continue
    try:
      saved, step = checkpoint.read_saved_config(workdir / t.name)
    except (FileNotFoundError, DataError):  # none, or damaged: its summary is all there is to record
      continue
    # both read as a saved config reads (tuples, not lists), on the keys it was saved with
    was, now = (flatten(from_saved(c).to_dict()) for c in (saved, t.config.to_dict()))
    changed = _first_difference(was, {k: now[k] for k in flatten(saved) if k in now})
    if changed:
      raise UsageError(f"--record: trial {t.name}'s checkpoint {step} was trained with {changed}="
                       f"{was.get(changed)!r}, and this command gives {now[changed]!r}: give the overrides "
                       "its slices ran with")


def _first_difference(was: dict, now: dict) -> str | None:
  """The first key (dotted) whose value `now` changes, the process layout (distributed.*) aside."""
  return next((k for k in now if not k.startswith("distributed.") and was.get(k) != now[k]), None)


def _check_cells_resume_together(workdir: epath.Path, trials: list[grid.PlannedTrial], record: dict,
                                 groups: list[list[int]], batch: int) -> None:
  """UsageError when a cell's unfinished trials hold checkpoints at no common step (they were
  started at another --batch): a cell resumes from a step all its runs hold, and it would fail
  only once reached, taking its unstarted trials with it."""
  for cell in groups:
    todo = [i for i in cell if record["trials"][i]["status"] not in sweep.FINISHED]
    if len(todo) < 2:  # a bucket's listings are slow: a lone trial resumes from its own
      continue
    held = {trials[i].name: checkpoint.held_steps(workdir / trials[i].name) for i in todo}
    if checkpoint.no_common_step(list(held.values())):
      newest = ", ".join(f"{name} at {max(steps) if steps else 'none'}" for name, steps in held.items())
      raise UsageError(f"--batch {batch}: the trials of one cell hold checkpoints at no common step (newest: "
                       f"{newest}), so they cannot resume together: rerun with the --batch (and --only) they "
                       "were started with, or --batch 1 to resume each alone")


def _labels(trials: list[grid.PlannedTrial]) -> dict[str, str]:
  """Trial name -> its progress lines' label, `12/84`: its place among the trials this command
  runs. Short where a name is not (150 characters; the keys that vary across a grid are most of
  them), and the same on a rerun, finished trials counted."""
  return {t.name: f"{k}/{len(trials)}" for k, t in enumerate(trials, 1)}


def _without_reused(other: str, names: set[str], trials: list[grid.PlannedTrial],
                    selected: list[int]) -> list[int]:
  """`selected` less the trials named `names`, of the variant `other` this grid reuses (same
  config): those are that variant's to run, and its filed results hold them."""
  kept = [i for i in selected if trials[i].name not in names]
  if not kept:
    raise UsageError(f"every selected trial is {other}'s, which this grid reuses: run them with --config {other}")
  if len(kept) < len(selected):
    print(f"sweep: {len(selected) - len(kept)} of the selected trials are {other}'s, which this grid "
          f"reuses: skipped (--config {other} runs them)", file=sys.stderr)
  return kept


def _cell_command(argv, n: int) -> str:
  """This command line, running cell `n` instead of listing: what a pod worker runs."""
  args = [a for a in argv if a not in ("--list", "--nolist")]
  if "--cell" in args:
    del args[args.index("--cell"):args.index("--cell") + 2]
  args = [a for a in args if not a.startswith("--cell=")]
  return shlex.join(["nplace", "sweep", *args, f"--cell={n}"])
