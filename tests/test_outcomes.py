"""Failure kinds and the collapse verdict on hand-made summaries."""
import math
import types

import jax.numpy as jnp
import numpy as np
import pytest

from nplace.studies import outcomes
from nplace.train.summary import Summary, collapsed

FREQ = 4.48


def summary(**fields):
  """A healthy completed run unless `fields` say otherwise."""
  return Summary(**{"val_loss": 2.2, "train_loss": 2.1, "frequency_loss": FREQ, "max_train_loss": 4.0} | fields)


def test_collapsed_is_two_sided_within_the_margin():
  assert bool(collapsed(5.02, 5.0)) and bool(collapsed(4.96, 5.0))
  assert not bool(collapsed(4.5, 5.0)) and not bool(collapsed(5.2, 5.0, margin=0.1))
  np.testing.assert_array_equal(collapsed(jnp.array([5.0, 3.0]), 5.01), [True, False])


def test_healthy_run_is_ok():
  assert outcomes.failures(summary()) == ()


@pytest.mark.parametrize("fields", [
    {"status": "diverged", "diverged_at": 40},
    {"skipped_steps": 3},
    {"val_loss": math.nan},
    {"val_loss": math.inf},
])
def test_nonfinite(fields):
  assert outcomes.failures(summary(**fields)) == ("nonfinite",)


def test_frequency_loss_margin_and_above():
  margin = outcomes.FAILURE_MARGIN
  assert outcomes.failures(summary(val_loss=FREQ - margin / 2)) == ("frequency_loss",)
  assert outcomes.failures(summary(val_loss=FREQ + 1.7)) == ("frequency_loss",)  # stuck at uniform
  assert outcomes.failures(summary(val_loss=FREQ - 2 * margin)) == ()


def test_spike_is_a_climb_back_above_the_best_loss():
  rebound = outcomes.SPIKE_REBOUND
  assert outcomes.failures(summary(max_loss_rebound=rebound + 0.5)) == ("spike",)
  assert outcomes.failures(summary(loss_spikes=3, max_loss_rebound=0.3)) == ()  # batch noise
  assert outcomes.failures(summary(loss_spikes=0, max_train_loss=FREQ + 3)) == ()  # slow start


def test_counts_are_runs_failed_and_runs_of_each_kind():
  runs = [types.SimpleNamespace(summary=s) for s in (
      summary(), summary(val_loss=FREQ), summary(status="diverged", max_loss_rebound=5.0))]
  assert outcomes.counts(runs) == {"failed": 2, "nonfinite": 1, "frequency_loss": 1, "spike": 1}


def test_kinds_are_reported_together_most_severe_first():
  s = summary(val_loss=FREQ, max_loss_rebound=5.0)
  assert outcomes.failures(s) == ("frequency_loss", "spike")
  s = summary(status="diverged", val_loss=2.5, max_loss_rebound=5.0)
  assert outcomes.failures(s) == ("nonfinite", "spike")


def test_a_diverged_runs_last_val_loss_is_not_judged():
  assert outcomes.failures(summary(status="diverged", val_loss=FREQ + 1)) == ("nonfinite",)
  # skipped non-finite steps, but the run went on: its final loss is judged
  assert outcomes.failures(summary(skipped_steps=2, val_loss=FREQ + 1)) == ("nonfinite", "frequency_loss")


def test_fields_without_a_value_are_no_evidence():
  assert outcomes.failures(Summary(val_loss=2.2, frequency_loss=FREQ)) == ()  # no rebound after warmup
  assert outcomes.failures(Summary(status="diverged", frequency_loss=FREQ)) == ("nonfinite",)  # never evaluated


# Protocol 1: classify(summary, logged loss, warmup, did_not_learn) on hand-made runs.
RATE, WARMUP, DID_NOT_LEARN = 1.45, 10, 0.1


def run(val, loss, **fields):
  return summary(val_loss=val, entropy_rate=RATE, **fields), [(10 * (i + 1), x) for i, x in enumerate(loss)]


def test_learned_fraction_is_the_share_of_the_learnable_nats():
  assert outcomes.learned_fraction(summary(val_loss=FREQ, entropy_rate=RATE)) == 0.0
  assert outcomes.learned_fraction(summary(val_loss=RATE, entropy_rate=RATE)) == 1.0
  assert math.isclose(outcomes.learned_fraction(summary(val_loss=(FREQ + RATE) / 2, entropy_rate=RATE)), 0.5)
  assert outcomes.learned_fraction(summary(val_loss=2.0)) is None  # text data: no entropy rate


def test_a_recovered_spike_is_reported_and_is_not_a_failure():
  s, loss = run(2.3, [6.0, 4.0, 3.0, 2.6, 4.1, 3.9, 2.7, 2.4, 2.3])
  assert outcomes.spikes(loss, WARMUP, 1.0) == [outcomes.Spike(50, pytest.approx(1.5), True)]
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.LEARNED


def test_a_spike_that_never_comes_back_is_reported_unrecovered():
  assert outcomes.spikes([(20, 3.0), (30, 2.5), (40, 4.0), (50, 3.9)], WARMUP, 1.0) == [
      outcomes.Spike(40, 1.5, False)]
  # back to between half a rebound and a full one above the minimum: not recovered yet
  assert outcomes.spikes([(20, 3.0), (30, 2.5), (40, 4.0), (50, 3.2), (60, 3.1)], WARMUP, 1.0) == [
      outcomes.Spike(40, 1.5, False)]
  assert outcomes.spikes([(5, 9.0), (20, 3.0), (30, 3.5)], WARMUP, 1.0) == []  # warmup and noise
  assert outcomes.spikes([(20, 3.0), (30, math.inf), (40, 3.1)], WARMUP, 1.0) == []  # a divergence, not a spike


@pytest.mark.parametrize("fields,loss", [
    ({"val_loss": math.nan}, [4.0, 3.0]),
    ({"status": "diverged", "diverged_at": 31}, [4.0, 3.0]),
    ({"skipped_steps": 2}, [4.0, 3.0]),
    ({}, [4.0, math.inf, 3.0]),
])
def test_a_nonfinite_loss_is_a_divergence(fields, loss):
  s, loss = run(2.5, loss)
  s = summary(**{**s.to_dict(), **fields})
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.DIVERGED


def test_learning_then_staying_above_the_frequency_loss_is_a_divergence():
  s, loss = run(5.1, [5.0, 3.5, 2.8, 6.0, 5.2, 5.0])
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.DIVERGED
  s, loss = run(2.9, [5.0, 3.5, 2.8, 6.0, 5.2, 3.0])  # came back below it: a spike, not a divergence
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.LEARNED
  s, loss = run(5.1, [5.0, 3.5, 2.8, 2.9, 5.2])  # above it at the last logged step alone: still lost
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.DIVERGED


def test_a_stuck_run_did_not_learn_and_is_never_called_diverged():
  s, loss = run(4.40, [5.5, 4.6, 4.45, 4.3, 4.5, 4.52])  # noise about the frequency loss
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.DID_NOT_LEARN
  s, loss = run(6.2, [6.2] * 5)  # uniform predictions throughout
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.DID_NOT_LEARN
  s, loss = run(4.1, [5.0, 4.3, 4.1])  # 0.12 of the learnable nats: learned, just
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.LEARNED
  s, loss = run(FREQ - 0.08 * (FREQ - RATE), [5.0, 4.3, 4.25])  # 0.08 of them: did not, just
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.DID_NOT_LEARN
  # exactly the fraction (0.5 of 5 learnable nats, 0.1 to the last bit) is not "less than" it: learned
  exact = summary(val_loss=4.5, frequency_loss=5.0, entropy_rate=0.0)
  assert outcomes.learned_fraction(exact) == 0.1
  assert outcomes.classify(exact, [(10, 5.5), (20, 4.6), (30, 4.5)], WARMUP, 0.1) == outcomes.LEARNED


def test_a_plateau_is_the_last_quarters_mean_within_the_margin():
  flat = [(s, FREQ + (0.1 if s % 20 else -0.1)) for s in range(10, 410, 10)]  # noise of 0.1 about it
  assert outcomes.plateau(flat, FREQ, 0.05)
  falling = [(s, FREQ + 1 - s / 400) for s in range(10, 410, 10)]  # reaches it only at the end
  assert not outcomes.plateau(falling, FREQ, 0.05)
  assert outcomes.plateau([], FREQ, 0.05) is None


def test_the_plateau_gap_is_the_last_quarters_mean_minus_the_level():
  loss = [(s, FREQ + (1.0 if s < 300 else 0.2)) for s in range(10, 410, 10)]  # last quarter: 0.2 above
  assert outcomes.plateau_gap(loss, FREQ) == pytest.approx(0.2)
  assert outcomes.plateau_gap([], FREQ) is None


ENTROPY = 1.45
INIT = 6.24  # ln 512: the first step's loss at GPT-2's init
WARMUP = 10


def per_step(*segments):
  """A per-step train loss `[(step, loss)]` from (steps, start, end) linear segments."""
  out = []
  for n, a, b in segments:
    out += list(np.linspace(a, b, n, endpoint=False))
  return [(i + 1, float(v)) for i, v in enumerate(out)]


def classify2(loss, **fields):
  s = summary(entropy_rate=ENTROPY, **fields)
  return outcomes.classify(s, loss, WARMUP, 0.1, blow_ups=True), outcomes.blow_up(s, loss, WARMUP)


def test_rules_2_a_blow_up_before_any_learning_diverged():
  """Up from init to 11 nats right after warmup, never below the frequency loss: rules 1 call
  it `did_not_learn` (it never learned, so it never lost anything); rules 2 `diverged`."""
  loss = per_step((WARMUP, INIT, INIT), (20, 11.0, 8.0), (70, 7.0, 6.5))
  s = summary(entropy_rate=ENTROPY, val_loss=6.5)
  assert outcomes.classify(s, loss, WARMUP, 0.1) == outcomes.DID_NOT_LEARN
  outcome, blown = classify2(loss, val_loss=6.5)
  assert outcome == outcomes.DIVERGED and blown.step == WARMUP + 1 and not blown.recovered
  assert blown.peak == pytest.approx(11.0 - INIT)


def test_rules_2_a_blow_up_that_recovers_is_transient_not_a_spike():
  """Learned to 3, blew up to 9 (above init), came back to 2.3: `learned`, one recovered
  blow-up of 2.76 nats above init, and no spike (rules 1 saw a 6-nat spike)."""
  loss = per_step((WARMUP, INIT, 5.0), (40, 5.0, 3.0), (1, 9.0, 9.0), (49, 4.0, 2.3))
  outcome, blown = classify2(loss, val_loss=2.35)
  assert outcome == outcomes.LEARNED and blown.recovered and blown.peak == pytest.approx(9.0 - INIT)
  assert outcomes.spikes(loss, WARMUP, 1.0, blow_ups=True) == []
  assert [round(s.size) for s in outcomes.spikes(loss, WARMUP, 1.0)] == [6]


def test_rules_2_a_blow_up_on_text_data_diverged():
  """No entropy rate (text): the loss rose above init after warmup and the run ended above the
  frequency loss. Rules 1 read only the final loss there (`did_not_learn`)."""
  loss = per_step((WARMUP, INIT, 5.5), (30, 5.5, 12.0), (60, 12.0, 7.0))
  s = summary(val_loss=7.0)
  assert s.entropy_rate is None and outcomes.classify(s, loss, WARMUP, 0.1) == outcomes.DID_NOT_LEARN
  assert outcomes.classify(s, loss, WARMUP, 0.1, blow_ups=True) == outcomes.DIVERGED


def test_rules_2_spikes_count_from_the_first_step_after_warmup():
  """The warmup reached 3.0; the first step after it is 4.5. Rules 1 start the running
  minimum after warmup and cannot see that step as a spike; rules 2 can."""
  loss = per_step((WARMUP, INIT, 3.0), (1, 4.5, 4.5), (89, 3.0, 2.5))
  assert outcomes.spikes(loss, WARMUP, 1.0) == []
  (spike,) = outcomes.spikes(loss, WARMUP, 1.0, blow_ups=True)
  assert spike.step == WARMUP + 1 and spike.recovered and spike.size > 1.0


def test_rules_2_a_healthy_run_has_no_blow_up():
  loss = per_step((WARMUP, INIT, 5.0), (90, 5.0, 2.3))
  assert classify2(loss, val_loss=2.35) == (outcomes.LEARNED, None)


def test_a_blow_up_is_a_rise_above_the_running_minimum_after_warmup():
  """Protocol 4's stability: 1 nat above the lowest loss so far (warmup's included) blows up,
  recovered or not; a rise inside warmup, or of less than the rise, does not."""
  assert outcomes.blew_up([(5, 6.0), (20, 3.0), (30, 4.1), (40, 2.5)], WARMUP, 1.0)  # recovered: still blew up
  assert outcomes.blew_up([(5, 3.0), (20, 4.0)], WARMUP, 1.0)  # the minimum includes warmup's steps
  assert outcomes.blew_up([(20, 3.0), (30, math.nan)], WARMUP, 1.0)
  assert not outcomes.blew_up([(5, 3.0), (8, 9.0), (20, 3.9), (30, 3.5)], WARMUP, 1.0)


def test_a_rise_at_the_last_warmup_step_is_not_a_blow_up():
  assert not outcomes.blew_up([(5, 3.0), (WARMUP, 9.0), (20, 3.5)], WARMUP, 1.0)


def test_rules_2_a_warmup_transient_above_init_or_a_loss_at_init_is_no_blow_up():
  """The warmup's first steps may climb above the loss at init (`make demo`'s Peri-LN run); a run
  that never moves from its init loss blew nothing up either (it did not learn)."""
  loss = per_step((1, INIT, INIT), (WARMUP - 1, 8.0, 5.0), (90, 5.0, 2.3))
  assert classify2(loss, val_loss=2.35) == (outcomes.LEARNED, None)
  stuck = [(step, INIT) for step in range(1, 101)]
  assert classify2(stuck, val_loss=INIT) == (outcomes.DID_NOT_LEARN, None)


def test_rules_2_a_blow_up_ending_at_the_frequency_loss_is_not_recovered():
  loss = per_step((WARMUP, INIT, 5.0), (40, 5.0, 3.0), (1, 9.0, 9.0), (49, 4.0, FREQ))
  outcome, blown = classify2(loss, val_loss=FREQ)
  assert outcome == outcomes.DIVERGED and not blown.recovered


def test_rules_2_a_spike_up_to_the_loss_at_init_is_a_spike_not_a_blow_up():
  loss = per_step((WARMUP, INIT, 3.0), (20, 3.0, 2.8), (1, INIT, INIT), (69, 2.8, 2.5))
  (spike,) = outcomes.spikes(loss, WARMUP, 1.0, blow_ups=True)
  assert spike.step == WARMUP + 21 and spike.recovered
  assert classify2(loss, val_loss=2.5) == (outcomes.LEARNED, None)


def test_without_an_entropy_rate_learning_needs_the_margin_below_the_frequency_loss():
  s = summary(val_loss=FREQ - 0.1)
  assert outcomes.classify(s, [(20, 5.0), (30, FREQ - 0.1)], WARMUP, 0.1) == outcomes.LEARNED
  assert outcomes.classify(s, [(20, 5.0), (30, FREQ - 0.1)], WARMUP, 0.1, learned_margin=0.25) == \
      outcomes.DID_NOT_LEARN
