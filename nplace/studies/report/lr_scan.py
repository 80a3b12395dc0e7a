"""The learning-rate scan: final validation loss vs lr per configuration, and the best lr."""
import math

import numpy as np

from nplace.logs import plots
from nplace.studies import markdown, outcomes, runs as runs_lib
from nplace.studies.report import generic, study_a

LR = "optim.lr"


def scan(runs) -> dict:
  """{configuration label: {lr: [runs]}} over the runs that set optim.lr."""
  out = {}
  for group, members in runs_lib.groups(runs, skip=("seed", LR)).items():
    label = markdown.overrides_label(dict(group))
    for run in members:
      if LR in run.overrides:
        out.setdefault(label, {}).setdefault(float(run.overrides[LR]), []).append(run)
  return out


def mean_loss(runs) -> float:
  """Mean final validation loss over seeds; NaN when any seed failed (of any kind)."""
  if any(outcomes.failures(run.summary) for run in runs):
    return math.nan
  return float(np.mean([run.summary.val_loss for run in runs]))


def finite_mean_loss(runs) -> float:
  """Mean final validation loss over the seeds that stayed finite, failed or not: the figure
  shows where failing rates end (the table marks them)."""
  finite = [run.summary.val_loss for run in runs if "nonfinite" not in outcomes.failures(run.summary)]
  return float(np.mean(finite)) if finite else math.nan


def best_lr(by_lr: dict) -> float | None:
  """The lr with the lowest mean final validation loss among those where no seed failed."""
  losses = {lr: mean_loss(members) for lr, members in by_lr.items()}
  healthy = {lr: loss for lr, loss in losses.items() if not math.isnan(loss)}
  return min(healthy, key=healthy.get) if healthy else None


def cell(page, members) -> str:
  c = outcomes.counts(members)
  loss = markdown.mean_std([run.summary.val_loss for run in members
                            if "nonfinite" not in outcomes.failures(run.summary)])
  failed = f" **failed {c['failed']}/{len(members)}**" if c["failed"] else ""
  return f"{loss}{failed} {study_a.seed_links(page, members)}"


def section(page, source, key: str) -> str:
  done = runs_lib.finished(source.runs)
  table = scan(done)
  if not table:
    return "(no finished trials that set optim.lr)"
  lrs = sorted({lr for by_lr in table.values() for lr in by_lr})
  best = {label: best_lr(by_lr) for label, by_lr in table.items()}
  rows = [[label, *(cell(page, by_lr[lr]) if lr in by_lr else "" for lr in lrs),
           "-" if best[label] is None else f"{best[label]:g}"] for label, by_lr in table.items()]
  series = {}
  for label, by_lr in table.items():
    points = sorted((lr, finite_mean_loss(m)) for lr, m in by_lr.items())
    points = [(lr, loss) for lr, loss in points if not math.isnan(loss)]
    if points:
      series[label] = (np.array([p[0] for p in points]), np.array([p[1] for p in points]))
  figure = (page.figure(plots.curves(series, "peak learning rate", "final val loss (nats)", "LR scan",
                                     log_x=True, hlines=generic.reference_lines(done)),
                        f"{key}_lr_scan", "final validation loss vs learning rate")
            if series else "(every learning rate went non-finite: nothing to plot)")
  parts = ["Final validation loss (mean ± std over seeds) per peak learning rate; a failed seed "
           "(any kind in `nplace/studies/outcomes.py`) disqualifies its lr. Best lr: lowest mean among "
           "the lrs where no seed failed.",
           markdown.table(["configuration", *(f"lr {lr:g}" for lr in lrs), "best lr"], rows),
           figure, study_a.unfinished(source.runs), generic.run_table(page, source.runs),
           markdown.commands(source.runs)]
  return "\n\n".join(p for p in parts if p)
