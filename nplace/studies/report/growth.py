"""Hidden-state growth over depth (study A's O(D) vs O(e^D)). A sweep's report (`section`): per-
layer mean |h|, entry-wise and data-wise variance at the first and the last probed step, with a
linear and an exponential fit per run. Its results-page tables and figures under a protocol
(depth_growth.Measures and SeedMeasures): the top layer over depth, the fits, the bound."""
import math

import numpy as np

from nplace.logs import plots
from nplace.studies import depth_growth, fits, growth_curves, markdown, runs as runs_lib
from nplace.studies.report import study_a, tables

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


def growth_table(measures) -> str:
  """Per arm and weight decay: the top layer's moments at each depth (init -> end), and the
  fits over depth of the values at the end."""
  rows = []
  for shape in measures.shapes:
    for arm in measures.arms:
      for quantity, title in depth_growth.QUANTITIES.items():
        depths, end = measures.top(arm, shape, quantity)
        _, init = measures.top(arm, shape, quantity, when=0)
        if not len(depths):
          continue
        p = depth_growth.power_fit(depths, end, measures.protocol.interval)
        rows.append([shape, arm, title,
                     ", ".join(f"{d}: {markdown.number(a, 3)} → {markdown.number(b, 3)}"
                               for d, a, b in zip(depths, init, end)),
                     "-" if math.isnan(p[0]) else markdown.ci(*p),
                     markdown.number(fits.linear(depths, end), 3), markdown.number(fits.exponential(depths, end), 3)])
  return markdown.table(["shape", "arm", "top layer", "depth: init → end", "exponent p of D^p [interval]",
                         "R² linear in D", "R² exponential in D"], rows)


def growth_losses_table(measures) -> str:
  """Per arm and weight decay: each depth's final train and validation loss (a trained model
  sits ~0.1 nats apart on the two; a wider gap is a measurement to check)."""
  rows = []
  for shape in measures.shapes:
    for arm in measures.arms:
      by_depth = sorted(measures.points.get((arm, shape), {}).items())
      rows.append([shape, arm, ", ".join(f"{d}: {markdown.number(t.summary.train_loss, 3)} / "
                                         f"{markdown.number(t.summary.val_loss, 3)}" for d, t in by_depth)])
  return markdown.table(["shape", "arm", "depth: final train / val loss"], rows)


def growth_figures(page, key: str, measures) -> str:
  parts = []
  for shape in measures.shapes:
    series = {arm: measures.top(arm, shape) for arm in measures.arms if len(measures.top(arm, shape)[0])}
    fig = plots.curves(series, f"depth D ({shape})", "top layer's mean |h| at the end", shape, log_y=True,
                       legend_above=True)
    parts.append(page.figure(fig, f"{key}_{shape}", f"top layer's mean |h| vs depth, {shape}"))
  return "\n\n".join(parts)


# A per-seed growth grid's fits shown per seed, by the metrics its protocol's claims judge: the
# exponent of the mean |h| and of the variance, the exponential test; the two columns' titles.
SEED_FITS = {
    "slope_rises": ("power_at_most", "variance_power_at_most", "slope_rises",
                    ("exponent p per seed", "slope rise per seed")),
    growth_curves.RATE: (growth_curves.LEVEL, growth_curves.LEVEL_VARIANCE, growth_curves.RATE,
                         ("exponent p of the level per seed", "rate r̂ of a + b(e^{rD} − 1)/r per seed")),
}


def growth_seed_table(measures) -> str:
  """Per arm and quantity, the growth above init at each depth (mean ± sd over seeds) and each
  seed's fits over depth, those the protocol's claims judge (`SEED_FITS`)."""
  exponential = next(c.metric for c in measures.protocol.claims if c.metric in SEED_FITS)
  mean_power, variance_power, test, titles = SEED_FITS[exponential]
  rows = []
  for arm in measures.arms:
    for quantity, metric in (("mean_abs", mean_power), ("var_entry", variance_power)):
      by_depth = []
      for depth in measures.depths:
        grown = [measures.top(arm, depth, s, quantity) - measures.top(arm, depth, s, quantity, when=0)
                 for s in measures.seeds if measures.top(arm, depth, s, quantity) is not None]
        by_depth.append(f"{depth}: {markdown.mean_std(grown, 3)}")
      rows.append([arm, depth_growth.QUANTITIES[quantity], ", ".join(by_depth),
                   tables.seed_values(measures.per_seed(metric, arm), 2),
                   tables.seed_values(measures.per_seed(test, arm), 3) if quantity == "mean_abs" else "-"])
  return markdown.table(["arm", "top layer", "depth: growth above init, mean ± sd over seeds", *titles], rows)


def growth_power_line(protocol, measures) -> str:
  """The design's power, from the declaration alone (depth_growth.detectable_rate); a
  three-way protocol states each claim's in its verdict table instead."""
  if not any(c.metric == "slope_rises" for c in protocol.claims):
    return "Each claim's false-positive rate and power: the verdict table's last column."
  rate = depth_growth.detectable_rate(measures.declared_depths, protocol.seeds, protocol.threshold("min_slope_rise"),
                                      protocol.threshold("assumed_log_noise"), protocol.interval)
  return (f"The design's power: with {protocol.seeds} seeds at depths {', '.join(map(str, measures.declared_depths))} and "
          f"per-seed noise {protocol.threshold('assumed_log_noise'):g} in log growth, growth e^(rD) is called "
          f"exponential with probability 0.8 from r = {rate:.3g} per layer.")


def growth_bound_table(measures, arms: dict) -> str:
  """Per Peri-LN arm and depth: the top layer's rms over its bound at init, 1 + 2 dt D (the
  embedding norm makes rms(h_0) = 1; each of the 2D sublayers adds dt times a unit-rms output),
  at init and at the horizon; mean over seeds."""
  rows = []
  for arm in measures.arms:
    overrides = arms[arm]
    if overrides.get("model.placement") != "peri":
      continue
    dt = float(overrides.get("model.dt", 1.0))
    cells = []
    for depth in measures.depths:
      bound = 1 + 2 * dt * depth
      ratios = [[measures.top(arm, depth, s, "rms", when) for s in measures.seeds] for when in (0, None)]
      cells.append(f"{depth}: " + " → ".join(markdown.mean_std([v / bound for v in r if v is not None], 2)
                                              for r in ratios))
    rows.append([arm, ", ".join(cells)])
  return markdown.table(["arm", "depth: rms(h_L) / (1 + 2 dt D), init → end"], rows)


def massive_table(measures) -> str:
  """The top layer's largest |h| (the "massive activation"), the largest over seeds, at init and
  at the horizon, and how far below float16's largest value it stays (bfloat16's is 3.4e38)."""
  rows = []
  for arm in measures.arms:
    cells = []
    for depth in measures.depths:
      init, end = ([measures.top(arm, depth, s, "max_abs", when) for s in measures.seeds] for when in (0, None))
      init, end = [v for v in init if v is not None], [v for v in end if v is not None]
      if end:
        cells.append(f"{depth}: {max(init):.3g} → {max(end):.3g} (float16 ×{depth_growth.FLOAT16_MAX / max(end):.3g})")
    rows.append([arm, ", ".join(cells) or "-"])
  return markdown.table(["arm", "depth: largest |h| init → end (float16 headroom)"], rows)


def growth_seed_figure(page, key: str, measures) -> str:
  series, left_out = {}, []
  for arm in measures.arms:
    grown = [measures.growth(arm, s) for s in measures.seeds]
    found = [f for f in grown if f is not None and all(g > 0 for g in f[1])]
    if found:
      series[arm] = (np.array(found[0][0]), np.exp(np.mean([np.log(g) for _, g in found], axis=0)))
    if len(found) < len(grown):  # a log axis cannot draw a growth <= 0
      left_out.append(f"{arm} {len(grown) - len(found)} of {len(grown)}")
  fig = plots.curves(series, "depth D", "top layer's mean |h| growth above init", "growth", log_y=True, log_x=True,
                     legend_above=True)
  return page.figure(fig, f"{key}_growth", "top layer's mean |h| at the end minus at init vs depth (log-log), "
                                          "geometric mean over seeds" + (
                         "; seeds whose growth is not positive at some depth are left out: " + ", ".join(left_out)
                         if left_out else ""))
