"""Study B. A sweep's report (`section`): loss against the frequency-loss and entropy-rate lines,
the collapse verdict, layer x step heatmaps of token similarity and of the norm backward factor,
and the bottom/top residual-gradient ratio over training. Its results-page tables and figures
under a protocol (collapse.Measures): per arm and seed, the norms' accounting, the order of events."""
import numpy as np

from nplace.logs import plots
from nplace.probes import figures
from nplace.studies import collapse, markdown, outcomes, runs as runs_lib
from nplace.studies.collapse import BACKWARD, bottom_over_top
from nplace.studies.report import generic, study_a, tables
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


def no_operating_line(protocol) -> str:
  """Why study B's verdict tables have no false-positive rate or power column, as study A's and
  growth's three-way ones do (nplace/studies/three_way.py): its rule draws no interval or test
  statistic from the seeds, so there is no sampling distribution to simulate."""
  return (f" No claim here prints a false-positive rate or power: a claim holds only if it holds in every one of "
          f"the {protocol.seeds} seeds of its arm, and a mechanism claim only if, besides, every escaping run of the "
          "grid fails its test. No interval or test statistic is drawn from the seeds, so there is none to simulate: "
          "the seeds' values against the thresholds fix each verdict, its row names what would change it, and the "
          "verdicts with each threshold halved and doubled show how near each threshold sits.")


def clone_table(measures) -> str:
  """Per arm and seed: the top block's similarity at init, raw and centered; the mean backward
  factor at init and at the last probe; the smallest gradient ratio."""
  rows = []
  for arm in measures.arms:
    for t in measures.by_arm[arm]:
      similarity = [collapse.probe_series(t, name) for name in ("similarity", "similarity_centered")]
      factors, ratio = collapse.backward_factors(t), collapse.gradient_ratios(t)
      rows.append([arm, str(t.overrides.get(collapse.SEED)),
                   *(markdown.number(f[1][0, -1], 4) if f is not None else "-" for f in similarity),
                   f"{factors[1][0]:.3f} → {factors[1][-1]:.3f}" if factors is not None else "-",
                   f"{ratio[1].min():.2g}" if ratio is not None else "-",  # spans orders of magnitude
                   markdown.number(collapse.plateau_gap(t), 3)])
  return markdown.table(["arm", "seed", "top-block similarity at init", "centered", "mean backward factor, init → end",
                         "smallest gradient ratio", "plateau − frequency loss"], rows)


def accounting_table(measures) -> str:
  """At each probe step, per Post-LN arm (geometric mean over seeds): log10 of the measured
  bottom/top gradient ratio, the norms' share and the branches' (the rest)."""
  found = {arm: [collapse.accounting(t) for t in measures.by_arm[arm]] for arm in measures.arms}
  found = {arm: a for arm, a in found.items() if a and None not in a}
  if not found:
    return "No arm with its norms on the residual path was probed."
  steps = sorted(set.intersection(*(set(x.steps.tolist()) for a in found.values() for x in a)))

  def cell(accounts, step):
    at = [list(x.steps).index(step) for x in accounts]
    measured = np.mean([x.measured[i] for x, i in zip(accounts, at)])
    norms = np.mean([x.norms[i] for x, i in zip(accounts, at)])
    share = f" ({norms / measured:.0%})" if measured < 0 else ""
    return f"{measured:.2f} = {norms:.2f} + {measured - norms:.2f}{share}"
  rows = [[str(step), *(cell(a, step) for a in found.values())] for step in steps]
  return markdown.table(["probe step", *found], rows)


def share_table(measures) -> str:
  """Per Post-LN arm and seed, at the last read step: the change from init of log10 |dL/dh_1| /
  |dL/dh_L| and of the norms' log10 product, and the norms' share of it."""
  step = collapse.READ_STEPS[-1]
  rows = []
  for arm in measures.arms:
    for t in measures.by_arm[arm]:
      found = collapse.accounting(t)
      at = None if found is None else collapse.at_steps((found.steps, found.measured - found.measured[0]), (step,))
      if at is not None:
        norms = collapse.norms_change(t, (step,))
        rows.append([arm, str(t.overrides.get(collapse.SEED)), markdown.number(float(at[0]), 2),
                     markdown.number(norms, 2), f"{collapse.norms_share_of_change(t, step):.0%}"])
  return markdown.table(["arm", "seed", f"change of log10 ratio, init → step {step}", "the norms' change",
                         "the norms' share"], rows) if rows else "No arm with its norms on the residual path was probed."


def order_table(measures) -> str:
  """Per arm that starves and seed: the probe steps between which the gradient ratio fell below
  the threshold, the step the loss reached its plateau, and which came first."""
  rows = []
  for arm in measures.arms:
    for t, order in zip(measures.by_arm[arm], measures.orders(arm)):
      if order is None or order.starved is None:
        continue
      rows.append([arm, str(t.overrides.get(collapse.SEED)),
                   f"({order.last_unstarved if order.last_unstarved is not None else '-'}, {order.starved}]",
                   "-" if order.plateau is None else str(order.plateau), order.outcome])
  return markdown.table(["arm", "seed", "ratio falls below the threshold between probe steps",
                         "loss reaches its plateau at step", "first"], rows) if rows else "No arm's gradient starved."


def _mean_over_seeds(pairs, geometric=False):
  """(steps, mean) of several (steps, values) series over the steps they share; the geometric
  mean for a ratio spanning orders of magnitude."""
  steps = sorted(set.intersection(*(set(np.asarray(s).tolist()) for s, _ in pairs)))
  at = [[dict(zip(np.asarray(s).tolist(), v))[step] for s, v in pairs] for step in steps]
  means = [np.exp(np.mean(np.log(v))) if geometric else np.mean(v) for v in at]
  return np.array(steps), np.array(means)


def collapse_figures(page, key: str, measures) -> str:
  loss, ratio = {}, {}
  for arm in measures.arms:
    trials = measures.by_arm[arm]
    loss[arm] = _mean_over_seeds([tuple(zip(*t.loss)) for t in trials if t.loss])
    found = [collapse.gradient_ratios(t) for t in trials]
    if found and None not in found:
      ratio[arm] = _mean_over_seeds(found, geometric=True)
  factor = {arm: _mean_over_seeds(found) for arm in measures.arms
            if (found := [collapse.backward_factors(t) for t in measures.by_arm[arm]]) and None not in found}
  lines = tables.reference_lines(measures.by_arm[measures.arms[0]][0].summary)
  parts = [page.figure(plots.curves(loss, "step", "train loss (nats)", "train loss", hlines=lines,
                                    legend_above=True),
                       f"{key}_loss", "train loss over training, mean over seeds")]
  if ratio:
    parts.append(page.figure(plots.curves(ratio, "step", "|dL/dh_1| / |dL/dh_L|", "bottom/top gradient ratio",
                                          log_y=True, legend_above=True),
                             f"{key}_gradient_ratio", "bottom/top residual-gradient ratio over training, "
                                                      "geometric mean over seeds"))
  if factor:
    parts.append(page.figure(plots.curves(factor, "step", "mean |dL/dz| / |dL/dy| over the norm sites",
                                          "norm backward factor", legend_above=True, hlines={"1": 1.0}),
                             f"{key}_backward_factor", "the norm's backward factor over training, mean over the "
                             "sites after the first and over seeds (Pre-LN and Peri-LN: the branch-input norm, "
                             "off the residual path)"))
  return "\n\n".join(parts)
