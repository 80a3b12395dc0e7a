"""LR sensitivity (Wortsman et al. 2023) by hand, and measured from constructed trials."""
import dataclasses
import math

import pytest

from nplace.studies import lr_sensitivity, outcomes
from nplace.protocol import STABILITY_SWEEP, Protocol, Threshold, Grid
from nplace.studies.results import Trial
from nplace.train.summary import Summary

PROTOCOL = Protocol("t", 1, STABILITY_SWEEP, "", 2, 100, 0, 0.95, (Threshold("did_not_learn", 0.1, ""),), ())
ARMS = {"Pre": {"model.placement": "pre"}, "Peri": {"model.placement": "peri"}}
FREQ, RATE, VOCAB = 4.5, 1.5, 512


def test_sensitivity_caps_each_loss_and_subtracts_the_best():
  # capped at 4: [3, 2, 4, 4] -> mean 3.25, best 2
  assert lr_sensitivity.sensitivity([3.0, 2.0, 5.0, math.nan], cap=4.0) == 1.25
  assert lr_sensitivity.sensitivity([2.0, 2.0, 2.0], cap=4.0) == 0.0


def trial(placement, lr, seed, val, n_layer=6):
  overrides = {"model.n_layer": n_layer, "model.placement": placement, "optim.lr": lr, "seed": seed}
  summary = Summary(val_loss=val, frequency_loss=FREQ, entropy_rate=RATE, step=100)
  loss = [(20, 4.0), (100, val)] if math.isfinite(val) else [(20, 4.0), (30, math.nan)]
  return Trial(f"{placement},{lr},{seed}", overrides, summary, loss, 10, VOCAB)


def grid():
  # Pre: good at 1e-3, diverges at 1e-1 (NaN); Peri: flat
  pre = {1e-3: 2.0, 1e-2: 3.0, 1e-1: math.nan}
  peri = {1e-3: 2.2, 1e-2: 2.1, 1e-1: 2.3}
  return [trial(name, lr, seed, loss + 0.01 * seed)
          for name, curve in (("pre", pre), ("peri", peri)) for lr, loss in curve.items() for seed in (0, 1)]


def test_measures_per_arm_shape_and_seed():
  m = lr_sensitivity.Measures(PROTOCOL, ARMS, grid())
  assert m.arms == ["Pre", "Peri"] and m.shapes == ["depth 6"] and m.lrs == [1e-3, 1e-2, 1e-1]
  init = math.log(VOCAB)
  # Pre, seed 0: capped [2.0, 3.0, ln 512]; best 2.0
  assert m.per_seed("lr_sensitivity", "Pre", "depth 6")[0] == pytest.approx((2.0 + 3.0 + init) / 3 - 2.0)
  assert m.per_seed("frequency_sensitivity", "Pre", "depth 6")[0] == pytest.approx((2.0 + 3.0 + FREQ) / 3 - 2.0)
  assert m.per_seed("lr_sensitivity", "Peri", "depth 6")[1] == pytest.approx((2.21 + 2.11 + 2.31) / 3 - 2.11)
  assert m.per_seed("best_loss", "Pre", "depth 6") == [2.0, 2.01]
  assert m.counts("Pre", "depth 6", 1e-1) == {outcomes.DIVERGED: 2, outcomes.DID_NOT_LEARN: 0, outcomes.LEARNED: 0}


def test_a_seed_missing_a_learning_rate_has_no_sensitivity():
  m = lr_sensitivity.Measures(PROTOCOL, ARMS, grid()[1:])  # Pre, lr 1e-3, seed 0 left out
  assert m.per_seed("lr_sensitivity", "Pre", "depth 6")[0] is None


def test_trials_of_no_arm_are_left_out():
  m = lr_sensitivity.Measures(PROTOCOL, ARMS, grid() + [trial("post", 1e-3, 0, 3.0)])
  assert m.arms == ["Pre", "Peri"] and len(m.points) == 12


def test_a_grid_without_a_sweep_is_measured_by_its_final_loss():
  trials = [trial("pre", 1e-3, seed, 2.0 + seed) for seed in (0, 1)] + [trial("peri", 1e-3, 0, math.nan)]
  for t in trials:
    del t.overrides["optim.lr"]
  m = lr_sensitivity.Measures(PROTOCOL, ARMS, trials)
  assert not m.swept and m.lrs == [None]
  assert m.per_seed("final_loss", "Pre", "depth 6") == [2.0, 3.0]
  assert m.per_seed("final_loss", "Peri", "depth 6") == [math.log(VOCAB), None]  # diverged: the init loss
  with pytest.raises(ValueError, match="lr_sensitivity"):
    m.per_seed("lr_sensitivity", "Pre", "depth 6")
  with pytest.raises(ValueError, match="final_loss"):
    lr_sensitivity.Measures(PROTOCOL, ARMS, grid()).per_seed("final_loss", "Pre", "depth 6")


def test_measures_classify_by_the_protocols_outcome_rules_and_arms():
  """A run that blew up above its loss at init before learning (7 -> 11 nats) and ended at 6.5:
  `did_not_learn` under protocol 1's rules, `diverged` under a protocol declaring `blow_ups`; a protocol's
  own arms (here with weight decay) are the ones `results.arms` hands the measures."""
  from nplace.studies import results
  blown = Trial("pre,blown", {"model.placement": "pre", "optim.lr": 1.0, "seed": 0},
                Summary(val_loss=6.5, frequency_loss=FREQ, entropy_rate=RATE, step=100),
                [(1, 7.0), (20, 11.0), (100, 6.5)], 10, VOCAB)
  assert lr_sensitivity.Measures(PROTOCOL, ARMS, [blown]).points[0].outcome == outcomes.DID_NOT_LEARN
  rules_2 = dataclasses.replace(PROTOCOL, blow_ups=True)
  assert lr_sensitivity.Measures(rules_2, ARMS, [blown]).points[0].outcome == outcomes.DIVERGED
  found = Grid(config=None, sweep=None, arms=ARMS)
  own = {"Pre, no weight decay": {"model.placement": "pre", "optim.weight_decay": 0.0}}
  assert results.arms(found, PROTOCOL) is ARMS
  assert results.arms(found, dataclasses.replace(PROTOCOL, arms=own)) is own


RULES_2 = dataclasses.replace(PROTOCOL, blow_ups=True, diverged_at_cap=True,
                              thresholds=PROTOCOL.thresholds + (Threshold("bracket_margin", 0.05, ""),))


def sweep_trial(lr, seed, final, curve=None, steps=100):
  """A rules-2 trial: every 10th step's loss (`curve` step -> loss, else 6 -> final), evaluated
  at the half and at the end."""
  curve = curve or {s: 6.0 - (6.0 - final) * s / steps for s in range(0, steps + 1, 10)}
  summary = Summary(val_loss=final, frequency_loss=FREQ, entropy_rate=RATE, step=steps)
  return Trial(f"pre,{lr},{seed}", {"model.placement": "pre", "optim.lr": lr, "seed": seed}, summary,
               sorted(curve.items()), 10, VOCAB, val_loss=[(steps // 2, curve.get(steps // 2, final)), (steps, final)])


def test_rules_2_measure_the_maximum_stable_rate_and_count_a_diverged_seed_as_the_cap():
  # seed 0 learns up to 1e-2 and blows up for good at 1e-1; seed 1 learns at every rate
  blown = {0: 6.0, 10: 5.0, 20: 12.0, 100: 6.2}
  trials = [sweep_trial(1e-3, 0, 2.5), sweep_trial(1e-2, 0, 2.0), sweep_trial(1e-1, 0, 6.2, blown),
            sweep_trial(1e-3, 1, 2.5), sweep_trial(1e-2, 1, 2.1), sweep_trial(1e-1, 1, 2.3)]
  m = lr_sensitivity.Measures(RULES_2, ARMS, trials)
  assert [p.outcome for p in m.points if p.lr == 1e-1] == [outcomes.DIVERGED, outcomes.LEARNED]
  assert m.per_seed("max_stable_lr", "Pre", "as configured") == [2.0, 1.0]  # -log10 of 1e-2, 1e-1
  lrs, means = m.mean_curve("Pre", "as configured")
  assert means[-1] == pytest.approx((math.log(VOCAB) + 2.3) / 2)  # the diverged seed at ln V
  assert m.best_lr("Pre", "as configured") == (1e-2, True)
  assert not m.top_rate_fails("Pre", "as configured")
  rules_1 = lr_sensitivity.Measures(PROTOCOL, ARMS, trials)
  assert rules_1.mean_curve("Pre", "as configured")[1][-1] == pytest.approx((6.2 + 2.3) / 2)  # no divergence there


def test_an_optimum_whose_neighbours_sit_within_the_margin_is_not_bracketed():
  trials = [sweep_trial(lr, 0, loss) for lr, loss in ((1e-3, 2.52), (1e-2, 2.50), (1e-1, 2.8))]
  assert lr_sensitivity.Measures(RULES_2, ARMS, trials).best_lr("Pre", "as configured") == (1e-2, False)
  trials[0] = sweep_trial(1e-3, 0, 2.6)
  assert lr_sensitivity.Measures(RULES_2, ARMS, trials).best_lr("Pre", "as configured") == (1e-2, True)


def test_a_transient_blow_up_is_counted_beside_the_spikes_not_as_a_failure():
  recovered = {0: 6.0, 10: 5.0, 20: 9.0, 30: 4.0, 100: 2.0}
  m = lr_sensitivity.Measures(RULES_2, ARMS, [sweep_trial(1e-1, 0, 2.0, recovered)])
  assert m.points[0].outcome == outcomes.LEARNED
  [found] = m.blow_ups("Pre", "as configured")
  assert (found.step, found.peak, found.recovered) == (20, 3.0, True)
  assert outcomes.spikes(m.points[0].trial.loss, 10, 1.0, blow_ups=True) == []  # above init: a blow-up, not a spike


def test_a_horizon_measures_the_trials_as_they_stood_then():
  # learned by the end, but at the half its validation loss was still at the frequency loss
  late = sweep_trial(1e-2, 0, 2.0, {s: 6.0 if s <= 50 else 2.0 for s in range(0, 101, 10)})
  late.val_loss = [(50, FREQ), (100, 2.0)]
  half = lr_sensitivity.Measures(RULES_2, ARMS, [late], horizon=0.5)
  assert half.points[0].trial.summary.val_loss == FREQ and half.points[0].trial.loss[-1] == (50, 6.0)
  assert half.points[0].outcome == outcomes.DID_NOT_LEARN
  assert lr_sensitivity.Measures(RULES_2, ARMS, [late]).points[0].outcome == outcomes.LEARNED
  stopped = dataclasses.replace(late, summary=dataclasses.replace(late.summary, status="diverged", diverged_at=80))
  assert lr_sensitivity.Measures(RULES_2, ARMS, [stopped], horizon=0.5).points[0].trial.summary.status == "completed"


def test_the_trials_of_the_grid_not_yet_filed_are_counted_per_shape():
  trials = [trial("pre", 1e-3, 0, 2.0), trial("peri", 1e-3, 0, 2.0)]
  expected = [t.overrides for t in trials] + [{**trials[0].overrides, "model.n_layer": 12, "seed": s} for s in (0, 1)]
  assert lr_sensitivity.Measures(PROTOCOL, ARMS, trials, expected=expected).missing == {"depth 12": 2}
