"""Study B: loss against the frequency-loss and entropy-rate lines, the collapse verdict,
layer x step heatmaps of token similarity and of the norm backward factor, and the
bottom/top residual-gradient ratio over training."""
import numpy as np

from nplace.logs import plots
from nplace.probes import figures
from nplace.studies import outcomes
from nplace.studies.collapse import BACKWARD, bottom_over_top
from nplace.studies.report import generic, markdown, runs as runs_lib, study_a
from nplace.train.summary import COLLAPSE_MARGIN, collapsed


def verdict_table(page, runs) -> str:
  rows = []
  for run in runs:
    s = run.summary
    verdict = markdown.number(bool(collapsed(s.val_loss, s.frequency_loss))) if s.val_loss is not None else "-"
    steps, values = runs_lib.scalars(run).get("train/loss", ((), ()))
    on_plateau = (outcomes.plateau(list(zip(steps, values)), s.frequency_loss, COLLAPSE_MARGIN)
                  if s.frequency_loss is not None else None)
    rows.append([page.link(run.name, run.path), markdown.overrides_label(run.overrides), run.status,
                 markdown.number(s.val_loss), markdown.number(s.frequency_loss),
                 markdown.number(s.entropy_rate), verdict, markdown.number(on_plateau)])
  return markdown.table(["run", "overrides", "status", "val loss", "frequency loss", "entropy rate",
                         "collapsed", "collapsed on the plateau"], rows)


def gradient_ratio(run):
  """(steps, |dL/dh_1| / |dL/dh_L|) from the grad_h probe; None without it."""
  history = runs_lib.probes(run).get("grad_h")
  if history is None or not len(history.steps):
    return None
  return np.asarray(history.steps), bottom_over_top(history.values)


def backward_summary(run):
  """(name, [(step, mean, min, product)] at the first and last probe) of the norm backward
  factor over the norm sites after the first; None without the probe. The first site reads the
  embedding, not a block's output: its factor says nothing about the stack and can dominate
  a product of 2L."""
  history = runs_lib.probes(run)
  name = next((b for b in BACKWARD if b in history), None)
  if name is None or not len(history[name].steps):
    return None
  h = history[name]
  rows = []
  for i in (0, -1):
    factors = np.asarray(h.values[i], np.float64)[1:]
    rows.append((int(h.steps[i]), float(factors.mean()), float(factors.min()), float(np.prod(factors))))
  return name, rows


def backward_part(page, runs) -> list[str]:
  rows = []
  for run in runs:
    found = backward_summary(run)
    if found:
      name, ((s0, mean0, min0, prod0), (s1, mean1, min1, prod1)) = found
      rows.append([page.link(run.name, run.path), f"`{name}`", f"{s0} → {s1}",
                   f"{markdown.number(mean0, 3)} → {markdown.number(mean1, 3)}",
                   f"{markdown.number(min0, 3)} → {markdown.number(min1, 3)}",
                   f"{markdown.number(prod0, 2)} → {markdown.number(prod1, 2)}"])
  if not rows:
    return []
  return ["Norm backward factor over the norm sites after the first (the first reads the embedding), "
          "first → last probed step:",
          markdown.table(["run", "probe", "steps", "mean factor", "min factor", "product"], rows)]


def heatmaps(page, run, key: str) -> list[str]:
  history = runs_lib.probes(run)
  out = []
  for name in ("similarity", "similarity_centered", next((b for b in BACKWARD if b in history), None)):
    if name in history:
      h = history[name]
      fig = figures.heatmap(name, h.steps, h.values, h.kind, h.labels)  # the name picks its scale
      fig.axes[0].set_title(f"{run.name}: {name} over training")
      out.append(page.figure(fig, f"{key}_{run.name}_{name}", f"{name} of {run.name}, layer x step"))
  return out


def ratio_part(page, runs, key: str) -> list[str]:
  ratios = {run.name: (run, gradient_ratio(run)) for run in runs}
  ratios = {name: (run, r) for name, (run, r) in ratios.items() if r is not None}
  if not ratios:
    return ["(no grad_h probe histories: set probe.every)"]
  fig = plots.curves({name: r for name, (_, r) in ratios.items()}, "step", "|dL/dh_1| / |dL/dh_L|",
                     "bottom/top residual-gradient ratio", log_y=True)
  rows = [[page.link(name, run.path), markdown.overrides_label(run.overrides),
           markdown.number(float(r[1][0])), markdown.number(float(r[1][-1])), str(int(r[0][-1]))]
          for name, (run, r) in ratios.items()]
  return [page.figure(fig, f"{key}_grad_ratio", "bottom/top residual-gradient ratio over training"),
          markdown.table(["run", "overrides", "ratio, first probe", "ratio, last probe", "last step"], rows)]


def section(page, source, key: str) -> str:
  done = runs_lib.finished(source.runs)
  if not done:
    return "(no finished trials)"
  intro = (f"`collapsed`: final validation loss within {COLLAPSE_MARGIN} nats of the "
           "frequency loss (`nplace/train/summary.py`); on the plateau: the mean train loss over the "
           "last quarter of the run within the same margin (`outcomes.plateau`). Gradient ratio: residual-stream gradient norm "
           "at block 1 over block L (grad_h probe); it falls by orders of magnitude when the "
           "lower layers starve.")
  parts = [intro, verdict_table(page, done), generic.loss_curves(page, done, key),
           *ratio_part(page, done, key), *backward_part(page, done)]
  for run in done:
    parts += heatmaps(page, run, key)
  return "\n\n".join(p for p in [*parts, study_a.unfinished(source.runs), markdown.commands(source.runs)] if p)
