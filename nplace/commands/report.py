"""Writes report.md and its PNG figures for sweeps and runs: one section per directory, chosen by
what it holds (a study's grid, a learning-rate scan, or plain runs): failure tables, loss
curves against the frequency-loss and entropy-rate lines, probe heatmaps and fits, and the
command behind every run."""
from absl import flags
from etils import epath

from nplace.commands.flags import Command
from nplace.errors import UsageError
from nplace.studies.report import build, runs


def _define(fv):
  flags.DEFINE_string("out", None, "report directory: report.md, figures/ (required)", flag_values=fv)


COMMAND = Command("nplace report DIR... --out OUT", __doc__, _define, config="none", args=True)


def main(argv):
  fv, dirs = COMMAND.parse(argv)
  if not dirs:
    raise UsageError("name at least one sweep or run directory")
  if not fv.out:
    raise UsageError("--out is required")
  for d in dirs:
    if not epath.Path(d).is_dir():
      raise UsageError(f"no such directory {d!r}")
  try:
    path = build.write(dirs, fv.out)
  except runs.RunsError as e:
    raise UsageError(str(e)) from None
  print(f"report: {path}")
