"""Does the lab's prediction rank configurations as training did (`nplace lab --rank`)?

Against a committed learning-rate sweep (`rank_sensitivity`, a results study), by the rule its
lab protocol judges: version 4's range test of each configuration at the grid's config and rates
(lab protocol 3 on), or version 3 at each configuration's trained depth and width and each seed's
init; written to STUDY/lab.json and judged by the study's lab protocol (nplace/studies/ranking.py)
against LR sensitivity, the measured maximum stable rates and the grid file's baselines.

Protocol 0 (`rank`, a sweep directory): each configuration (the trials that differ only in their
seed) scored on the lab model and ranked by its failure rate (nplace.studies.outcomes), then
the mean final val loss of its runs that stayed finite. +1: the score orders the configurations
exactly as training did, most stable first."""
import json
import math

import numpy as np

from nplace.config import validate
from nplace.errors import ConfigError, UsageError
from nplace.studies import exact, grid, judge, markdown, measures as measures_lib, outcomes, ranking as ranking_lib
from nplace.studies import results, runs as runs_lib
from nplace.studies.lab import checks as lab_checks, measure, range_test
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
  print(f"rule version {lab_checks.SHARPNESS_RULE_VERSION}: {lab_checks.SHARPNESS_RULE}")
  return {"sweep": str(sweep_dir), "depth": depth, "width": width, "rule": lab_checks.SHARPNESS_RULE,
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


CARD = ("score", "predicted_max_lr", "prediction", "range_test")  # what lab.json keeps of a card, per seed


def _scored_before(study, keys, version: int) -> dict:
  """The cards of STUDY/lab.json that rule `version` scored for these configurations and seeds
  (`keys`): a grid filed in parts is scored in parts (a card depends on its config alone)."""
  record = ranking_lib.record_of(study)
  if record is None or record.get("rule_version") != version or record.get("config") != study.config:
    return {}
  return {key: {k: r[k] for k in CARD if k in r}
          for r in record["scores"] if (key := (r["arm"], r["shape"], r["seed"])) in keys}


def _measured(study, module, arg, sweep, keys) -> dict:
  """Rule version 3's card of each (arm, shape, seed) of `keys`: the lab model at its trained
  shape and at the seed's init, from the grid's config and the trial's overrides."""
  base, configs = module.get_config(arg), {}
  for point in sweep.points:
    key = (point.arm, point.shape, point.seed)
    if key in keys and key not in configs:
      try:
        config = grid.apply(base, point.trial.overrides, f"{study.path}: {point.trial.name}")
        validate(config)
      except (grid.GridError, ConfigError) as e:
        raise UsageError(str(e)) from None
      configs[key] = config
  return measure.measure_all(configs)


def _range_tested(study, module, arg, protocol, keys) -> dict:
  """Rule version 4's card of each (arm, shape, seed) of `keys`: its configuration's range test
  (one for all its seeds), at the grid's config and rates, every config validated first."""
  try:
    found = range_test.configurations(module, arg, module.get_config(arg), results.arms(module, protocol))
    rise = range_test.blow_up_rise(protocol)
  except grid.GridError as e:
    raise UsageError(f"{study.path}: {e}") from None
  cards = range_test.run_all({c: found[c] for c in dict.fromkeys(key[:2] for key in keys)}, rise)
  return {key: cards[key[:2]] for key in keys}


def rank_sensitivity(study_dir) -> dict:
  """Scores every configuration and seed of the results study in `study_dir` by the rule its lab
  protocol judges: version 4's range test per configuration (lab protocol 3 on:
  ranking.judges_configurations), else version 3 at each trained shape and seed's init. Keeps
  what its lab.json already holds from that rule version, writes STUDY/lab.json (what `nplace
  report --results` ranks from) and prints the ranking by the lab protocol; returns the record."""
  study, module, arg, protocol, sweep = _ranked_study(study_dir)
  keys = list(dict.fromkeys((point.arm, point.shape, point.seed) for point in sweep.points))
  per_configuration = ranking_lib.judges_configurations(protocol.lab)
  version, rule = ((lab_checks.RULE_VERSION, range_test.RULE) if per_configuration
                   else (lab_checks.SHARPNESS_RULE_VERSION, lab_checks.SHARPNESS_RULE))
  kept = _scored_before(study, keys, version)
  if per_configuration:  # a seed filed later takes its configuration's range test
    tested = {key[:2]: card for key, card in kept.items()}
    kept = {key: tested[key[:2]] for key in keys if key[:2] in tested}
  todo = [key for key in keys if key not in kept]
  if kept:
    print(f"lab.json: {len(kept)} configurations and seeds already scored by rule version {version}, kept; "
          f"scoring the other {len(todo)}")
  if not todo:
    scored = {}
  elif per_configuration:
    scored = _range_tested(study, module, arg, protocol, todo)
  else:
    scored = _measured(study, module, arg, sweep, todo)
  cards = kept | scored
  record = {"config": study.config, "rule_version": version, "rule": rule,
            "scores": [{"arm": a, "shape": s, "seed": seed, "rule_version": version,
                        **{k: cards[(a, s, seed)][k] for k in CARD if k in cards[(a, s, seed)]}}
                       for a, s, seed in keys]}
  (study.path / ranking_lib.SCORES).write_text(json.dumps(record, indent=1) + "\n")
  ranking = measures_lib.measures_for(protocol.lab, study, module, arg, ranked=protocol)
  if per_configuration:
    print("\n\n".join(configurations_part(ranking)))
    print(verdict_lines(ranking))
  else:
    rho, low, high = ranking.rho()
    print(ranking_table(ranking))
    if ranking_lib.judges_max_lr(ranking.protocol):
      print(max_lr_table(ranking))
    print(f"Spearman's rho {rho:.3f} [{low:.3f}, {high:.3f}] over {len(ranking.rows)} configurations")
  print(f"rule version {version}: {rule}\nwrote {study.path / ranking_lib.SCORES}")
  return record


def ranking_table(ranking) -> str:
  lab = average_ranks([r.score_S.mean() for r in ranking.rows])
  measured = average_ranks([r.measured_S.mean() for r in ranking.rows])
  body = [[r.shape, r.arm, ", ".join(f"{x:.2f}" for x in r.score_S), f"{a:g}",
           ", ".join(f"{x:.3f}" for x in r.measured_S), f"{b:g}"] for r, a, b in zip(ranking.rows, lab, measured)]
  return markdown.table(["shape", "arm", "lab score (per seed)", "lab rank", "LR sensitivity (per seed)",
                         "sensitivity rank"], body)


def max_lr_table(ranking) -> str:
  """Per configuration: the predicted and the observed maximum stable rate, and their ratio."""
  tolerance = ranking.protocol.threshold("lr_tolerance")
  body = []
  for found in ranking.max_lrs():
    arm, shape, predicted, observed = found
    known = predicted is not None and observed is not None
    body.append([shape, arm, "-" if predicted is None else f"{predicted:.2g}",
                 "-" if observed is None else f"{observed:.2g}", f"{predicted / observed:.2g}" if known else "-",
                 markdown.number(ranking.right([found])[0]) if known else "-"])
  return markdown.table(["shape", "arm", "predicted max stable lr", "observed (geometric mean over seeds)",
                         "predicted / observed", f"within {tolerance:g} decades"], body)


# --- Rule version 4 against the measured maximum stable rate, and the baselines (lab protocol 3 on) ---

LAB = "range test"  # the lab's column and row, beside the baselines'


def _judged(ranking, found) -> str:
  """A prediction of `max_lrs` against the measured rate: the rate, right or wrong, and
  log10(predicted / measured)."""
  _, _, predicted, measured = found
  if predicted is None or measured is None:
    return "-" if predicted is None else f"{predicted:.2g}"
  right = {True: "right", False: "wrong", None: "not judged"}[ranking.right([found])[0]]
  return f"{predicted:.2g} {right} ({round(math.log10(predicted / measured), 2) + 0.0:+.2f})"  # + 0.0: no -0.00


def predictions_table(ranking, arms=None) -> str:
  """Per configuration (of `arms`): its measured maximum stable rate (geometric mean over the
  seeds, and each seed's), and the lab's and each baseline's prediction of it, right or not."""
  columns = {LAB: ranking.max_lrs(arms), **{name: ranking.max_lrs(arms, name) for name in ranking.baselines}}
  body = []
  for i, (arm, shape, _, measured) in enumerate(columns[LAB]):
    seeds = [ranking.measures.max_stable_lr(arm, shape, seed) for seed in ranking.seeds]
    body.append([shape, arm, "none" if None in seeds else "-" if measured is None else f"{measured:.2g}",
                 ", ".join("none" if x is None else f"{x:.2g}" for x in seeds),  # none: stable at no rate
                 *(_judged(ranking, found[i]) for found in columns.values())])
  tolerance = ranking.protocol.threshold("lr_tolerance")
  return markdown.table(["shape", "arm", "measured max stable lr", "per seed",
                         *(f"{name} (log10 predicted / measured; right within {tolerance:g})" if name == LAB else name
                           for name in columns)], body)


def verdict_lines(ranking) -> str:
  """The lab protocol's verdict on each claim, a line each, with its effects."""
  return "\n".join(f"{v.claim.id}: {v.verdict}; " + "".join(f"{e.what}: {markdown.ci(e.mean, e.low, e.high)}; "
                                                             for e in v.effects) + v.would_change
                   for v in judge.judge(ranking.protocol, ranking))


def scores_table(ranking, arms=None) -> str:
  """Over the configurations of `arms`: the lab's and each baseline's Spearman's rho against the
  measured maximum stable rate with its interval (none for a baseline that predicts one rate for
  all), how many each predicts right, the lab's rho minus each baseline's on the same draws, and
  the lab's rho against LR sensitivity (reported, not judged)."""
  n = len(ranking.configurations(arms))
  ours = ranking.paired("max_stable_lr", arms)
  body = []
  for name in (None, *ranking.baselines):
    rows = ranking.paired("max_stable_lr", arms, name)
    ranks = len({float(r.score_S[0]) for r in rows}) > 1
    right = [r for r in ranking.right([f for f in ranking.max_lrs(arms, name) if None not in f[2:]]) if r is not None]
    level = ranking.protocol.interval
    share = markdown.ci(sum(right) / len(right), *exact.rate_interval(sum(right), len(right), level)) if right else "-"
    body.append([LAB if name is None else name, markdown.ci(*ranking.rho(rows)) if ranks else "- (one rate for all)",
                 f"{sum(right)} of {n}" + (f" ({len(right)} judged)" if len(right) < n else "") + f": {share}",
                 "-" if name is None or not ranks else markdown.ci(*ranking.rho_difference(ours, rows)),
                 markdown.ci(*ranking.rho(ranking.paired("lr_sensitivity", arms))) if name is None else "-"])
  tolerance = ranking.protocol.threshold("lr_tolerance")
  return markdown.table(["prediction", "rho vs measured max stable lr [interval]",
                         f"right within {tolerance:g} decades: the share of those judged [exact interval]",
                         f"the {LAB}'s rho minus this one's [interval]",
                         "rho vs LR sensitivity (reported)"], body)


def configurations_part(ranking) -> list[str]:
  """Rule version 4 against the measured maximum stable rates and the baselines, for the page
  and `nplace lab --rank`: over the configurations the lab protocol judges (its `arms`), then
  the others and every configuration together (not judged: the rule was chosen on some)."""
  judged = ranking.protocol.arms
  others = [arm for arm in ranking.measures.arms if judged is not None and arm not in judged]
  parts = [f"The configurations judged ({len(ranking.configurations(judged))}): predicted against measured "
           "maximum stable learning rate (right: within `lr_tolerance` decades of a majority of the seeds' rates; "
           "not judged where a seed was stable at the sweep's top rate)", predictions_table(ranking, judged),
           scores_table(ranking, judged)]
  if others:
    parts += [f"Not judged: {', '.join(others)} (the lab protocol judges the configurations the rule was not "
              f"chosen on), and all {len(ranking.configurations())} configurations together",
              predictions_table(ranking, others), scores_table(ranking)]
  return parts
