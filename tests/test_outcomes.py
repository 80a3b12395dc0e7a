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
  assert outcomes.failures(summary()) == () and outcomes.outcome(summary()) == "ok"


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
  assert outcomes.failures(s) == ("nonfinite", "spike") and outcomes.outcome(s) == "nonfinite"


def test_a_diverged_runs_last_val_loss_is_not_judged():
  assert outcomes.failures(summary(status="diverged", val_loss=FREQ + 1)) == ("nonfinite",)
  # skipped non-finite steps, but the run went on: its final loss is judged
  assert outcomes.failures(summary(skipped_steps=2, val_loss=FREQ + 1)) == ("nonfinite", "frequency_loss")


def test_fields_without_a_value_are_no_evidence():
  assert outcomes.outcome(Summary(val_loss=2.2, frequency_loss=FREQ)) == "ok"  # no rebound after warmup
  assert outcomes.outcome(Summary(status="diverged", frequency_loss=FREQ)) == "nonfinite"  # never evaluated
