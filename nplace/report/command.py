"""`nplace report DIR... --out OUT`: report.md and PNG figures for sweeps and runs."""
import pathlib

from absl import flags

from nplace.report import build, runs


def main(argv):
  from nplace.cli import UsageError, parse_flags
  fv, dirs = parse_flags(argv, lambda f: flags.DEFINE_string("out", None, "report directory", flag_values=f),
                         need_config=False, positional=True)
  if not dirs:
    raise UsageError("give at least one run or sweep directory")
  if not fv.out:
    raise UsageError("--out is required")
  for d in dirs:
    if not pathlib.Path(d).is_dir():
      raise UsageError(f"no such directory {d!r}")
  try:
    path = build.write(dirs, fv.out)
  except runs.NoRuns as e:
    raise UsageError(str(e)) from None
  print(f"report: {path}")
