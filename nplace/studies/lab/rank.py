"""Does the lab's init-time score rank configurations as training did (`nplace lab --rank`)?

Against learning-rate sensitivity (`rank_sensitivity`, judged by `PROTOCOL`): a committed
results study's configurations, each scored at its trained depth and width and at every trained
seed's init, ranked against their LR sensitivity; Spearman's rho with a bootstrap over seeds.

Protocol 0 (`rank`, a sweep directory): each configuration (the trials that differ only in their
seed) scored on the lab model and ranked by its failure rate (nplace.studies.outcomes), then
the mean final val loss of its runs that stayed finite. +1: the score orders the configurations
exactly as training did, most stable first."""
import json
import math

import numpy as np

from nplace.config import validate
from nplace.errors import ConfigError, UsageError
from nplace.studies import grid, lr_sensitivity, outcomes, protocol as protocol_lib, results
from nplace.studies.lab import checks as lab_checks, measure
from nplace.studies.report import markdown, runs as runs_lib, study_a


def average_ranks(keys) -> np.ndarray:
  """1-based ranks of comparable keys, tied keys sharing the mean of their positions."""
  order = sorted(range(len(keys)), key=lambda i: keys[i])
  ranks = np.empty(len(keys))
  start = 0
  while start < len(order):
    end = start
    while end + 1 < len(order) and keys[order[end + 1]] == keys[order[start]]:
      end += 1
    ranks[order[start:end + 1]] = (start + end) / 2 + 1
    start = end + 1
  return ranks


def spearman(x, y) -> float:
  """Spearman's rank correlation (Pearson's on average ranks); NaN when a side is constant."""
  rx, ry = average_ranks(list(x)), average_ranks(list(y))
  if np.ptp(rx) == 0 or np.ptp(ry) == 0:
    return math.nan
  return float(np.corrcoef(rx, ry)[0, 1])


def outcome(runs) -> tuple[float, float]:
  """(failure rate, mean final val loss of the runs without a nonfinite failure; inf if none)."""
  kept = [r.summary.val_loss for r in runs if "nonfinite" not in outcomes.failures(r.summary)
          and r.summary.val_loss is not None and math.isfinite(r.summary.val_loss)]
  return study_a.counts(runs)["failed"] / len(runs), float(np.mean(kept)) if kept else math.inf


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


# --- The lab against learning-rate sensitivity (a committed results study, protocol 1) ---

SCORES = "lab.json"  # in a results study: the lab's score of every configuration and seed

# What both lab protocols judge alike, values and wording.
TARGET_RHO = protocol_lib.Threshold("target_rho", 0.8, "Spearman's rho the lab set out to reach "
                                    "(its target since it was built)")
RANK_CLAIMS = (
    protocol_lib.Claim("lab_agrees", "The lab's score ranks the configurations as their LR sensitivity "
                       "does (rho's interval above 0)", metric="rho_above_zero",
                       better="lab score", worse="LR sensitivity"),
    protocol_lib.Claim("lab_meets_target", "... well enough to stand in for the sweep (rho at least "
                       "the target)", metric="rho_at_target", better="lab score", worse="LR sensitivity"),
)

PROTOCOL = protocol_lib.Protocol(
    name="lab", version=1,
    summary="The lab's init-time score (rule version in the table) of each configuration of an "
            "LR-sensitivity grid, at its trained depth and width and each trained seed's init, ranked "
            "against its LR sensitivity (cap ln V; lower = more stable for both). Spearman's rho over "
            "the configurations' seed means, with a bootstrap over seeds (each configuration's seeds "
            "resampled, score and sensitivity kept paired). Fixed before the first ranking.",
    seeds=3, bootstrap_resamples=2000, bootstrap_seed=0, interval=0.95,
    thresholds=(TARGET_RHO,),
    claims=RANK_CLAIMS,
)

PROTOCOL_V2 = protocol_lib.Protocol(
    name="lab", version=2,
    summary="The lab's init-time prediction (rule version in the table) of each configuration of an "
            "LR-sensitivity grid, at its trained depth and width and each trained seed's init, against "
            "what the grid measured: (1) Spearman's rho of the lab score against LR sensitivity over the "
            "configurations' seed means, with a bootstrap over seeds and over configurations (both "
            "resampled in each draw); (2) the predicted maximum stable learning rate against the "
            "observed one (each seed's largest rate that learned; geometric means over seeds), counted "
            "right within one half-decade step of the sweep. Fixed before protocol 2's grid was judged.",
    seeds=5, bootstrap_resamples=2000, bootstrap_seed=0, interval=0.95,
    thresholds=(TARGET_RHO,
                protocol_lib.Threshold("lr_tolerance", 0.5, "decades: a predicted maximum stable rate this "
                                                            "close to the observed one counts as right"),
                protocol_lib.Threshold("target_right", 2 / 3, "fraction of configurations whose maximum "
                                                              "stable rate the lab must predict right")),
    claims=(
        *RANK_CLAIMS,
        protocol_lib.Claim("lab_predicts_max_lr", "The lab predicts each configuration's maximum stable "
                           "learning rate within half a decade, for at least the target fraction",
                           metric="max_lr_right", better="lab prediction", worse="observed"),
    ),
)


def protocol_for(study_protocol) -> protocol_lib.Protocol:
  """The lab protocol a study is judged under: version 2 on grids of outcome rules 2 (study A's
  protocol 2, which measures maximum stable rates), version 1 before."""
  return PROTOCOL_V2 if study_protocol.outcome_rules >= 2 else PROTOCOL


def _geometric_mean(values) -> float:
  return float(np.exp(np.mean(np.log(values))))


class Ranking:
  """Each configuration (arm, shape) of an LR-sensitivity study: the lab score and the LR
  sensitivity of every seed, paired by seed; `scores` (arm, shape, seed) -> lab score;
  `predicted` (arm, shape, seed) -> predicted maximum stable rate (lab protocol 2)."""

  def __init__(self, protocol, measures, scores: dict, predicted: dict | None = None):
    self.protocol, self.measures, self.predicted, self.rows = protocol, measures, predicted or {}, []
    for shape in measures.shapes:
      for arm in measures.arms:
        pairs = [(scores[(arm, shape, seed)], value) for seed, value in
                 zip(measures.seeds, measures.per_seed("lr_sensitivity", arm, shape))
                 if value is not None and (arm, shape, seed) in scores]
        if pairs:
          self.rows.append((arm, shape, *map(np.array, zip(*pairs))))
    self.seeds = measures.seeds

  def rho(self) -> tuple[float, float, float]:
    """Spearman's rho of the seed means and its bootstrap interval over seeds."""
    rho = spearman([s.mean() for _, _, s, _ in self.rows], [v.mean() for _, _, _, v in self.rows])
    rng = np.random.default_rng(self.protocol.bootstrap_seed)
    resampled = []
    for _ in range(self.protocol.bootstrap_resamples):
      # version 2 also resamples the configurations: the rho of another set of them
      rows = ([self.rows[i] for i in rng.integers(0, len(self.rows), len(self.rows))]
              if self.protocol.version >= 2 else self.rows)
      picks = [rng.integers(0, len(s), len(s)) for _, _, s, _ in rows]
      resampled.append(spearman([s[i].mean() for (_, _, s, _), i in zip(rows, picks)],
                                [v[i].mean() for (_, _, _, v), i in zip(rows, picks)]))
    resampled = np.array(resampled)
    resampled = resampled[np.isfinite(resampled)]
    if not len(resampled):
      return rho, math.nan, math.nan
    return rho, *protocol_lib.bounds(resampled, self.protocol)

  def max_lrs(self) -> list[tuple[str, str, float | None, float | None]]:
    """(arm, shape, predicted, observed) per configuration: geometric means over the seeds of
    the lab's predicted maximum stable rate and of the largest rate each seed learned at (None
    where a seed lacks one)."""
    out = []
    for arm, shape, _, _ in self.rows:
      predicted = [self.predicted.get((arm, shape, seed)) for seed in self.measures.seeds]
      observed = [self.measures.max_stable_lr(arm, shape, seed) for seed in self.measures.seeds]
      out.append((arm, shape,
                  None if None in predicted or min(predicted) <= 0 else _geometric_mean(predicted),
                  None if None in observed else _geometric_mean(observed)))
    return out

  def _max_lr_verdict(self, claim, protocol) -> protocol_lib.Verdict:
    found = self.max_lrs()
    if not found or any(p is None or o is None for _, _, p, o in found):
      return protocol_lib.Verdict(claim, protocol_lib.NOT_TESTABLE, (), None,
                                  "a prediction and an observed maximum stable rate for every configuration")
    tolerance, target = protocol.threshold("lr_tolerance"), protocol.threshold("target_right")
    right = [abs(math.log10(p / o)) <= tolerance for _, _, p, o in found]
    fraction = float(np.mean(right))
    effect = protocol_lib.Effect(f"{len(found)} configurations", fraction, math.nan, math.nan, len(self.seeds),
                                 f"fraction predicted within {tolerance:g} decades")
    held = fraction >= target
    return protocol_lib.Verdict(claim, protocol_lib.REPRODUCED if held else protocol_lib.NOT_REPRODUCED,
                                (effect,), None, f"{sum(right)} of {len(right)} right; "
                                f"{'fewer' if held else 'at least'} {math.ceil(target * len(right))} would change it")

  def verdict(self, claim, protocol) -> protocol_lib.Verdict:
    return protocol_lib.partly_run(self._verdict(claim, protocol), getattr(self.measures, "missing", {}))

  def _verdict(self, claim, protocol) -> protocol_lib.Verdict:
    if claim.metric == "max_lr_right":
      return self._max_lr_verdict(claim, protocol)
    if len(self.rows) < 3:
      return protocol_lib.Verdict(claim, protocol_lib.NOT_TESTABLE, (), None,
                                  "at least 3 configurations scored and swept")
    rho, low, high = self.rho()
    effect = protocol_lib.Effect(f"{len(self.rows)} configurations", rho, low, high, len(self.seeds),
                                 "Spearman's rho, lab score vs LR sensitivity")
    if claim.metric == "rho_above_zero":
      held = low > 0
      change = "an interval reaching 0" if held else "an interval above 0"
    else:
      target = protocol.threshold("target_rho")
      held = rho >= target
      change = f"rho below {target:g}" if held else f"rho reaching {target:g}"
    verdict = protocol_lib.REPRODUCED if held else protocol_lib.NOT_REPRODUCED
    over = "seeds and configurations" if protocol.version >= 2 else "seeds only, not over the choice of configurations"
    return protocol_lib.Verdict(claim, verdict, (effect,), None, f"{change} (the interval is over {over})")


def _record_of(study) -> dict | None:
  """A results study's lab.json, or None where the lab has not scored it."""
  path = study.path / SCORES
  return json.loads(path.read_text()) if path.is_file() else None


def scores_of(study) -> tuple[dict, dict, dict] | None:
  """(arm, shape, seed) -> score and -> predicted maximum stable rate (rule version 3 on) from a
  results study's lab.json, and the file's header; None where the lab has not scored it."""
  record = _record_of(study)
  if record is None:
    return None
  return ({(r["arm"], r["shape"], r["seed"]): r["score"] for r in record["scores"]},
          {(r["arm"], r["shape"], r["seed"]): r["predicted_max_lr"] for r in record["scores"] if "predicted_max_lr" in r},
          {k: v for k, v in record.items() if k != "scores"})


def sensitivity_measures(study):
  """(the study's lr_sensitivity.Measures under its grid's protocol, the grid module, ARG);
  UsageError when the grid is not a learning-rate sweep."""
  try:
    module, arg = results.grid_module(study)
    study = results.with_reused(study, module, arg)
  except runs_lib.RunsError as e:
    raise UsageError(str(e)) from None
  protocol = module.protocol(arg)
  measures = lr_sensitivity.Measures(protocol, results.arms(module, protocol), study.trials)
  if not measures.swept:
    raise UsageError(f"--rank {study.path}: {study.config} is not a learning-rate sweep: "
                     "nothing to rank the lab against")
  return measures, module, arg


def _scored_before(study, configs) -> dict:
  """The cards of STUDY/lab.json that this rule version scored for these configurations and
  seeds: a grid filed in parts is scored in parts (a card depends on its config alone)."""
  record = _record_of(study)
  if record is None or record.get("rule_version") != lab_checks.RULE_VERSION or record.get("config") != study.config:
    return {}
  return {key: {"score": r["score"], "predicted_max_lr": r["predicted_max_lr"], "prediction": r["prediction"]}
          for r in record["scores"] if (key := (r["arm"], r["shape"], r["seed"])) in configs}


def rank_sensitivity(study_dir) -> dict:
  """Scores every configuration and seed of the results study in `study_dir` at its trained
  shape and init (keeping those its lab.json already holds from this rule version), writes STUDY/lab.json (what `nplace report --results` ranks from) and prints
  the ranking; returns the record."""
  try:
    study = results.load(study_dir)
  except runs_lib.RunsError as e:
    raise UsageError(str(e)) from None
  measures, module, arg = sensitivity_measures(study)
  base = module.get_config(arg)
  configs = {}
  for arm, shape, seed, _, trial, _ in measures.trials:
    if (arm, shape, seed) not in configs:
      try:
        config = grid.apply(base, trial.overrides, f"{study.path}: {trial.name}")
        validate(config)
      except (grid.GridError, ConfigError) as e:
        raise UsageError(str(e)) from None
      configs[(arm, shape, seed)] = config
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
  (study.path / SCORES).write_text(json.dumps(record, indent=1) + "\n")
  ranking = Ranking(protocol_for(measures.protocol), measures, {key: card["score"] for key, card in cards.items()},
                    {key: card["predicted_max_lr"] for key, card in cards.items()})
  rho, low, high = ranking.rho()
  print(ranking_table(ranking))
  if ranking.protocol.version >= 2:
    print(max_lr_table(ranking))
  print(f"Spearman's rho {rho:.3f} [{low:.3f}, {high:.3f}] over {len(ranking.rows)} configurations; "
        f"rule version {lab_checks.RULE_VERSION}: {lab_checks.RULE}\nwrote {study.path / SCORES}")
  return record


def ranking_table(ranking) -> str:
  lab = average_ranks([s.mean() for _, _, s, _ in ranking.rows])
  measured = average_ranks([v.mean() for _, _, _, v in ranking.rows])
  body = [[shape, arm, ", ".join(f"{x:.2f}" for x in s), f"{a:g}", ", ".join(f"{x:.3f}" for x in v), f"{b:g}"]
          for (arm, shape, s, v), a, b in zip(ranking.rows, lab, measured)]
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
