"""Does the lab's init-time score rank a sweep's configurations as training did (`nplace lab
--rank`)? Each configuration (the trials that differ only in their seed) gets the lab score of
its model (its `model.*` overrides on the lab model) and its measured outcome: the failure rate
(nplace.studies.outcomes), then the mean final val loss of its
runs that stayed finite. Spearman's rho between the two rankings (+1: the score orders the
configurations exactly as training did, most stable first)."""
import math

import numpy as np

from nplace.errors import UsageError
from nplace.studies import outcomes
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
