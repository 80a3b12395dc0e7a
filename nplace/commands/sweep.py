"""Runs an experiment grid: the experiment file's get_sweep(ARG) expanded into trials, run one
after another in this process, each in DIR/<trial>/ with its own summary and event files.
Rerunning the same command skips finished trials and resumes an interrupted one; a trial that
fails is recorded and the sweep goes on. DIR/sweep.json holds every trial's status and
summary. --list prints each trial's `nplace train` command instead (one per pod worker)."""
import pathlib
import re

from absl import flags

from nplace.commands.flags import Command
from nplace.errors import UsageError
from nplace.studies import grid, sweep
from nplace.train.summary import SummaryError


def _define(fv):
  flags.DEFINE_string("workdir", None, "sweep directory: one subdirectory per trial, and sweep.json (required)",
                      flag_values=fv)
  flags.DEFINE_string("only", None, "run only the trials whose name matches this regex", flag_values=fv)
  flags.DEFINE_bool("list", False, "print each trial's name and `nplace train` command; run nothing",
                    flag_values=fv)


COMMAND = Command("nplace sweep --config FILE[:ARG] --workdir DIR [--only REGEX] [--list] [--config.KEY=VALUE ...]",
                  __doc__, _define)


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
  if not fv.workdir:
    raise UsageError("--workdir is required")
  spec, cli_overrides = config_args(argv)
  workdir = pathlib.Path(fv.workdir)
  try:
    trials = grid.expand(spec, fv.config, cli_overrides, workdir)
    only = re.compile(fv.only) if fv.only else None
  except grid.GridError as e:
    raise UsageError(str(e)) from None
  except re.error as e:
    raise UsageError(f"--only {fv.only!r}: {e}") from None
  selected = [i for i, t in enumerate(trials) if only is None or only.search(t.name)]
  if not selected:
    raise UsageError(f"--only {fv.only!r} matches none of the {len(trials)} trials")
  if fv.list:
    for i in selected:
      print(f"{trials[i].name}\t{trials[i].command}")
    return
  workdir.mkdir(parents=True, exist_ok=True)
  try:
    record = sweep.new_record(spec, cli_overrides, trials, workdir)
  except SummaryError as e:
    raise UsageError(str(e)) from None
  sweep.write_record(workdir / "sweep.json", record)
  sweep.run(trials, workdir, record, selected)
