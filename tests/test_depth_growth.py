"""Growth over depth: the power-law fit by hand, and growth claims judged on constructed trials."""
import math

import numpy as np
import pytest

from nplace import protocol as p
from nplace.studies import depth_growth, judge, verdict
from nplace.studies.results import Trial
from nplace.train.summary import Summary

DEPTHS = (6, 12, 24, 48)
ARMS = {"Pre": {"model.placement": "pre", "model.dt": 1.0}, "Pre dt": {"model.placement": "pre", "model.dt": 0.1},
        "Peri": {"model.placement": "peri", "model.dt": 1.0}}
PROTOCOL = p.Protocol("g", 1, p.GROWTH_POOLED, "", 1, 0, 0, 0.95, (p.Threshold("min_r2_gap", 0.05, ""),), (
    p.Claim("exp", "Pre grows exponentially", "exponential_over_linear", arm="Pre"),
    p.Claim("linear", "Peri at most linearly", "power_at_most", arm="Peri", at_most=1.0),
    p.Claim("dt", "dt lowers Pre", "lower_at_every_depth", "Pre dt", "Pre")))


def test_power_fit_recovers_the_exponent_with_an_interval():
  d = np.array(DEPTHS, float)
  exponent, low, high = depth_growth.power_fit(d, 2 * d ** 1.5, 0.95)
  assert exponent == pytest.approx(1.5) and high - low < 1e-6
  noisy = 2 * d ** 1.5 * np.array([1.1, 0.9, 1.1, 0.9])
  exponent, low, high = depth_growth.power_fit(d, noisy, 0.95)
  assert low < exponent < high and low < 1.5 < high and high - low > 0.1
  assert all(math.isnan(x) for x in depth_growth.power_fit(d[:2], d[:2], 0.95))  # 2 depths: no interval
  assert all(math.isnan(x) for x in depth_growth.power_fit(d, d - 10, 0.95))  # a value <= 0


def trials(profiles):
  """One trial per arm, depth and weight decay; `profiles[arm](D)` is its top layer's mean |h|."""
  out = []
  for arm, f in profiles.items():
    for wd in (0.1, 0.0):
      for depth in DEPTHS:
        values = [[f(depth) / 10] * depth, [f(depth) / 2] * (depth - 1) + [f(depth)]]
        out.append(Trial(f"{arm},{depth},{wd}", {"model.n_layer": depth, **ARMS[arm], "optim.weight_decay": wd},
                         Summary(step=300), [], 10, 512, {"mean_abs": {"steps": [0, 300], "values": values}}))
  return out


def verdicts(profiles, protocol=PROTOCOL):
  measures = depth_growth.Measures(protocol, ARMS, trials(profiles))
  return {v.claim.id: v.verdict for v in judge.judge(protocol, measures)}


def test_the_claims_hold_on_the_shapes_they_name():
  measures = depth_growth.Measures(PROTOCOL, ARMS, trials({"Pre": lambda d: math.exp(0.1 * d)}))
  assert measures.shapes == ["weight decay 0.1", "weight decay 0.0"]
  depths, top = measures.top("Pre", "weight decay 0.1")
  assert depths.tolist() == list(DEPTHS) and top[-1] == pytest.approx(math.exp(4.8))
  assert measures.top("Pre", "weight decay 0.1", when=0)[1][-1] == pytest.approx(math.exp(4.8) / 10)
  assert verdicts({"Pre": lambda d: math.exp(0.1 * d), "Pre dt": lambda d: 0.1 * math.exp(0.1 * d),
                   "Peri": lambda d: 0.5 * d}) == {"exp": verdict.REPRODUCED, "linear": verdict.REPRODUCED, "dt": verdict.REPRODUCED}


def test_and_fail_on_the_shapes_they_do_not():
  assert verdicts({"Pre": lambda d: 0.5 * d, "Pre dt": lambda d: 0.6 * d, "Peri": lambda d: d ** 1.5}) == {
      "exp": verdict.NOT_REPRODUCED, "linear": verdict.NOT_REPRODUCED, "dt": verdict.NOT_REPRODUCED}


def test_missing_arms_are_not_testable():
  assert verdicts({"Pre": lambda d: d}) == {"exp": verdict.NOT_REPRODUCED, "linear": verdict.NOT_TESTABLE, "dt": verdict.NOT_TESTABLE}


DEPTHS_V2 = (3, 6, 12, 24, 48, 96)


def test_slope_rise_against_two_polyfits():
  """Protocol 2's exponential test: the deepest three depths' log-log slope minus the shallowest
  three's, against np.polyfit on each half; 0 for any power law, ~45 r for e^{rD}."""
  rng = np.random.default_rng(3)
  values = np.exp(rng.normal(size=6)) + 1
  x, y = np.log(DEPTHS_V2), np.log(values)
  want = np.polyfit(x[3:], y[3:], 1)[0] - np.polyfit(x[:3], y[:3], 1)[0]
  assert depth_growth.slope_rise(DEPTHS_V2, values) == pytest.approx(want)
  assert depth_growth.slope_rise(DEPTHS_V2, 0.3 * np.array(DEPTHS_V2, float) ** 1.7) == pytest.approx(0, abs=1e-12)
  assert depth_growth.slope_rise(DEPTHS_V2, np.exp(0.02 * np.array(DEPTHS_V2))) == pytest.approx(0.02 * 45.44, rel=1e-3)
  assert math.isnan(depth_growth.slope_rise(DEPTHS_V2, [1, 2, 3, 4, 5, 0]))


def test_detectable_rate_has_the_stated_power_in_a_brute_force_simulation():
  """At the rate it states, 3 seeds with N(0, 0.1) noise on log growth pass the t-interval test
  ~80% of the time (here: polyfits and the t quantile, on other draws); at half of it,
  far less often."""
  from scipy import stats
  r = depth_growth.detectable_rate(DEPTHS_V2, 3, 0.2, 0.1, 0.95)
  depths, rng = np.array(DEPTHS_V2, float), np.random.default_rng(7)

  def pass_rate(rate, draws=2000):
    log_growth = rate * depths[:, None] + rng.normal(0, 0.1, (6, 3 * draws))  # depth x (draw, seed)
    rises = (np.polyfit(np.log(depths[3:]), log_growth[3:], 1)[0]
             - np.polyfit(np.log(depths[:3]), log_growth[:3], 1)[0]).reshape(draws, 3)
    lows = rises.mean(1) - stats.t.ppf(0.975, 2) * rises.std(1, ddof=1) / np.sqrt(3)
    return np.mean(lows > 0.2)
  assert 0.01 < r < 0.02 and pass_rate(r) == pytest.approx(0.8, abs=0.04) and pass_rate(r / 2) < 0.4


def test_the_fitted_rate_is_0_for_any_line_and_the_true_rate_for_an_exponential():
  """Protocol 3's statistic: a + b (e^{rD} - 1)/r profiled over its grid. A line with a positive
  intercept (protocol 2's false positive) fits best at r = 0; a bent curve at its own rate."""
  from nplace.studies import growth_curves
  d = np.array((3, 6, 12, 24, 48), float)
  lines = [0.3 + 0.03 * d, 0.02 * d, 5 - 0.01 * d]
  assert growth_curves.fitted_rates(d, lines).tolist() == [0, 0, -0.1]  # falling: no rising fit, the lowest
  bent = [1 + 0.2 * np.expm1(r * d) / r for r in (0.04, -0.05, 0.15)]
  assert growth_curves.fitted_rates(d, bent) == pytest.approx([0.04, -0.05, 0.15])
  near_zero = growth_curves.exponential_basis(d, [0.0, 1e-9])
  assert near_zero[0] == pytest.approx(near_zero[1]) and near_zero[0].tolist() == d.tolist()
  assert growth_curves.level_powers(d, [2 * d ** 0.5, d ** 2]) == pytest.approx([0.5, 2])
