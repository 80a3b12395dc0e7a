"""The scale ladder's measures and verdicts (nplace/studies/ladder.py) on ladders built by hand:
each seed's edge from its runs, the separation and trend rules against brute-force readings, the
line that predicts the next width, and the blind prediction's score."""
import math
import pathlib

import numpy as np
import pytest

from nplace.studies import grid, ladder, results, three_way
from nplace.studies import verdict as v
from nplace.train.summary import Summary

ROOT = pathlib.Path(__file__).resolve().parent.parent
LADDER = grid.load_module(ROOT / "experiments" / "ladder.py")
FREQ, VOCAB, STEPS, WARMUP = 3.35, 257, 1000, 50
X = {32: 5.21, 64: 5.79, 128: 6.38, 256: 6.98}  # log10 parameters, about the ladder's


def trial(arm, width, exponent, seed, stable, blow_up=False, final=None):
  """A ladder trial at rate 10^exponent: learned (its `final` loss, 2.0 by default) or, unstable,
  stalled at the frequency loss; `blow_up` adds an excursion it recovers from."""
  final = (2.0 if final is None else final) if stable else FREQ - 0.05
  loss = [(s, 5.6 - (5.6 - final) * min(1.0, s / 500)) for s in range(0, STEPS + 1, 10)]
  if blow_up:
    loss = [(s, 30.0 if 100 <= s < 200 else x) for s, x in loss]
  overrides = {"model.n_layer": 12, "model.d_model": width, "model.n_head": width // 16, **LADDER.ARMS[arm],
               "optim.lr": 10 ** exponent, "seed": seed}
  summary = Summary(val_loss=final, frequency_loss=FREQ, entropy_rate=None, step=STEPS)
  return results.Trial(grid.trial_name(overrides), overrides, summary, loss, WARMUP, VOCAB, val_loss=[(STEPS, final)])


def build(edges: dict, rates=None, tuned=None) -> ladder.Ladder:
  """A ladder whose seed s of (arm, width) is stable up to edges[arm, width][s] (log10), its loss
  lowest at tuned[arm, width][s] (default: a decade below its edge), over `rates` (default the full grid)."""
  trials = []
  for (arm, width), per_seed in edges.items():
    for seed, edge in enumerate(per_seed):
      best = (tuned or {}).get((arm, width), [edge - 1.0] * len(per_seed))[seed]
      for e in (rates or {}).get((arm, width), LADDER.FULL):
        trials.append(trial(arm, width, e, seed, e <= edge + 1e-9, final=2.0 + 0.1 * abs(e - best)))
  return ladder.Ladder(LADDER.PROTOCOL, LADDER.ARMS, trials, (), X)


def claim(claim_id):
  return next(c for c in LADDER.PROTOCOL.claims if c.id == claim_id)


def judged(measures, claim_id):
  c = claim(claim_id)
  return three_way.decide(c, LADDER.PROTOCOL, three_way.sample(c, LADDER.PROTOCOL, measures))


def test_a_seed_s_edge_is_its_highest_stable_rate_and_bounds_are_marked():
  measures = build({("Pre-LN", 32): [-1.0, 0.0, -3.5]})
  assert measures.edges("Pre-LN", 32) == [ladder.Edge(-1.0), ladder.Edge(0.0, ladder.FLOOR),
                                          ladder.Edge(-3.5, ladder.CEILING)]
  assert measures.step == 0.5 and measures.tuned("Pre-LN", 32)[0] == -2.0


def test_a_run_that_blew_up_and_recovered_is_not_stable_and_text_needs_the_margin():
  blown = trial("Pre-LN", 32, -1.0, 0, True, blow_up=True)
  barely = trial("Pre-LN", 32, -1.5, 0, True, final=FREQ - 0.2)  # below the frequency loss by less than 0.3
  found = ladder.Ladder(LADDER.PROTOCOL, LADDER.ARMS, [blown, barely, trial("Pre-LN", 32, -2.0, 0, True)], (), X)
  assert [p.failed or p.blew_up for p in sorted(found.sweep.points, key=lambda p: p.lr)] == [False, True, True]


def test_separation_reads_above_below_and_overlap_with_bounds_on_the_claim_s_side():
  measures = build({("Peri-LN", 32): [-0.5, -0.5, 0.0], ("Pre-LN", 32): [-1.0, -1.0, -1.0],
                    ("Peri-LN", 64): [-1.0, -1.0, -1.0], ("Pre-LN", 64): [-1.0, -1.5, -1.0]})
  found = judged(measures, "peri_above_pre_at_every_width")
  assert found.verdict == v.INCONCLUSIVE and "width 64: overlapping" in found.would_change
  found = judged(build({("Peri-LN", 32): [-1.0] * 3, ("Pre-LN", 32): [-0.5] * 3}), "peri_above_pre_at_every_width")
  assert found.verdict == v.CONTRADICTED
  # a Peri-LN seed stable at the top counts for the claim; a Pre-LN seed stable at none too
  found = judged(build({("Peri-LN", 32): [0.0, -0.5, -0.5], ("Pre-LN", 32): [-3.5, -1.0, -1.5]}),
                 "peri_above_pre_at_every_width")
  assert found.verdict == v.REPRODUCED


def test_a_trend_s_slope_is_the_least_squares_slope_of_the_width_means():
  edges = {("Pre-LN", w): [-1.0 - 0.5 * i, -1.0 - 0.5 * i, -1.5 - 0.5 * i] for i, w in enumerate((32, 64, 128, 256))}
  measures = build(edges)
  found = judged(measures, "pre_edge_falls")
  means = [np.mean(edges["Pre-LN", w]) for w in (32, 64, 128, 256)]
  assert found.effects[0].mean == pytest.approx(np.polyfit(list(X.values()), means, 1)[0])
  assert found.effects[0].high < -0.1 and found.verdict == v.REPRODUCED


def test_the_line_predicts_at_the_next_width_and_the_score_needs_a_measured_median():
  edges = {("Pre-LN", w): [e] * 3 for w, e in ((32, -1.0), (64, -1.5), (128, -2.0))}
  value, low, high = build(edges).predict("Pre-LN", (32, 64, 128), X[256])
  assert value == pytest.approx(np.polyval(np.polyfit([X[32], X[64], X[128]], [-1.0, -1.5, -2.0], 1), X[256]))
  assert low < value < high
  assert ladder.median_edge([ladder.Edge(-2.5), ladder.Edge(-2.0, ladder.FLOOR), ladder.Edge(-3.0)]) == ladder.Edge(-2.5)
  assert ladder.scored(-2.4, ladder.Edge(-2.5), 0.5) and not ladder.scored(-2.4, ladder.Edge(-2.0, ladder.FLOOR), 0.5)
