"""Writes report.md and its PNG figures for sweeps and runs: one section per directory, chosen by
what it holds (a study's grid or plain runs): failure tables, loss
curves against the frequency-loss and entropy-rate lines, probe heatmaps and fits, and the
command behind every run.

With --results RESULTS (the repository's results/), each DIR (a finished sweep) is filed as
RESULTS/<grid>_<variant>/ (summaries and logged losses, nplace/studies/results.py), and
RESULTS/README.md is regenerated from everything filed there, judged by each grid's protocol."""
import shlex

from absl import flags
from etils import epath

from nplace.commands import train
from nplace.commands.flags import Command
from nplace.errors import UsageError
from nplace.studies import results, runs
from nplace.studies.report import build, page


def _define(fv):
  flags.DEFINE_string("out", None, "report directory: report.md, figures/", flag_values=fv)
  flags.DEFINE_string("results", None, "the results directory to file the sweeps in and regenerate "
                      "(README.md, figures/) instead of writing --out", flag_values=fv)


COMMAND = Command("nplace report DIR... --out OUT | nplace report --results RESULTS [SWEEP_DIR...]",
                  __doc__, _define, config="none", args=True, output_dirs=("out", "results"))


def _trained_config(run):
  """The config the trial's `nplace train` command trains."""
  return train.COMMAND.parse(shlex.split(run.command)[2:], check_outputs=False)[0].config


def main(argv):
  fv, dirs = COMMAND.parse(argv)
  for d in dirs:
    if not epath.Path(d).is_dir():
      raise UsageError(f"no such directory {d!r}")
  if fv.results:
    if fv.out:
      raise UsageError("--out and --results: give one")
    if not epath.Path(fv.results).is_dir():
      raise UsageError(f"--results {fv.results!r}: no such directory")
    try:
      for d in dirs:
        study, kept = results.export(d, fv.results, _trained_config)
        print(f"filed {len(study.trials) - kept} trials of {d} in {study.path}"
              + (f" (beside {kept} filed before)" if kept else ""))
      path = page.write(fv.results)
    except runs.RunsError as e:
      raise UsageError(str(e)) from None
    print(f"results: {path}")
    return
  if not dirs:
    raise UsageError("name at least one sweep or run directory")
  if not fv.out:
    raise UsageError("--out is required")
  try:
    path = build.write(dirs, fv.out)
  except runs.RunsError as e:
    raise UsageError(str(e)) from None
  print(f"report: {path}")
