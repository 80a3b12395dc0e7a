"""Writes report.md and its PNG figures for sweeps and runs: one section per directory, chosen by
what it holds (a study's grid or plain runs): failure tables, loss
curves against the frequency-loss and entropy-rate lines, probe heatmaps and fits, and the
command behind every run.

With --results RESULTS (the repository's results/), each DIR (a finished sweep) is filed as
RESULTS/<grid>_<variant>/ (summaries and logged losses, nplace/studies/results.py), and
RESULTS/README.md is regenerated from everything filed there, judged by each grid's protocol.
A trial trained otherwise than its grid declares it (steps, batch, seed, model, data, optimizer)
is refused; one filed before with other results is replaced only with --replace. RESULTS
changes only once every sweep is filed and the whole page is built: a failure leaves it as it
was."""

import os

from absl import flags
from etils import epath

from nplace.commands import train
from nplace.commands.flags import Command
from nplace.errors import UsageError
from nplace.studies import results, runs, staging
from nplace.studies.report import build, page


def _define(fv):
  flags.DEFINE_string("out", None, "report directory: report.md, figures/", flag_values=fv)
  flags.DEFINE_string("results", None, "the results directory to file the sweeps in and regenerate "
                      "(README.md, figures/) instead of writing --out", flag_values=fv)
  flags.DEFINE_bool("replace", False, "with --results: a trial filed before with other results is replaced "
                    "(else the filing is refused)", flag_values=fv)


COMMAND = Command("nplace report DIR... --out OUT | nplace report --results RESULTS [--replace] [SWEEP_DIR...]",
                  __doc__, _define, config="none", args=True, output_dirs=("out", "results"),
                  bucket_outputs=False)


def _file_and_regenerate(dirs, results_dir, replace: bool):
  """Files each sweep, then regenerates the page; what was filed is written with the page, so
  a failure anywhere leaves RESULTS as it was, and says so."""
  filed, lines = {}, []
  try:
    for d in dirs:
      print(f"filing {d}: reading its finished trials", flush=True)
      filing = results.file_sweep(d, results_dir, lambda run: train.config_of(run.command), filed, replace)
      filed[filing.study.path.name] = filing.study
      lines.append(_filed_line(d, filing))
    with staging.staged(results_dir) as staged:
      for study in filed.values():
        results.write(study, staged)
      path = page.write(results_dir, filed=filed, staged=staged)
  except runs.RunsError as e:
    raise runs.RunsError(f"{e} (nothing filed)" if dirs else str(e)) from None
  print("\n".join(lines), flush=True)
  return path


def _filed_line(d, filing) -> str:
  """`filed 6 trials of DIR in RESULTS/NAME (5 new, 1 unchanged; beside 344 filed before)`, and a
  line naming the trials it replaced."""
  counts = ", ".join(f"{len(names)} {what}" for what, names in
                     (("new", filing.added), ("unchanged", filing.unchanged), ("replaced", filing.replaced)) if names)
  beside = f"; beside {filing.kept} filed before" if filing.kept else ""
  n = len(filing.added) + len(filing.unchanged) + len(filing.replaced)
  line = f"filed {n} trials of {d} in {filing.study.path} ({counts}{beside})"
  if filing.replaced:
    line += f"\nreplaced {len(filing.replaced)} trials: {', '.join(filing.replaced)}"
  return line


def main(argv):
  fv, dirs = COMMAND.parse(argv)
  seen = {}
  for d in dirs:
    if not epath.Path(d).is_dir():
      raise UsageError(f"no such directory {d!r}")
    same = seen.setdefault(str(d).rstrip("/") if "://" in str(d) else os.path.realpath(d), d)
    if same is not d:
      raise UsageError(f"{same!r} and {d!r}: the same directory, named twice")
  if fv.results:
    if fv.out:
      raise UsageError("--out and --results: give one")
    if not epath.Path(fv.results).is_dir():
      raise UsageError(f"--results {fv.results!r}: no such directory")
    try:
      path = _file_and_regenerate(dirs, fv.results, fv.replace)
    except runs.RunsError as e:
      raise UsageError(str(e)) from None
    print(f"wrote {path} and its figures in {epath.Path(fv.results) / 'figures'}")
    return
  if not dirs:
    raise UsageError("name at least one sweep or run directory")
  if not fv.out:
    raise UsageError("--out is required")
  try:
    path, left_out = build.write(dirs, fv.out)
  except runs.RunsError as e:
    raise UsageError(str(e)) from None
  print(f"report: {path}")
  for directory, why in left_out.items():
    print(f"  left out {directory}: {why}")
