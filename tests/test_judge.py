"""Verdicts under a pre-registered protocol (nplace/studies/judge.py) from constructed
measurements, and the sensitivity table."""
import dataclasses

import numpy as np
import pytest

from nplace import protocol as p
from nplace.studies import intervals, judge, verdict as v

PROTOCOL = p.Protocol(
    name="test", version=3, kind=p.STABILITY_SWEEP, summary="", seeds=3, bootstrap_resamples=500, bootstrap_seed=0, interval=0.95,
    thresholds=(p.Threshold("min_effect", 0.1, ""),),
    claims=(p.Claim("flatter", "B is flatter than W", "lr_sensitivity", better="B", worse="W"),
            p.Claim("matches", "B matches W at its best", "best_loss", better="B", worse="W", matches=True)))


@dataclasses.dataclass
class Fake:
  """What judge reads: per-seed values per (metric, arm, shape)."""
  values: dict
  shapes: tuple = ("small", "large")
  missing: dict = dataclasses.field(default_factory=dict)  # where -> trials not filed
  lrs: tuple = (0.01, 0.1, 1.0)  # the sweep's rates (three-way max_stable_lr reads its top)

  def per_seed(self, metric, arm, shape):
    return self.values[metric, arm, shape]


def fake(flat_gap, best_gap, missing=False):
  values = {}
  for shape in Fake.shapes:
    values["lr_sensitivity", "B", shape] = [0.50, 0.52, 0.48]
    values["lr_sensitivity", "W", shape] = [0.50 + flat_gap + d for d in (0.01, -0.01, 0.0)]
    values["best_loss", "W", shape] = [2.00, 2.02, 1.98]
    values["best_loss", "B", shape] = [2.00 + best_gap + d for d in (0.01, -0.01, 0.0)]
  if missing:
    values["lr_sensitivity", "B", "large"] = [0.5, None, 0.5]
  return Fake(values)


def verdicts(measures, protocol=PROTOCOL):
  return {v.claim.id: v.verdict for v in judge.judge(protocol, measures)}


def test_clear_effects_are_reproduced():
  assert verdicts(fake(flat_gap=0.5, best_gap=-0.05)) == {"flatter": v.REPRODUCED, "matches": v.REPRODUCED}


def test_an_effect_inside_the_margin_or_reversed_is_not_reproduced():
  assert verdicts(fake(flat_gap=0.05, best_gap=0.3)) == {"flatter": v.NOT_REPRODUCED, "matches": v.NOT_REPRODUCED}


def test_missing_runs_are_not_testable():
  assert verdicts(fake(flat_gap=0.5, best_gap=0.0, missing=True)) == {"flatter": v.NOT_TESTABLE, "matches": v.REPRODUCED}


def test_effects_carry_the_mean_and_a_bootstrap_interval_around_it():
  (flatter, *_) = judge.judge(PROTOCOL, fake(flat_gap=0.5, best_gap=0.0))
  for effect in flatter.effects:
    assert effect.mean == pytest.approx(0.5) and effect.low <= effect.mean <= effect.high
    assert effect.high - effect.low < 0.1 and effect.seeds == 3
  # the interval is of the mean over seeds: resampling 3 seeds of spread 0.02 each side
  low, high = intervals.mean_interval([1.0, 2.0, 3.0], PROTOCOL, np.random.default_rng(0))[1:]
  assert 1.0 <= low < 2.0 < high <= 3.0


def test_judging_is_reproducible():
  assert judge.judge(PROTOCOL, fake(0.2, 0.0)) == judge.judge(PROTOCOL, fake(0.2, 0.0))


def test_sensitivity_judges_again_at_half_and_double_each_threshold():
  rows = judge.sensitivity(PROTOCOL, lambda protocol: fake(flat_gap=0.15, best_gap=0.0))
  assert [(name, value) for name, value, _ in rows] == [
      ("min_effect", 0.05), ("min_effect", 0.1), ("min_effect", 0.2)]
  assert [verdict[0] for _, _, verdict in rows] == [v.REPRODUCED, v.REPRODUCED, v.NOT_REPRODUCED]
  assert PROTOCOL.scaled("min_effect", 2.0).threshold("min_effect") == 0.2
  assert PROTOCOL.threshold("min_effect") == 0.1  # scaling makes a new protocol


def test_a_bounded_threshold_is_varied_by_its_distance_to_the_bound():
  """A similarity threshold of 0.99 doubled would be 1.98, which no similarity reaches: the
  sensitivity table would show a verdict change no data could make."""
  similarity = p.Threshold("similarity", 0.99, "a cosine", bound=1.0)
  bounded = dataclasses.replace(PROTOCOL, thresholds=(*PROTOCOL.thresholds, similarity))
  values = [value for name, value, _ in judge.sensitivity(bounded, lambda protocol: fake(0.15, 0.0))
            if name == "similarity"]
  assert values == pytest.approx([0.995, 0.99, 0.98])


def test_welch_t_intervals_match_scipy_and_a_bootstrap_of_3_seeds_is_their_range():
  """Protocol 2's intervals: Welch's t-interval of a difference of means (scipy's own), and of
  one mean; the version-1 bootstrap's 95% interval over 3 seeds is just [min, max]."""
  from scipy import stats
  better, worse = [0.31, 0.18, 0.25, 0.40, 0.22], [0.59, 0.45, 0.71, 0.52]
  t = dataclasses.replace(PROTOCOL, interval_method=p.WELCH_T)
  mean, low, high = intervals.difference(better, worse, t, None)
  ci = stats.ttest_ind(worse, better, equal_var=False).confidence_interval(0.95)
  assert mean == pytest.approx(np.mean(worse) - np.mean(better)) and (low, high) == pytest.approx((ci.low, ci.high))
  mean, low, high = intervals.mean_interval(better, t, None)
  one = stats.ttest_1samp(better, 0).confidence_interval(0.95)
  assert (low, high) == pytest.approx((one.low, one.high))
  # seeds exactly alike (0.25 and 0.5 are exact in binary; 3 x 0.2 is not, and leaves a variance of
  # 1e-33): no spread to widen by, a zero-width interval, not NaN
  assert intervals.mean_interval([0.25, 0.25, 0.25], t, None) == (0.25, 0.25, 0.25)
  assert intervals.difference([0.25] * 3, [0.5] * 4, t, None) == (0.25, 0.25, 0.25)
  boot = dataclasses.replace(PROTOCOL, bootstrap_resamples=2000)
  _, low, high = intervals.mean_interval([0.259, 0.150, 0.064], boot, np.random.default_rng(0))
  assert (low, high) == pytest.approx((0.064, 0.259))


def test_the_maximum_stable_rate_is_judged_in_decades_against_min_lr_gap():
  gap = dataclasses.replace(PROTOCOL, claims=(p.Claim("higher", "B learns at higher rates", "max_stable_lr", "B", "W"),),
                            thresholds=PROTOCOL.thresholds + (p.Threshold("min_lr_gap", 0.25, ""),))
  values = {("max_stable_lr", "B", s): [1.0, 1.0, 1.5] for s in Fake.shapes}  # -log10: 1e-1, 1e-1, 10^-1.5
  values |= {("max_stable_lr", "W", s): [2.0, 2.5, 2.0] for s in Fake.shapes}
  [verdict] = judge.judge(gap, Fake(values))
  assert verdict.verdict == v.REPRODUCED and verdict.effects[0].what == "better − worse, decades of rate"
  assert verdict.effects[0].mean > 0  # B learns at rates a decade higher: worse − better of -log10(rate)
  values["max_stable_lr", "W", "large"] = [1.0, 1.5, 1.0]  # within the gap in one shape
  assert judge.judge(gap, Fake(values))[0].verdict == v.NOT_REPRODUCED
  values["max_stable_lr", "W", "large"] = [2.0, None, 2.0]  # a seed that learned at no rate
  assert judge.judge(gap, Fake(values))[0].verdict == v.NOT_TESTABLE


def test_a_claim_with_fewer_seeds_than_declared_or_a_grid_part_missing_is_not_testable():
  short = fake(0.5, -0.05)
  for shape in Fake.shapes:
    for arm in "BW":
      short.values["lr_sensitivity", arm, shape] = short.values["lr_sensitivity", arm, shape][:2]
  assert verdicts(short)["flatter"] == v.NOT_TESTABLE  # 2 seeds, the protocol declares 3
  partial = fake(0.5, -0.05)
  partial.missing = {"depth 12": 175}
  found = {v.claim.id: v for v in judge.judge(PROTOCOL, partial)}
  assert {v.verdict for v in found.values()} == {v.NOT_TESTABLE}
  assert "depth 12 (175 trials)" in found["flatter"].would_change and "finished ones: reproduced" in found["flatter"].would_change


THREE_WAY = dataclasses.replace(PROTOCOL, interval_method=p.WELCH_T, verdicts=p.THREE_WAY)


@pytest.mark.parametrize("gap,best,flatter,matches", [
    (0.5, -0.05, v.REPRODUCED, v.REPRODUCED),  # wholly past each margin
    (0.12, 0.1, v.INCONCLUSIVE, v.INCONCLUSIVE),  # straddling 0.1 and -0.1
    (-0.3, 0.3, v.CONTRADICTED, v.CONTRADICTED),  # wholly on the other side
])
def test_three_way_verdicts_read_where_the_interval_lies_against_the_margin(gap, best, flatter, matches):
  """An interval straddling the margin is inconclusive; a "matches" claim is read against its
  margin's other sign, at the interval's end the claim needs."""
  found = {x.claim.id: x.verdict for x in judge.judge(THREE_WAY, fake(flat_gap=gap, best_gap=best))}
  assert (found["flatter"], found["matches"]) == (flatter, matches)


@pytest.mark.parametrize("protocol,short", [(PROTOCOL, v.NOT_REPRODUCED), (THREE_WAY, v.CONTRADICTED)])
def test_a_maximum_stable_rate_gap_is_read_against_min_lr_gap_not_min_effect(protocol, short):
  """0.2 decades clear min_effect (0.1, nats) but not min_lr_gap (0.25 decades): a gap short of
  min_lr_gap is not reproduced (three-way: its interval lies wholly below, contradicted); 0.4 is."""
  gap = dataclasses.replace(protocol, claims=(p.Claim("higher", "B learns at higher rates", "max_stable_lr", "B", "W"),),
                            thresholds=PROTOCOL.thresholds + (p.Threshold("min_lr_gap", 0.25, ""),))

  def verdict(decades):
    values = {("max_stable_lr", "B", s): [1.0, 1.01, 0.99] for s in Fake.shapes}
    values |= {("max_stable_lr", "W", s): [1.0 + decades + d for d in (0.01, -0.01, 0.0)] for s in Fake.shapes}
    return judge.judge(gap, Fake(values))[0].verdict
  assert verdict(0.2) == short and verdict(0.4) == v.REPRODUCED


def test_a_three_way_claim_is_contradicted_by_one_shape_wholly_on_the_other_side():
  """One shape's interval past the margin, the other's wholly below it: contradicted, not
  inconclusive ("contradicted when some shape's interval lies wholly on the other side")."""
  mixed = fake(flat_gap=0.5, best_gap=-0.05)
  mixed.values["lr_sensitivity", "W", "large"] = [0.50 - 0.3 + d for d in (0.01, -0.01, 0.0)]
  assert verdicts(mixed, THREE_WAY)["flatter"] == v.CONTRADICTED
