"""Does the lab's init-time score rank configurations as training did (`nplace lab --rank`)?

Against learning-rate sensitivity (`rank_sensitivity`, a committed results study): every
configuration and seed scored at its trained depth and width and at its init, written to
STUDY/lab.json and ranked by the study's lab protocol (nplace/studies/ranking.py).

Protocol 0 (`rank`, a sweep directory): each configuration (the trials that differ only in their
seed) scored on the lab model and ranked by its failure rate (nplace.studies.outcomes), then
the mean final val loss of its runs that stayed finite. +1: the score orders the configurations
exactly as training did, most stable first."""
import json
import math

import numpy as np

from nplace.config import validate
from nplace.errors import ConfigError, UsageError
from nplace.studies import grid, markdown, measures as measures_lib, outcomes, ranking as ranking_lib, results
from nplace.studies import runs as runs_lib
from nplace.studies.lab import checks as lab_checks, measure
from nplace.studies.ranking import average_ranks, spearman


def outcome(runs) -> tuple[float, float]:
  """(failure rate, mean final val loss of the runs without a nonfinite failure; inf if none)."""
  kept = [r.summary.val_loss for r in runs if "nonfinite" not in outcomes.failures(r.summary)
          and r.summary.val_loss is not None and math.isfinite(r.summary.val_loss)]
  return outcomes.counts(runs)["failed"] / len(runs), float(np.mean(kept)) if kept else math.inf


def model_overrides(group) -> tuple:
  """The `model.*` part of a configuration's overrides, as (key under model, value) pairs."""
  return tuple((k.removeprefix("model."), v) for k, v in group if k.startswith("model."))


def rows(source, base, depth: int, width: int) -> tuple[list[dict], dict]:
  """One row per configuration of the sweep's finished runs, and the lab cards by model
  (configs are built and validated before anything compiles)."""
  grouped = runs_lib.groups(runs_lib.finished(source.runs))
  if len(grouped) < 2:
    raise UsageError(f"--rank {source.path}: {len(grouped)} finished configuration(s); a ranking needs 2")
  configs = {m: measure.lab_config(base, depth, width, m) for m in dict.fromkeys(map(model_overrides, grouped))}
  cards = measure.measure_all(configs)
  table = []
  for group, members in grouped.items():
    failed, val = outcome(members)
    card = cards[model_overrides(group)]
    table.append({"configuration": markdown.overrides_label(dict(group), skip=("seed",)),
                  "runs": len(members), "failure_rate": failed, "val_loss": val,
                  "score": card["score"], "prediction": card["prediction"]})
  return table, cards


def markdown_table(table: list[dict], rho: float) -> str:
  """The rows with both ranks, and rho, as markdown for results/README.md."""
  lab_rank = average_ranks([r["score"] for r in table])
  measured = average_ranks([(r["failure_rate"], r["val_loss"]) for r in table])
  body = [[r["configuration"], f"{r['score']:.2f}", f"{a:g}", f"{r['failure_rate']:.2f} ({r['runs']} runs)",
           markdown.number(r["val_loss"]), f"{b:g}"] for r, a, b in zip(table, lab_rank, measured)]
  header = ["configuration", "lab score", "lab rank", "failure rate", "val loss", "measured rank"]
  return (markdown.table(header, body) + f"\n\nSpearman's rho (lab score vs measured outcome: failure "
          f"rate, then val loss) = {markdown.number(rho, 3)} over {len(table)} configurations.")


def rank(base, sweep_dir, depth: int, width: int) -> dict:
  """Prints the ranking table; returns every number (for --json)."""
  try:
    source = runs_lib.load(sweep_dir)
  except runs_lib.RunsError as e:
    raise UsageError(str(e)) from None
  table, cards = rows(source, base, depth, width)
  rho = spearman([r["score"] for r in table], [(r["failure_rate"], r["val_loss"]) for r in table])
  print(markdown_table(table, rho))
  print(f"rule: {lab_checks.RULE}")
  return {"sweep": str(sweep_dir), "depth": depth, "width": width, "rule": lab_checks.RULE,
          "spearman": rho, "rows": table,
          "cards": [{"model": dict(m), **card} for m, card in cards.items()]}


# --- The lab against learning-rate sensitivity (a committed results study) ---


def _ranked_study(study_dir):
  """(the results study with the trials it reuses, its grid module, ARG, the grid's protocol,
  its measures); UsageError where the grid is not a sweep that a lab protocol ranks against."""
  try:
    study = results.load(study_dir)
    module, arg = results.grid_module(study)
    study = results.with_reused(study, module, arg)
  except runs_lib.RunsError as e:
    raise UsageError(str(e)) from None
  protocol = module.protocol(arg)
  sweep = protocol.lab and measures_lib.measures_for(protocol, study, module, arg)
  if not (sweep and sweep.swept):
    raise UsageError(f"--rank {study.path}: {study.config} is not a learning-rate sweep that a lab protocol "
                     "ranks against: nothing to rank the lab against")
  return study, module, arg, protocol, sweep


def _scored_before(study, configs) -> dict:
  """The cards of STUDY/lab.json that this rule version scored for these configurations and
  seeds: a grid filed in parts is scored in parts (a card depends on its config alone)."""
  record = ranking_lib.record_of(study)
  if record is None or record.get("rule_version") != lab_checks.RULE_VERSION or record.get("config") != study.config:
    return {}
  return {key: {"score": r["score"], "predicted_max_lr": r["predicted_max_lr"], "prediction": r["prediction"]}
          for r in record["scores"] if (key := (r["arm"], r["shape"], r["seed"])) in configs}


def rank_sensitivity(study_dir) -> dict:
  """Scores every configuration and seed of the results study in `study_dir` at its trained
  shape and init (keeping those its lab.json already holds from this rule version), writes
  STUDY/lab.json (what `nplace report --results` ranks from) and prints the ranking by the
  grid protocol's lab protocol; returns the record."""
  study, module, arg, protocol, sweep = _ranked_study(study_dir)
  base = module.get_config(arg)
  configs = {}
  for point in sweep.points:
    key = (point.arm, point.shape, point.seed)
    if key not in configs:
      try:
        config = grid.apply(base, point.trial.overrides, f"{study.path}: {point.trial.name}")
        validate(config)
      except (grid.GridError, ConfigError) as e:
        raise UsageError(str(e)) from None
      configs[key] = config
  kept = _scored_before(study, configs)
  if kept:
    print(f"lab.json: {len(kept)} configurations and seeds already scored by rule version "
          f"{lab_checks.RULE_VERSION}, kept; scoring the other {len(configs) - len(kept)}")
  cards = kept | measure.measure_all({key: c for key, c in configs.items() if key not in kept})
  cards = {key: cards[key] for key in configs}
  record = {"config": study.config, "rule_version": lab_checks.RULE_VERSION, "rule": lab_checks.RULE,
            "scores": [{"arm": a, "shape": s, "seed": seed, "score": card["score"],
                        "predicted_max_lr": card["predicted_max_lr"], "rule_version": lab_checks.RULE_VERSION,
                        "prediction": card["prediction"]} for (a, s, seed), card in cards.items()]}
  (study.path / ranking_lib.SCORES).write_text(json.dumps(record, indent=1) + "\n")
  ranking = measures_lib.measures_for(protocol.lab, study, module, arg, ranked=protocol)
  rho, low, high = ranking.rho()
  print(ranking_table(ranking))
  if ranking_lib.judges_max_lr(ranking.protocol):
    print(max_lr_table(ranking))
  print(f"Spearman's rho {rho:.3f} [{low:.3f}, {high:.3f}] over {len(ranking.rows)} configurations; "
        f"rule version {lab_checks.RULE_VERSION}: {lab_checks.RULE}\nwrote {study.path / ranking_lib.SCORES}")
  return record


def ranking_table(ranking) -> str:
  lab = average_ranks([r.score_S.mean() for r in ranking.rows])
  measured = average_ranks([r.sensitivity_S.mean() for r in ranking.rows])
  body = [[r.shape, r.arm, ", ".join(f"{x:.2f}" for x in r.score_S), f"{a:g}",
           ", ".join(f"{x:.3f}" for x in r.sensitivity_S), f"{b:g}"] for r, a, b in zip(ranking.rows, lab, measured)]
  return markdown.table(["shape", "arm", "lab score (per seed)", "lab rank", "LR sensitivity (per seed)",
                         "sensitivity rank"], body)


def max_lr_table(ranking) -> str:
  """Per configuration: the predicted and the observed maximum stable rate, and their ratio."""
  tolerance = ranking.protocol.threshold("lr_tolerance")
  body = []
  for arm, shape, predicted, observed in ranking.max_lrs():
    ratio = None if predicted is None or observed is None else predicted / observed
    body.append([shape, arm, "-" if predicted is None else f"{predicted:.2g}",
                 "-" if observed is None else f"{observed:.2g}", "-" if ratio is None else f"{ratio:.2g}",
                 "-" if ratio is None else ("yes" if abs(math.log10(ratio)) <= tolerance else "no")])
  return markdown.table(["shape", "arm", "predicted max stable lr", "observed (geometric mean over seeds)",
                         "predicted / observed", f"within {tolerance:g} decades"], body)
