"""Reading event files back: scalars with resumes purged, probe histories per kind."""
import numpy as np
import pytest
from tensorboardX import SummaryWriter

from nplace.logs import events
from nplace.logs.writer import Writer
from nplace.probes import history


def test_read_scalars_drops_what_a_resume_rewrote(tmp_path):
  first = Writer(tmp_path, purge_step=None, active=True)
  for step in range(1, 8):
    first.scalars(step, {"train/loss": step, "perf/mfu": 0.5})
  first.close()
  resumed = Writer(tmp_path, purge_step=5, active=True)
  for step in range(5, 10):
    resumed.scalars(step, {"train/loss": 10 * step})
  resumed.close()
  got = events.read_scalars(tmp_path)
  steps, values = got["train/loss"]
  assert steps.tolist() == list(range(1, 10))
  assert values.tolist() == [1, 2, 3, 4, 50, 60, 70, 80, 90]
  assert got["perf/mfu"][0].tolist() == [1, 2, 3, 4]  # purged from 5 on for every tag


@pytest.mark.slow
def test_probe_history_of_a_real_run(probe_run):
  found = history.read(probe_run)
  scalars = events.read_scalars(probe_run)
  sim = found["similarity"]
  assert (sim.kind, sim.labels, sim.steps.tolist(), sim.values.shape) == (
      "block", ["layer_001", "layer_002"], [0, 1, 2], (3, 2))
  np.testing.assert_array_equal(sim.values[:, 1], scalars["probe/similarity/layer_002"][1])
  assert found["jacobian_frobenius"].labels == ["layer_000", "layer_001"]
  assert found["jacobian_frobenius"].kind == "source"
  norm = found["norm_in_backward"]
  assert norm.kind == "sublayer" and norm.labels == ["attn_001", "mlp_001", "attn_002", "mlp_002"]
  loss = found["loss"]
  assert loss.kind == "single" and loss.labels == [""] and loss.values.shape == (3, 1)
  assert not any(name.endswith("_theory") for name in found)
  assert np.isfinite(np.concatenate([h.values.ravel() for h in found.values()])).all()


def test_probe_history_marks_missing_steps_nan(tmp_path):
  with SummaryWriter(str(tmp_path)) as writer:
    writer.add_scalar("probe/grad_h/layer_001", 1.0, 0)
    writer.add_scalar("probe/grad_h/layer_002", 2.0, 0)
    writer.add_scalar("probe/grad_h/layer_002", 3.0, 5)
    writer.add_scalar("train/loss", 1.0, 5)
  (name,) = history.read(tmp_path)
  h = history.read(tmp_path)[name]
  assert h.steps.tolist() == [0, 5] and h.labels == ["layer_001", "layer_002"]
  np.testing.assert_array_equal(h.values, [[1.0, 2.0], [np.nan, 3.0]])
