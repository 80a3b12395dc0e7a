"""A protocol's verdicts (nplace/protocol.py declares it): `judge` turns a grid's measurements
(nplace/studies/measures.py) into one `Verdict` per claim; `sensitivity` judges again with each
threshold halved and doubled. Two-way claims of the compared metrics are judged here, three-way
ones (divergence counts among them) by nplace/studies/three_way.py; every other metric by its
kind's measuring class (`measures.verdict`).
"""
import math

import numpy as np

from nplace.protocol import THREE_WAY
from nplace.studies import intervals, three_way
from nplace.studies.verdict import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Effect, Verdict, effect_what, partly_run

COMPARED = ("lr_sensitivity", "best_loss", "final_loss", "max_stable_lr")  # per-seed values compared between arms
# The threshold a compared metric's interval must clear, and its unit (max_stable_lr is per seed
# -log10 of the rate, so worse - better is how many decades higher `better` still learns).
MIN_EFFECT = {"max_stable_lr": ("min_lr_gap", "decades")}


def judge(protocol, measures) -> list[Verdict]:
  """One verdict per claim, two-way or three-way (nplace/studies/three_way.py) as the protocol
  declares. `measures`: per_seed(metric, arm, shape) -> [value per seed] (None where a seed
  lacks a learning rate) and shapes; a claim with another metric is judged by
  `measures.verdict(claim, protocol)`."""
  if protocol.verdicts == THREE_WAY:
    return three_way.judge_all(protocol, measures)
  rng = np.random.default_rng(protocol.bootstrap_seed)
  verdicts = []
  for claim in protocol.claims:
    if claim.metric not in COMPARED:
      verdicts.append(measures.verdict(claim, protocol))
      continue
    verdicts.append(partly_run(judge_one(claim, protocol, measures, rng), measures.missing))
  return verdicts


def judge_one(claim, protocol, measures, rng) -> Verdict:
  """`judge`'s verdict on one claim of a compared metric."""
  threshold, unit = MIN_EFFECT.get(claim.metric, ("min_effect", "nats"))
  min_effect = protocol.threshold(threshold)
  effects, complete = [], True
  for shape in measures.shapes:
    better = measures.per_seed(claim.metric, claim.better, shape)
    worse = measures.per_seed(claim.metric, claim.worse, shape)
    if not better or not worse or None in better or None in worse or min(len(better), len(worse)) < protocol.seeds:
      complete = False
      continue
    effects.append(Effect(shape, *intervals.difference(better, worse, protocol, rng),
                          min(len(better), len(worse)), effect_what(claim.metric)))
  if not complete or not effects:
    return Verdict(claim, NOT_TESTABLE, tuple(effects), None,
                   "every shape run at every learning rate and seed"
                   + (" (a seed that learned at no rate has no maximum stable rate)"
                      if claim.metric == "max_stable_lr" else ""))
  if claim.matches:  # better may be worse by less than min_effect: worse - better > -min_effect
    held = [e.low > -min_effect for e in effects]
  else:
    held = [e.low > min_effect for e in effects]
  verdict = REPRODUCED if all(held) else NOT_REPRODUCED
  width = max(e.high - e.low for e in effects)
  change = (f"an interval crossing {'-' if claim.matches else ''}{min_effect:g} in any shape "
            if verdict == REPRODUCED else
            f"intervals clear of {'-' if claim.matches else ''}{min_effect:g} in every shape ")
  return Verdict(claim, verdict, tuple(effects), None,
                 change + f"(widest interval now {width:.2f} {unit}, {effects[0].seeds} seeds)")


def sensitivity(protocol, measures_for) -> list[tuple[str, float, list[str]]]:
  """For each threshold at half, its value and double (`Threshold.scaled`): (threshold, value,
  [verdict per claim]).
  `measures_for(protocol)` measures the grid under a protocol (outcomes depend on thresholds)."""
  rows = []
  for t in protocol.thresholds:
    for factor in (0.5, 1.0, 2.0):
      scaled = protocol.scaled(t.name, factor)
      rows.append((t.name, scaled.threshold(t.name), [v.verdict for v in judge(scaled, measures_for(scaled))]))
  return rows


def fragile(protocol, found) -> dict[str, list[str]]:
  """claim id -> the threshold changes (`name` ×0.5, ×2) under which its verdict flips, from
  `sensitivity`'s rows: a note beside the verdict, not a verdict."""
  registered = {t.name: t for t in protocol.thresholds}
  base = next(verdicts for name, value, verdicts in found if value == registered[name].value)
  notes = {}
  for name, value, verdicts in found:
    t = registered[name]
    origin = 0.0 if t.bound is None else t.bound  # a bounded threshold's distance to its bound was scaled
    factor = (value - origin) / (t.value - origin) if t.value != origin else math.nan
    for claim, now, was in zip(protocol.claims, verdicts, base):
      if now != was:
        notes.setdefault(claim.id, []).append(f"`{name}` ×{factor:g}")
  return notes
