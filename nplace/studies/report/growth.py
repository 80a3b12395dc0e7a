"""Hidden-state growth over depth (study A's O(D) vs O(e^D)): per-layer mean |h|, entry-wise
and data-wise variance at the first and the last probed step, with a linear and an
exponential fit per run."""
import numpy as np

from nplace.logs import plots
from nplace.studies import fits
from nplace.studies.report import markdown, runs as runs_lib, study_a

QUANTITIES = {"mean_abs": "mean |h|", "var_entry": "entry-wise variance", "var_data": "data-wise variance"}
WHEN = {"first": 0, "last": -1}  # which probed step: index into the history


def profiles(run, name: str) -> dict | None:
  """{"first"/"last": (step, layer indices 1..L, values)} of probe `name`; None without it."""
  history = runs_lib.probes(run).get(name)
  if history is None or not len(history.steps):
    return None
  layers = np.array([int(label.rsplit("_", 1)[-1]) for label in history.labels])
  return {when: (int(history.steps[i]), layers, np.asarray(history.values[i], np.float64))
          for when, i in WHEN.items()}


def fit_cells(layers, values) -> list[str]:
  r2_lin, r2_exp = fits.linear(layers, values), fits.exponential(layers, values)
  return [markdown.number(values[0]), markdown.number(values[-1]), markdown.number(r2_lin),
          markdown.number(r2_exp), fits.better(r2_lin, r2_exp)]


def section(page, source, key: str) -> str:
  done = [run for run in runs_lib.finished(source.runs) if profiles(run, "mean_abs")]
  if not done:
    return "(no finished trials with probe histories: set probe.every)"
  rows, parts = [], []
  for name, title in QUANTITIES.items():
    for run in done:
      p = profiles(run, name)
      if p:
        rows.append([page.link(run.name, run.path), title,
                     *(cell for when in WHEN for cell in [str(p[when][0]), *fit_cells(*p[when][1:])])])
    for when in WHEN:
      series = {run.name: profiles(run, name)[when][1:] for run in done if profiles(run, name)}
      fig = plots.curves(series, "layer l (block output h_l)", title,
                         f"{title} vs depth, {when} probed step", log_y=True)
      parts.append(page.figure(fig, f"{key}_{name}_{when}", f"{title} vs depth at the {when} probed step"))
  per_when = ["step", "layer 1", "layer L", "R² linear", "R² exp", "better"]
  header = ["run", "quantity", *(f"{h} ({when})" for when in WHEN for h in per_when)]
  intro = ("Fits over layers l = 1..L: linear `a + b l` and exponential `A e^(c l)` (least squares "
           "on log y), both scored by R² on the values themselves; `better` is the higher R². "
           "First = the first probed step (step 0: init), last = the last probed step.")
  return "\n\n".join([intro, markdown.table(header, rows), *parts, study_a.unfinished(source.runs),
                      markdown.commands(source.runs)])
