"""Failure kinds and the collapse verdict on hand-made summaries."""
import math

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
  assert outcomes.spikes([(5, 9.0), (20, 3.0), (30, 3.5)], WARMUP, 1.0) == []  # warmup and noise


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


def test_a_stuck_run_did_not_learn_and_is_never_called_diverged():
  s, loss = run(4.40, [5.5, 4.6, 4.45, 4.3, 4.5, 4.52])  # noise about the frequency loss
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.DID_NOT_LEARN
  s, loss = run(6.2, [6.2] * 5)  # uniform predictions throughout
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.DID_NOT_LEARN
  s, loss = run(4.1, [5.0, 4.3, 4.1])  # 0.12 of the learnable nats: learned, just
  assert outcomes.classify(s, loss, WARMUP, DID_NOT_LEARN) == outcomes.LEARNED


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
