"""`nplace report DIR... --out OUT`: report.md and PNG figures for sweeps and runs."""
import pathlib

from absl import flags

from nplace.report import build, runs


def main(argv):
  from nplace.cli import UsageError
  fv = flags.FlagValues()
  flags.DEFINE_string("out", None, "report directory (report.md, figures/)", flag_values=fv)
  try:
    dirs = fv(["nplace", *argv])[1:]
  except flags.Error as e:
    raise UsageError(str(e)) from None
  if not dirs:
    raise UsageError("name at least one sweep or run directory")
  if not fv.out:
    raise UsageError("--out is required")
  for d in dirs:
    if not pathlib.Path(d).is_dir():
      raise UsageError(f"no such directory {d!r}")
  try:
    path = build.write(dirs, fv.out)
  except runs.RunsError as e:
    raise UsageError(str(e)) from None
  print(f"report: {path}")
