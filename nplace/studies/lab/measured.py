"""`nplace lab --all`: what the filed grids measured, not a prediction. Each configuration's
maximum stable learning rate by size: the scale ladder's arms at every width it ran (Tiny
Shakespeare), and every placement of the placements grid at its one shape (the synthetic
language); with a width, the ladder's fitted line there, with its interval, labelled an
extrapolation outside the widths it was fitted over."""
import math
import pathlib

from nplace.errors import UsageError
from nplace.studies import grid, ladder, markdown, measures as measures_lib, results
from nplace.studies import runs as runs_lib

LADDER, PLACEMENTS = "ladder_cpu", "stability_placements"  # results directories


def _study(results_dir: pathlib.Path, name: str):
  """(the filed study with the trials it reuses, its GRID, ARG), or None where not filed."""
  if not (results_dir / name / results.GRID).is_file():
    return None
  try:
    filed = {s.path.name: s for s in results.studies(results_dir)}
    grid_file, arg = results.grid_of(filed[name])
    return results.with_reused(filed[name], grid_file, arg, filed), grid_file, arg
  except runs_lib.RunsError as e:
    raise UsageError(f"--all: {e}") from None


def ladder_rows(found) -> tuple[list[str], list[list[str]], ladder.Ladder]:
  study, grid_file, arg = found
  measures = measures_lib.measures_for(grid_file.judged_by(arg)[0], study, grid_file, arg)
  header = ["configuration", "data", *(f"width {w}" for w in measures.widths)]
  rows = []
  for arm in measures.arms:
    cells = []
    for w in measures.widths:
      edges = measures.edges(arm, w) if measures.ran(arm, w) else None
      cells.append("-" if edges is None else
                   f"{_rate(ladder.median_edge(edges))} ({', '.join(_rate(e) for e in edges)})")
    rows.append([arm, grid_file.config(arg).data.source, *cells])
  return header, rows, measures


def _rate(edge: ladder.Edge) -> str:
  return "none" if edge.bound == ladder.CEILING else ("≥" if edge.bound == ladder.FLOOR else "") + f"{10 ** edge.value:.2g}"


def placement_rows(found, width_columns: int) -> list[list[str]]:
  study, grid_file, arg = found
  measures = measures_lib.measures_for(grid_file.judged_by(arg)[0], study, grid_file, arg)
  rows = []
  for shape in measures.shapes:
    for arm in measures.arms:
      rates = sorted((measures.max_stable_lr(arm, shape, seed) for seed in measures.seeds),
                     key=lambda r: -math.inf if r is None else r)
      shown = ["none" if r is None else f"{r:.2g}" for r in rates]
      rows.append([arm, f"{grid_file.config(arg).data.source} ({shape})",
                   f"{shown[len(shown) // 2]} ({', '.join(shown)})", *["-"] * (width_columns - 1)])
  return rows


def report(results_dir, width: int | None = None) -> tuple[str, dict]:
  """The table `nplace lab --all` prints (and with `width`, the ladder's fit there), and its JSON."""
  results_dir = pathlib.Path(results_dir)
  found_ladder, found_placements = _study(results_dir, LADDER), _study(results_dir, PLACEMENTS)
  if found_ladder is None and found_placements is None:
    raise UsageError(f"--all: {results_dir}: neither {LADDER}/ nor {PLACEMENTS}/ is filed there "
                     "(--results names the results directory)")
  parts, out = [], {"measured": [], "fit": None}
  header, rows, measures = (ladder_rows(found_ladder) if found_ladder else (["configuration", "data", "width 32"],
                                                                           [], None))
  if found_placements:
    rows += placement_rows(found_placements, len(header) - 2)
  parts.append("Maximum stable learning rate measured, median seed (each seed): the largest rate of the sweep at "
               "which the run learned and never blew up; ≥: stable at the sweep's top; none: stable at no rate.")
  parts.append(markdown.table(header, rows))
  out["measured"] = [dict(zip(header, row)) for row in rows]
  if width is not None:
    if measures is None:
      raise UsageError(f"--width {width}: no filed {LADDER}/ to fit")
    parts.append(fit_table(found_ladder, measures, width, out))
  return "\n\n".join(parts), out


def fit_table(found, measures: ladder.Ladder, width: int, out: dict) -> str:
  """Each ladder arm's line over the plan's fit widths at `width`'s parameters."""
  study, grid_file, arg = found
  protocol = grid_file.judged_by(arg)[0]
  plan = protocol.ladder
  shaped = next(o for o in grid_file.sweep(arg) if results.arm_of(protocol.arms, o) == measures.arms[0])
  head = shaped["model.d_model"] // shaped["model.n_head"]
  overrides = {**shaped, "model.d_model": width, "model.n_head": max(1, width // head)}
  try:
    x = ladder.log_params(grid_file.config(arg), [overrides], protocol.arms)[width]
  except grid.GridError as e:
    raise UsageError(f"--width {width}: {e}") from None
  inside = min(plan.fit_widths) <= width <= max(plan.fit_widths)
  label = "interpolation" if inside else "extrapolation"
  rows, out["fit"] = [], {"width": width, "log10_params": x, "kind": label, "arms": {}}
  for arm in measures.arms:
    found_fit = measures.predict(arm, plan.fit_widths, x)
    if found_fit is None:
      continue
    value, low, high = found_fit
    rows.append([arm, f"{10 ** value:.2g} [{10 ** low:.2g}, {10 ** high:.2g}]"])
    out["fit"]["arms"][arm] = {"log10_rate": value, "low": low, "high": high}
  if not rows:
    return f"(No line yet: widths {', '.join(map(str, plan.fit_widths))} of {LADDER}/ are not all filed.)"
  return (f"The ladder's line over widths {', '.join(map(str, plan.fit_widths))} at width {width} "
          f"({markdown.count(round(10 ** x))} parameters, depth and head size as the ladder), **an {label}**: "
          f"maximum stable rate [95% interval]\n\n" + markdown.table(["configuration", f"width {width}"], rows))
