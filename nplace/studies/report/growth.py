"""Hidden-state growth over depth (study A's O(D) vs O(e^D)). A sweep's report (`section`): per-
layer mean |h|, entry-wise and data-wise variance at the first and the last probed step, with a
linear and an exponential fit per run. Its results-page tables and figures under a protocol
(depth_growth.SeedMeasures): the growth above init over depth and its fits per seed, the level's
exponents beside Peri-LN's bound, the largest activation."""
import numpy as np

from nplace.logs import plots
from nplace.studies import depth_growth, fits, markdown, runs as runs_lib
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


POWER_LINE = "Each claim's false-positive rate and power: the verdict table's last column."


def growth_seed_table(measures) -> str:
  """Per arm and quantity, the growth above init at each depth (mean ± sd over seeds) and each
  seed's fits over depth: the exponent of the level, and the rate the claims judge."""
  rows = []
  for arm in measures.arms:
    for quantity in ("mean_abs", "var_entry"):
      by_depth = []
      for depth in measures.depths:
        grown = [measures.top(arm, depth, s, quantity) - measures.top(arm, depth, s, quantity, when=0)
                 for s in measures.seeds if measures.top(arm, depth, s, quantity) is not None]
        by_depth.append(f"{depth}: {markdown.mean_std(grown, 3)}")
      rows.append([arm, depth_growth.QUANTITIES[quantity], ", ".join(by_depth),
                   tables.seed_values(measures.exponents(arm, quantity), 2),
                   tables.seed_values(measures.rates(arm), 3) if quantity == "mean_abs" else "-"])
  return markdown.table(["arm", "top layer", "depth: growth above init, mean ± sd over seeds",
                         "exponent p of the level per seed", "rate r̂ of a + b(e^{rD} − 1)/r per seed"], rows)


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


def level_exponent_part(protocol, measures, arms: dict) -> list[str]:
  """Every arm's exponent of its top layer's level over depth, with its interval over the seeds, as
  a description beside Peri-LN's bound: the output norms bound Peri-LN's level by construction, so
  its exponents under 1 (mean |h|) and 2 (variance) tell it from Pre-LN only where Pre-LN's are
  not under them too."""
  bounded = [arm for arm in measures.arms if arms[arm].get("model.placement") == "peri"]
  others = [arm for arm in measures.arms if arm not in bounded]
  bound = depth_growth.BOUND_EXPONENT
  found = {arm: {q: measures.exponent(arm, q) for q in bound} for arm in measures.arms}
  text = (f"A description, not a claim of the seed's. {_listed(bounded)} bound their level by construction: each of "
          "the 2D sublayers adds dt times a norm's output, whose rms the norm's learned scale and bias bound (1 at "
          "init), so rms(h_L) ≤ rms(h_0) + 2 dt D times that bound, and the top layer's mean |h| (at most its rms) can "
          "grow at most linearly in D, its entry-wise variance (at most its mean square) at most quadratically. "
          f"Below, the exponent p of each level's D^p at the end, fitted per seed over the depths: mean "
          f"[{protocol.interval:.0%} interval over the {protocol.seeds} seeds].")
  exceed = [f"{arm}'s {depth_growth.QUANTITIES[q]}" for arm in others for q in bound if not found[arm][q][2] <= bound[q]]
  if others and exceed:
    text += f" Beside them, the interval of {_listed(exceed)} reaches above its bound."
  elif others:
    judged = ", ".join(f"`{claim.id}`" for claim in protocol.claims)
    text += (f" The exponents of {_listed(others)} lie under the same bounds (every interval's top at most "
             f"{bound['mean_abs']:g} for the mean |h|, {bound['var_entry']:g} for the variance): they do not separate "
             f"the placements as the seed's claim (Peri-LN O(D), Pre-LN O(e^D)) does, which is judged on Pre-LN's "
             f"growth above init ({judged}).")
  header = ["arm", *(f"exponent p of the {depth_growth.QUANTITIES[q]}".replace("|", "\\|") for q in bound)]
  return [text, markdown.table(header, [[arm, *(markdown.ci(*found[arm][q]) for q in bound)] for arm in measures.arms])]


def _listed(items) -> str:
  """`a`, `a and b`, `a, b and c`."""
  return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1]


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
