"""The suite end to end through `nplace probe`, and its TensorBoard summaries read back."""
import json
import pathlib

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator
from tensorboardX import SummaryWriter

from nplace import cli
from nplace.probes import plot, summaries
from conftest import tiny_config

TINY = str(pathlib.Path(__file__).resolve().parent.parent / "experiments/tiny.py")
SMALL = ["--config.model.n_layer=2", "--config.model.d_model=32", "--config.model.remat=none",
         "--config.model.norm=rmsnorm",
         "--config.data.seq_len=8", "--config.probe.batch_size=2", "--config.probe.power_iters=0",
         "--config.probe.hutchinson_probes=2"]  # power_iters=0: spectral norms (tested apart) skipped


def test_probe_command_at_init(tmp_path, capsys):
  out = tmp_path / "probe.json"
  assert cli.main(["probe", "--config", f"{TINY}:peri", *SMALL, "--json", str(out)]) == 0
  got = json.loads(out.read_text())
  assert (got["placement"], got["n_layer"], got["step"]) == ("peri", 2, 0)
  per_layer = ["grad_h", "grad_q", "grad_mlp_out", "jacobian_frobenius",
               "local_sensitivity", "similarity", "rank_ratio", "mean_abs", "var_entry", "var_data",
               "rms", "attention_tv", "attention_entropy", "rms_theory"]
  for name in per_layer:
    assert len(got[name]) == 2 and np.all(np.isfinite(got[name])), name
  for name in ("norm_in_scale", "norm_in_backward", "norm_out_scale", "norm_out_backward"):
    assert len(got[name]) == 4, name
  assert len(got["loss"]) == 1 and len(got["final_norm_backward"]) == 1
  assert np.all(np.array(got["rms"]) <= np.array(got["rms_theory"]))
  assert "jacobian_spectral" not in got


@pytest.mark.parametrize("argv,needle", [
    ([], "--json"),
    (["--json", "x.json", "--step", "3"], "--workdir"),
])
def test_probe_usage_errors(capsys, argv, needle):
  assert cli.main(["probe", "--config", TINY, *argv]) == 2
  assert needle in capsys.readouterr().err


def test_summaries_read_back(tmp_path):
  config = tiny_config(placement="post", n_layer=3)
  results = {"similarity": np.array([0.1, 0.2, 0.3]), "grad_h": np.array([1e-4, 1e-2, 1.0]),
             "grad_h_theory": np.array([1e-5, 1e-3, 1.0]), "norm_scale": np.linspace(0.5, 1, 6),
             "loss": np.array([4.0])}
  with SummaryWriter(str(tmp_path)) as writer:
    summaries.write(writer, 7, results, config)
  acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"images": 0, "histograms": 0})
  acc.Reload()
  tags = acc.Tags()
  assert {f"probe/similarity/layer_{i:03d}" for i in range(3)} <= set(tags["scalars"])
  assert "probe/norm_scale/layer_005" in tags["scalars"] and "probe/loss/layer_000" in tags["scalars"]
  assert not any("theory" in t for t in tags["scalars"])
  assert set(tags["images"]) == {f"probe/{n}" for n in ("similarity", "grad_h", "norm_scale", "loss")}
  assert set(tags["histograms"]) == set(tags["images"])
  (event,) = acc.Scalars("probe/grad_h/layer_001")
  assert event.step == 7 and np.isclose(event.value, 1e-2)
  assert set(summaries.theory_curves(config, results)) == {"grad_h", "similarity"}


def test_profile_image_draws_both_curves():
  image = plot.profile("x", [1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
  assert image.shape == (plot.HEIGHT, plot.WIDTH, 3) and image.dtype == np.uint8
  colors = {tuple(c) for c in image.reshape(-1, 3)}
  assert plot.MEASURED in colors and plot.THEORY in colors
