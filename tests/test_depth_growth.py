"""Growth over depth: per-seed measures on constructed trials, the fitted rate, and the level's
exponents with their intervals (the description beside Peri-LN's bound)."""
import math
import pathlib

import numpy as np
import pytest

from nplace import protocol as p
from nplace.studies import depth_growth, grid, growth_curves, judge
from nplace.studies import verdict as v
from nplace.studies.report import growth as report_growth
from nplace.studies.results import Trial
from nplace.train.summary import Summary

DEPTHS = (3, 6, 12, 24, 48)
ARMS = {"Pre": {"model.placement": "pre"}, "Peri": {"model.placement": "peri"}}
PROTOCOL = p.Protocol("g", 3, p.GROWTH_PER_SEED, "", 3, 0, 0, 0.95, (p.Threshold("min_rate", 0.02, ""),), (),
                      interval_method=p.WELCH_T, verdicts=p.THREE_WAY)


def trials(level, seeds=range(3), depths=DEPTHS, arms=ARMS):
  """One trial per arm (of `arms`), depth and seed: the top layer's mean |h| is 0.5 at init and
  `level[arm](D, seed)` at the end (step 1000), its entry-wise variance the square."""
  out = []
  for arm, f in level.items():
    for seed in seeds:
      for depth in depths:
        end = f(depth, seed)
        probes = {q: {"steps": [0, 1000], "values": [[0.1, g(0.5)], [0.2, g(end)]]}
                  for q, g in (("mean_abs", lambda v: v), ("var_entry", lambda v: v * v))}
        out.append(Trial(f"{arm},{depth},{seed}", {"model.n_layer": depth, **arms[arm], "seed": seed},
                         Summary(step=1000), [], 10, 512, probes))
  return out


def test_the_fitted_rate_is_0_for_any_line_and_the_true_rate_for_an_exponential():
  """Protocol 3's statistic: a + b (e^{rD} - 1)/r profiled over its grid. A line with a positive
  intercept (protocol 2's false positive) fits best at r = 0; a bent curve at its own rate."""
  d = np.array(DEPTHS, float)
  lines = [0.3 + 0.03 * d, 0.02 * d, 5 - 0.01 * d]
  assert growth_curves.fitted_rates(d, lines).tolist() == [0, 0, -0.1]  # falling: no rising fit, the lowest
  bent = [1 + 0.2 * np.expm1(r * d) / r for r in (0.04, -0.05, 0.15)]
  assert growth_curves.fitted_rates(d, bent) == pytest.approx([0.04, -0.05, 0.15])
  near_zero = growth_curves.exponential_basis(d, [0.0, 1e-9])
  assert near_zero[0] == pytest.approx(near_zero[1]) and near_zero[0].tolist() == d.tolist()
  assert growth_curves.level_powers(d, [2 * d ** 0.5, d ** 2]) == pytest.approx([0.5, 2])


def test_seed_measures_read_growth_above_init_rates_and_level_exponents_per_seed():
  measures = depth_growth.SeedMeasures(PROTOCOL, ARMS, trials({
      "Pre": lambda d, s: 0.5 + 0.2 * np.expm1(0.05 * d) / 0.05 * (1 + 0.01 * s),
      "Peri": lambda d, s: (1 + 0.1 * s) * d ** 0.5}))
  assert measures.depths == list(DEPTHS) and measures.seeds == [0, 1, 2]
  depths, grown = measures.growth("Pre", 0)
  assert depths == list(DEPTHS) and grown == pytest.approx(0.2 * np.expm1(0.05 * np.array(DEPTHS)) / 0.05)
  assert measures.rates("Pre") == pytest.approx([0.05] * 3)
  assert measures.exponents("Peri") == pytest.approx([0.5] * 3)
  assert measures.exponents("Peri", "var_entry") == pytest.approx([1.0] * 3)
  mean, low, high = measures.exponent("Peri")
  assert (mean, low, high) == pytest.approx((0.5, 0.5, 0.5))  # every seed alike: no spread


def test_the_exponent_interval_is_welchs_over_the_seeds_and_a_missing_depth_leaves_none():
  noise = {0: 0.45, 1: 0.5, 2: 0.55}
  measures = depth_growth.SeedMeasures(PROTOCOL, ARMS, trials({"Peri": lambda d, s: d ** noise[s]}))
  mean, low, high = measures.exponent("Peri")
  half = 4.302653 * 0.05 / math.sqrt(3)  # t(0.975, 2) times the standard error of 0.45, 0.5, 0.55
  assert mean == pytest.approx(0.5) and (low, high) == pytest.approx((0.5 - half, 0.5 + half), rel=1e-4)
  gapped = [t for t in trials({"Peri": lambda d, s: d ** noise[s]}) if t.name != "Peri,12,1"]
  measures = depth_growth.SeedMeasures(PROTOCOL, ARMS, gapped)
  assert math.isnan(measures.exponents("Peri")[1]) and all(math.isnan(x) for x in measures.exponent("Peri"))


def test_a_missing_trial_of_the_grid_leaves_the_rate_claim_not_testable():
  claim = p.Claim("exp", "Pre grows exponentially", "exponential_rate", arm="Pre", power_at=0.04)
  grid = trials({"Pre": lambda d, s: 1 + 0.03 * d})
  expected = [t.overrides for t in grid]
  measures = depth_growth.SeedMeasures(PROTOCOL, ARMS, grid[1:], expected=expected)
  assert measures.curves(claim, PROTOCOL) == "Pre: 1 trials not filed"
  both = trials({"Pre": lambda d, s: 1 + 0.03 * d, "Peri": lambda d, s: 1 + 0.03 * d})
  partial = depth_growth.SeedMeasures(PROTOCOL, ARMS, both[:-1], expected=[t.overrides for t in both])
  assert partial.curves(claim, PROTOCOL) == "Peri: 1 trials not filed"  # the grid's other arm: still run in part
  curves = depth_growth.SeedMeasures(PROTOCOL, ARMS, grid, expected=expected).curves(claim, PROTOCOL)
  assert curves.depths == DEPTHS and curves.margin == 0.02 and list(curves.rates()) == [0.0] * 3


def test_the_level_description_says_whether_the_unbounded_arms_lie_under_the_bound_too():
  """Peri-LN's level under its bound is no result where Pre-LN's is under it too; where Pre-LN's
  exponent reaches above, the description names it instead."""
  arms = {"Pre": ARMS["Pre"], "Peri": ARMS["Peri"]}
  under = depth_growth.SeedMeasures(PROTOCOL, ARMS, trials({
      "Pre": lambda d, s: (1 + 0.1 * s) * d ** 0.6, "Peri": lambda d, s: (1 + 0.1 * s) * d ** 0.5}))
  text, table = report_growth.level_exponent_part(PROTOCOL, under, arms)
  assert "The exponents of Pre lie under the same bounds" in text and "Peri bound their level" in text
  assert "| Pre | 0.60 [0.60, 0.60] | 1.20 [1.20, 1.20] |" in table
  above = depth_growth.SeedMeasures(PROTOCOL, ARMS, trials({
      "Pre": lambda d, s: math.exp(0.1 * d + 0.01 * s), "Peri": lambda d, s: (1 + 0.1 * s) * d ** 0.5}))
  text, _ = report_growth.level_exponent_part(PROTOCOL, above, arms)
  assert "the interval of Pre's mean |h| and Pre's entry-wise variance reaches above its bound" in text
  assert "under the same bounds" not in text


GROWTH = grid.load_module(pathlib.Path(__file__).resolve().parent.parent / "experiments" / "growth.py")


@pytest.mark.parametrize("claim_id", [c.id for c in GROWTH.PROTOCOL.claims])
def test_a_claims_own_arm_growing_affinely_is_contradicted_beside_arms_that_bend(claim_id):
  """Each claim reads its own arm: that arm's growth above init affine (each seed its own
  intercept and slope) while every other arm's is exponential at twice min_rate contradicts it
  (r̂ = 0), and the others' claims still read their bend."""
  protocol = GROWTH.PROTOCOL
  arm = next(c.arm for c in protocol.claims if c.id == claim_id)
  bent = lambda d, s: 0.5 + 0.2 * np.expm1(0.04 * d) / 0.04
  affine = lambda d, s: 0.8 + 0.1 * s + (0.03 + 0.005 * s) * d
  grown = trials({a: affine if a == arm else bent for a in GROWTH.ARMS}, GROWTH.SEEDS, GROWTH.DEPTHS, GROWTH.ARMS)
  measures = depth_growth.SeedMeasures(protocol, GROWTH.ARMS, grown, 1.0, GROWTH.get_sweep("v3_cpu"))
  found = {x.claim.id: x for x in judge.judge(protocol, measures)}
  assert found[claim_id].verdict == v.CONTRADICTED and found[claim_id].effects[0].mean == 0
  assert {x.verdict for k, x in found.items() if k != claim_id} == {v.REPRODUCED}
