"""Rule version 4 on every configuration of a grid before it runs (`nplace lab --all`): each
configuration's range test (range_test.py) at the grid's config and rates, one row each: the
predicted maximum stable rate and L at every rate; beside it, where the grid is filed and ranked
(RESULTS/NAME/lab.json, RESULTS beside the grid file's experiments/), what the grid measured and
the prediction lab.json holds. The default grid is the placements grid the rule is judged on."""
import fractions
import pathlib
import time

from nplace.errors import UsageError
from nplace.runtime import cpu_split
from nplace.studies import grid, markdown, measures as measures_lib, ranking as ranking_lib, results
from nplace.studies import runs as runs_lib
from nplace.studies.lab import checks as lab_checks, range_test, rank
from nplace.studies.lr_sensitivity import LR

GRID = "experiments/stability.py:placements"


def _grid(spec: str, base):
  """(the grid module, its protocol, the blow-up rise, its configurations' range-test configs,
  how many steps the grid trains them); UsageError, before anything compiles, where the grid
  cannot be range-tested."""
  path, _, arg = spec.partition(":")
  try:
    module = grid.load_module(path)
    if not all(hasattr(module, name) for name in ("protocol", "get_sweep")):
      raise grid.GridError(f"{spec}: declares no protocol(arg) and get_sweep(arg): no configurations to range-test")
    protocol = module.protocol(arg)
    arms = results.arms(module, protocol)
    found = range_test.configurations(module, arg, base, arms)
    rise = range_test.blow_up_rise(protocol)
  except (grid.GridError, AttributeError, ValueError) as e:
    raise UsageError(f"--all: {e}") from None
  if not found:
    raise UsageError(f"--all: {spec}: no trial of its protocol's arms sets optim.lr: not a learning-rate sweep")
  trials = [o for o in module.get_sweep(arg) if LR in o and results.arm_of(arms, o) is not None]
  return module, protocol, rise, found, len(trials) * base.train.steps


def _filed(spec: str, module, protocol):
  """The Ranking of the grid's filed study (RESULTS/NAME beside experiments/), where its lab.json
  is; else None."""
  path, _, arg = spec.partition(":")
  study_dir = pathlib.Path(path).resolve().parent.parent / "results" / results.name_of(spec)
  if protocol.lab is None or not (study_dir / ranking_lib.SCORES).is_file():
    return None
  try:
    study = results.with_reused(results.load(study_dir), module, arg)
  except runs_lib.RunsError as e:
    raise UsageError(f"--all: {e}") from None
  return measures_lib.measures_for(protocol.lab, study, module, arg, ranked=protocol)


def table(found: dict, cards: dict, filed=None) -> str:
  """One row per configuration: its predicted maximum stable rate, the score, L at each rate
  (`!`: blew up); with the filed study's Ranking, the measured rate and lab.json's prediction."""
  rates = sorted({c.optim.lr for configs in found.values() for c in configs})
  measured = {(arm, shape): (p, o) for arm, shape, p, o in filed.max_lrs()} if filed else {}
  body = []
  for key, card in cards.items():
    at = {r.lr: range_test.mark(r) for r in range_test.readings_of(card)}
    row = [key[1], key[0], f"{card['predicted_max_lr']:.2g}", f"{card['score']:.2f}", *(at.get(lr, "") for lr in rates)]
    if filed:
      predicted, observed = measured.get(key, (None, None))
      row += ["-" if x is None else f"{x:.2g}" for x in (observed, predicted)]
    body.append(row)
  header = ["shape", "arm", "predicted max stable lr", "score", *(f"L at {lr:.1e}" for lr in rates)]
  return markdown.table(header + (["measured max stable lr", "lab.json's prediction"] if filed else []), body)


def survey(spec: str, base) -> dict:
  """Range-tests every configuration of the grid `spec` (FILE:ARG) over `base` (its config with
  the command line's overrides), prints the table, the rule, its cost and its wall time, and
  returns every number."""
  module, protocol, rise, found, grid_steps = _grid(spec, base)
  filed = _filed(spec, module, protocol)
  start = time.perf_counter()
  cards = range_test.run_all(found, rise)
  wall = time.perf_counter() - start
  steps = sum(map(len, found.values())) * range_test.RANGE_STEPS
  cost = (f"{len(found)} configurations x their rates x {range_test.RANGE_STEPS} steps of one seed: {steps:,} "
          f"steps, {fractions.Fraction(steps, grid_steps)} of the {grid_steps:,} the grid trains them")
  print(table(found, cards, filed))
  print(f"L: mean train loss over steps {range_test.RANGE_STEPS - range_test.READ_STEPS + 1}-{range_test.RANGE_STEPS} "
        f"(ln V where not finite); ! blew up\nrule version {lab_checks.RULE_VERSION}: {range_test.RULE}\n"
        f"cost: {cost}\nwall time: {wall:.0f} s on {cpu_split.cores()} cores")
  if filed:
    judged = filed.protocol.arms
    print(f"\nHow far to trust it: its blind test, lab protocol v{filed.protocol.version} on the filed grid "
          f"(results/{results.name_of(spec)}, results/README.md), over the {len(filed.configurations(judged))} "
          f"configurations it was not chosen on:\n{rank.scores_table(filed, judged)}\n{rank.verdict_lines(filed)}")
  return {"config": spec, "rule_version": lab_checks.RULE_VERSION, "rule": range_test.RULE, "cost": cost,
          "wall_seconds": wall, "configurations": [{"arm": a, "shape": s, **card} for (a, s), card in cards.items()]}
