"""A scale ladder's results-page tables and figures (nplace/studies/ladder.py measures them): each
seed's maximum stable rate per arm and width, the earlier data's trials at the smallest width
beside them, the rate against size with the fitted lines and predictions, the trends, the
embedding norm's share of the lead, the blind prediction scored beside its baseline, and the
final loss against rate at every width."""
import dataclasses
import math

import numpy as np

from nplace.logs import plots
from nplace.studies import ladder, markdown, measures as measures_lib, results, three_way
from nplace.studies.report import study_a


def rate(edge: ladder.Edge) -> str:
  """`10^-1.5`; stable at the sweep's top `≥ 10^0`; stable at none `none`."""
  return "none" if edge.bound == ladder.CEILING else ("≥ " if edge.bound == ladder.FLOOR else "") + f"10^{edge.value:g}"


def _seeds(edges) -> str:
  return "-" if edges is None else ", ".join(rate(e) for e in edges)


def width_table(found, arg: str, measures: ladder.Ladder) -> str:
  """Per width: its heads, parameters and tokens per parameter, each arm's seeds' edges, and the
  first arm's tuned rates."""
  base = found.config(arg)
  tokens = base.train.steps * base.train.batch_size * base.data.seq_len
  first = measures.arms[0]
  rows = []
  for w in measures.widths:
    params = 10 ** measures.log_params[w]
    tuned = measures.tuned(first, w) if measures.ran(first, w) else None
    rows.append([str(w), shape_heads(measures, w), markdown.count(round(params)), f"{tokens / params:.2g}",
                 *(_seeds(measures.edges(a, w)) if measures.ran(a, w) else "not run" for a in measures.arms),
                 "-" if tuned is None else ", ".join(f"10^{t:g}" for t in tuned)])
  return markdown.table(["width", "heads", "parameters", "tokens / parameter",
                         *(f"{a}: each seed's maximum stable rate" for a in measures.arms),
                         f"{first}: each seed's tuned rate"], rows)


def beside_table(results_dir, repo, plan, measures: ladder.Ladder) -> str:
  """The earlier data's filed trials at the ladder's smallest width (judged by their own
  protocol's outcome rules), each arm's seeds beside the ladder's at that width."""
  spec, name = plan.beside
  filed = {study.path.name: study for study in results.studies(results_dir)}
  if name not in filed:
    return f"(no filed `{name}` to set beside it)"
  earlier_grid, arg = results.grid_of(filed[name], repo)
  study = results.with_reused(filed[name], earlier_grid, arg, filed)
  earlier = measures_lib.measures_for(earlier_grid.judged_by(arg)[0], study, earlier_grid, arg)
  width = measures.widths[0]
  shape = next(s for s in earlier.shapes if s.endswith(f"width {width}"))
  rows = []
  for arm in measures.arms:
    if arm not in earlier.arms:
      continue
    rates = [earlier.max_stable_lr(arm, shape, seed) for seed in earlier.seeds]
    rows.append([arm, ", ".join("none" if r is None else f"10^{math.log10(r):.2g}" for r in rates),
                 _seeds(measures.edges(arm, width))])
  data = earlier_grid.config(arg).data
  return markdown.table(["arm", f"`{spec}` ({shape}, {data.source} data): each seed's maximum stable rate",
                         f"this ladder at width {width} ({shape_heads(measures, width)}): each seed's"], rows)


def shape_heads(measures, width) -> str:
  heads = measures.heads[width]
  return f"{heads} heads of {width // heads}"


def beyond_params(found, plan, arms: dict) -> dict:
  """width -> log10 parameters of the widths the ladder predicts beyond this machine."""
  sweep = found.sweep(plan.beyond)
  return ladder.log_params(found.config(plan.beyond), sweep, arms)


def edge_figure(page, key: str, plan, measures: ladder.Ladder, beyond: dict) -> str:
  """Each seed's maximum stable rate against parameters per arm, the lines over the fit widths
  (dashed where they extrapolate), and the predictions with their intervals."""
  arms, targets = {}, {plan.blind_width: measures.log_params.get(plan.blind_width), **beyond}
  for color, arm in enumerate(measures.arms):
    seeds = [(10 ** measures.log_params[w], 10 ** e.value, e.bound) for w in measures.widths if measures.ran(arm, w)
             for e in (measures.edges(arm, w) or [])]
    line = measures.line(arm, plan.fit_widths)
    fit = beyond_line = ([], [])
    predicted = []
    if not isinstance(line, str) and seeds:
      xs = np.array([line.x[w] for w in line.widths])
      ahead = np.array([xs[-1], *sorted(x for x in targets.values() if x is not None)])
      at = lambda x: line.at(x)[0]
      fit = (10 ** xs, 10 ** np.array([at(x) for x in xs]))
      beyond_line = (10 ** ahead, 10 ** np.array([at(x) for x in ahead]))
      predicted = [(10 ** x, *(10 ** np.array(line.at(x)))) for x in ahead[1:]]
    arms[arm] = {"seeds": seeds, "fit": fit, "beyond": beyond_line, "predicted": predicted, "color": color}
  fig = plots.ladder(arms, "parameters", "maximum stable learning rate")
  return page.figure(fig, f"{key}_edges", "maximum stable learning rate against parameters: dots each seed "
                     "(triangles up: stable at the width's top rate, down: stable at none), lines the least-squares "
                     f"fit over widths {', '.join(map(str, plan.fit_widths))} (dashed where it extrapolates), "
                     "hollow diamonds the predictions with their 95% intervals")


def trend_table(plan, measures: ladder.Ladder, protocol) -> str:
  """The slope of each arm's edge, of the gaps the claims and the plan name, and of the first
  arm's tuned-to-edge distance, against log10 parameters: described beside the verdicts."""
  rows = []
  for arm in measures.arms:
    widths = tuple(w for w in measures.widths if measures.ran(arm, w))
    rows.append([f"{arm}'s maximum stable rate", _slope(measures.line(arm, widths))])
  gaps = [(c.better, c.worse) for c in protocol.claims if c.metric == ladder.GAP_WITHIN] + list(plan.described)
  for better, worse in dict.fromkeys(gaps):
    rows.append([f"{better} − {worse}", _slope(measures.gap_trend(better, worse))])
  for c in protocol.claims:
    if c.metric == ladder.DISTANCE_BELOW:
      rows.append([f"{c.arm}: maximum stable rate − tuned rate", _slope(measures.sample(c, protocol))])
  return markdown.table(["decades of rate per decade of parameters", "slope [95% interval] (widths)"], rows)


def _slope(trend) -> str:
  if isinstance(trend, str):
    return f"not measured: {trend}"
  return f"{markdown.ci(trend.slope(), *trend.slope_interval())} ({', '.join(map(str, trend.widths))})"


def share_table(plan, measures: ladder.Ladder) -> str:
  pre, peri, embed = plan.share
  rows = []
  for w in measures.widths:
    found = measures.share(w, pre, peri, embed)
    rows.append([str(w), "- (no lead, or an arm not run)" if found is None else markdown.ci(*found)])
  return markdown.table(["width", f"({embed} − {pre}) / ({peri} − {pre}), mean [95% interval]"], rows)


def prediction_table(plan, measures: ladder.Ladder, beyond: dict, protocol) -> str:
  """Each arm's line at the blind width and beyond: the prediction with its interval; at the
  blind width, once run, the measured median scored beside the baseline (the last fit width's)."""
  tolerance = protocol.threshold("lr_tolerance")
  last = plan.fit_widths[-1]
  rows = []
  for arm in measures.arms:
    committed = (plan.predicted or {}).get(arm)
    fitted = measures.predict(arm, plan.fit_widths, measures.log_params.get(plan.blind_width, math.nan))
    if committed is None and (fitted is None or not math.isfinite(fitted[0])):
      continue
    blind = measures.edges(arm, plan.blind_width) if measures.ran(arm, plan.blind_width) else None
    cells = ["committed " + markdown.ci(*committed) if committed else "not committed"]
    if committed and blind is not None:
      median = ladder.median_edge(blind)
      baseline = ladder.median_edge(measures.edges(arm, last))
      cells += [rate(median), f"**{ladder.scored(committed[0], median, tolerance, measures.step)}**",
                f"{rate(baseline)}: **{ladder.scored(baseline.value, median, tolerance, measures.step)}**"]
    else:
      cells += ["not run", "-", "-"]
    for w, x in beyond.items():
      found = measures.predict(arm, plan.fit_widths, x)
      cells.append("-" if found is None else markdown.ci(*found))
    rows.append([arm, *cells])
  if not rows:
    return f"(No line yet: widths {', '.join(map(str, plan.fit_widths))} are not all filed.)"
  return markdown.table(["arm", f"predicted at width {plan.blind_width} (log10 rate) [95% interval]",
                         f"measured at {plan.blind_width} (median seed)", f"right within {tolerance:g} decades",
                         f"baseline: width {last}'s median, right", *(f"predicted at {w}" for w in beyond)], rows)


def observed_power(protocol, measures: ladder.Ladder) -> dict:
  """Claim id -> the power of its test at the effect it observed (the smallest width's lead of a
  separation, a trend's slope)."""
  found = {}
  for claim in protocol.claims:
    data = three_way.sample(claim, protocol, measures)
    if isinstance(data, str):
      continue
    effect = (data.slope() if isinstance(data, ladder.Trend) else
              min(np.mean([e.value for e in b]) - np.mean([e.value for e in w]) for b, w in data.by_width.values()))
    _, power = three_way.operating(dataclasses.replace(claim, power_at=float(effect)), protocol, measures,
                                   protocol.bootstrap_seed)
    found[claim.id] = f"{power:.2f} at {effect:.2g} observed"
  return found


def body(s, measures: ladder.Ladder) -> list[str]:
  """The section's tables and figures after its verdicts."""
  plan, protocol = s.protocol.ladder, s.protocol
  beyond = beyond_params(s.grid, plan, protocol.arms)
  return ["### Per width", study_a.training_line(s.grid, s.arg, measures.sweep),
          "A seed's maximum stable rate: the largest rate of its width's sweep at which it learned and never blew "
          "up. Its tuned rate: the rate of its lowest final validation loss (a diverged run at ln V).",
          width_table(s.grid, s.arg, measures),
          f"### Beside the earlier data at width {measures.widths[0]}",
          "The same arms, weight decay and budget on the synthetic language (the placements grid, judged by protocol "
          "4's outcome rules) beside this ladder's smallest width on Tiny Shakespeare: no new synthetic runs.",
          beside_table(s.study.path.parent, s.repo, plan, measures),
          "### Maximum stable rate against size", edge_figure(s.page, s.key, plan, measures, beyond),
          "### Trends against size (described)", trend_table(plan, measures, protocol),
          "### The embedding norm's share of Peri-LN's lead", share_table(plan, measures),
          "### The blind prediction",
          f"Each arm's least-squares line over widths {', '.join(map(str, plan.fit_widths))}, committed before width "
          f"{plan.blind_width}'s first trial, scored at the grid rate nearest it: right when width {plan.blind_width}'s "
          "median seed is a rate of its sweep within the tolerance of it, wrong when it is not (or a bound puts it "
          "beyond), not measured when a bound leaves both possible; the baseline, width "
          f"{plan.blind_width} is width {plan.fit_widths[-1]} again, is scored the same way. "
          f"Widths {', '.join(map(str, beyond))} (`{plan.beyond}`, not run here): the same lines, the gpu tier's "
          "pre-registered prediction.", prediction_table(plan, measures, beyond, protocol),
          "### Final loss vs learning rate", study_a.sweep_figures(s.page, s.key, measures.sweep),
          "### Every grid point", study_a.outcome_table(protocol, measures.sweep)]
