"""The suite end to end through `nplace probe`, and its TensorBoard summaries as the
TensorBoard server shows them (probe_run, tensorboard_api: conftest)."""
import io
import json
import pathlib
import urllib.parse

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator

from nplace.commands import main
from nplace.logs import plots
from nplace.logs.writer import Writer
from nplace.probes import catalog, history, suite, summaries
from conftest import tiny_config
import probe_reference as ref

TINY = str(pathlib.Path(__file__).resolve().parent.parent / "experiments/tiny.py")
SMALL = ["--config.model.n_layer=2", "--config.model.d_model=32", "--config.model.remat=none",
         "--config.data.seq_len=8", "--config.probe.batch_size=2", "--config.probe.power_iters=0",
         "--config.probe.hutchinson_probes=2"]  # power_iters=0: spectral norms (tested apart) skipped


@pytest.mark.slow
def test_probe_command_at_init(tmp_path, capsys):
  out = tmp_path / "probe.json"
  assert main.main(["probe", "--config", f"{TINY}:peri", *SMALL, "--json", str(out)]) == 0
  got = json.loads(out.read_text())
  assert (got["placement"], got["n_layer"], got["step"]) == ("peri", 2, 0)
  per_layer = ["grad_h", "grad_q", "grad_mlp_out", "jacobian_frobenius",
               "local_sensitivity", "similarity", "similarity_centered", "rank_ratio", "mean_abs", "var_entry", "var_data",
               "rms", "max_abs", "attention_tv", "attention_entropy", "rms_theory"]
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
  assert main.main(["probe", "--config", TINY, *argv]) == 2
  assert needle in capsys.readouterr().err


def test_probe_workdir_without_checkpoints_is_one_line(tmp_path, capsys):
  assert main.main(["probe", "--config", TINY, "--workdir", str(tmp_path), "--json", "x.json"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and str(tmp_path) in err and "checkpoints" in err, err
  assert list(tmp_path.iterdir()) == []  # nothing created there


def expected_tags(history) -> dict:
  """Plugin -> the tags the probe run must show, from the probes its events hold."""
  tags = {"scalars": set(), "images": set(), "histograms": set()}
  for name, h in history.items():
    tags["scalars"] |= {summaries.tag(name, label) for label in h.labels}
    if h.kind != "single":
      tags["images"].add(f"probe_profile/{name}")
      tags["histograms"].add(f"probe_hist/{name}")
    if name in catalog.HEATMAPS:
      tags["images"].add(f"probe_heatmap/{name}")
  return tags


@pytest.mark.slow
def test_tensorboard_server_shows_every_probe_tag(probe_run, tensorboard_api):
  found = history.read(probe_run)
  want = expected_tags(found)
  assert {"probe/similarity/layer_002", "probe/jacobian_frobenius/layer_000", "probe/norm_in_backward/attn_001",
          "probe/norm_out_scale/mlp_002", "probe/loss", "probe/final_norm_backward"} <= want["scalars"]
  assert {"probe_heatmap/similarity", "probe_heatmap/norm_out_backward"} <= want["images"]
  assert "probe_profile/loss" not in want["images"]
  for plugin, tags in want.items():  # exactly these: no theory scalars, no clashing tags
    served = {t for t in tensorboard_api(f"/data/plugin/{plugin}/tags")["."] if t.startswith("probe")}
    assert served == tags, (plugin, sorted(served ^ tags))


@pytest.mark.slow
def test_tensorboard_serves_a_profile_png(tensorboard_api):
  (sample,) = [e for e in tensorboard_api("/data/plugin/images/images?run=.&tag=probe_profile/similarity&sample=0")
               if e["step"] == 2]
  png = tensorboard_api(f"/data/plugin/images/individualImage?{sample['query']}")
  assert Image.open(io.BytesIO(png)).size == (plots.WIDTH, plots.HEIGHT)


@pytest.mark.slow
def test_custom_scalars_one_chart_per_probe_with_all_its_layers(tensorboard_api):
  layout = tensorboard_api("/data/plugin/custom_scalars/layout")
  charts = {c["title"]: c["multiline"]["tag"] for cat in layout["category"] for c in cat["chart"]}
  assert {"similarity", "norm_in_backward", "jacobian_frobenius", "loss"} <= set(charts)
  (pattern,) = charts["norm_in_backward"]
  served = tensorboard_api(f"/data/plugin/custom_scalars/scalars?run=.&tag={urllib.parse.quote(pattern)}")
  assert set(served["tag_to_events"]) == {f"probe/norm_in_backward/{b}_{l:03d}" for b in ("attn", "mlp") for l in (1, 2)}


def test_resumed_run_heatmap_keeps_the_history(tmp_path):
  config = tiny_config(placement="post", n_layer=3)
  config.probe.every, config.probe.images = 1, "none"
  result = lambda step: {"similarity": np.full(3, 0.1 * step), "loss": np.array([4.0 - step])}
  writer = Writer(tmp_path, purge_step=None, active=True)
  first = summaries.ProbeWriter(writer, config)
  for step in range(4):  # a run killed after probing step 3 but checkpointed at 2
    first.write(step, result(step))
  writer.close()
  writer = Writer(tmp_path, purge_step=3, active=True)
  resumed = summaries.ProbeWriter(writer, config)
  resumed.write(3, result(3))
  resumed.write(4, result(4))
  writer.close()
  steps, rows = resumed.history["similarity"]
  assert steps == [0, 1, 2, 3, 4] and np.allclose([r[0] for r in rows], [0.0, 0.1, 0.2, 0.3, 0.4])
  assert history.read(tmp_path)["similarity"].steps.tolist() == [0, 1, 2, 3, 4]


def test_early_schedule_probes_densely_up_to_its_last_step_and_draws_no_images_there():
  probe = tiny_config().probe
  probe.update(every=250, early_every=25, early_until=500)
  assert [s for s in range(0, 1001, 5) if summaries.probed(probe, s)] == [*range(0, 501, 25), 750, 1000]
  assert not any(summaries.probed(probe, s) for s in (510, 525, 760))
  probe.every = 0  # probes off: the early schedule too
  assert not any(summaries.probed(probe, s) for s in (0, 25, 250))
  probe.every = 250
  assert [s for s in range(0, 501, 25) if summaries.draws_images(probe, s, 1000)] == [0, 250, 500]
  assert summaries.draws_images(probe, 25, 25)  # the last step draws, early or not


@pytest.mark.slow
def test_log_image_schedule_draws_at_doublings_and_the_last_step_and_keeps_every_heatmap_row(tmp_path):
  config = tiny_config(placement="post", n_layer=3)
  config.probe.every, config.train.steps = 10, 70
  assert [s for s in range(0, 71, 10) if summaries.draws_images(config.probe, s, 70)] == [0, 10, 20, 40, 70]
  config.probe.every, config.train.steps = 1, 5
  writer = Writer(tmp_path, purge_step=None, active=True)
  probe_writer = summaries.ProbeWriter(writer, config)
  for step in range(6):
    probe_writer.write(step, {"similarity": np.full(3, 0.1 * step), "loss": np.array([4.0 - step])})
  writer.close()
  acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"images": 0})
  acc.Reload()
  assert [e.step for e in acc.Images("probe_heatmap/similarity")] == [0, 1, 2, 4, 5]
  assert [e.step for e in acc.Images("probe_profile/similarity")] == [0, 1, 2, 4, 5]
  assert probe_writer.history["similarity"][0] == [0, 1, 2, 3, 4, 5]
  for schedule, steps in (("all", [0, 1, 2, 3]), ("none", [])):
    config.probe.images, run = schedule, tmp_path / schedule
    writer = Writer(run, purge_step=None, active=True)
    probe_writer = summaries.ProbeWriter(writer, config)
    for step in range(4):
      probe_writer.write(step, {"similarity": np.full(3, 0.1 * step)})
    writer.close()
    acc = event_accumulator.EventAccumulator(str(run), size_guidance={"images": 0})
    acc.Reload()
    drawn = acc.Images("probe_profile/similarity") if acc.Tags()["images"] else []
    assert [e.step for e in drawn] == steps


def test_theory_curves_are_the_placements_own():
  """Each placement's declared curves only: Post-LN's Gram-recursion similarity at step 0 (it
  assumes a norm: not for DyT), Peri-LN's rms bound (+ rms(b) with LayerNorm's bias)."""
  results = {"similarity": np.zeros(3), "rms": np.ones(3), "rms_theory": np.ones(3)}
  assert set(summaries.theory_curves(tiny_config(placement="post", n_layer=3), results, 0)) == {"similarity"}
  assert summaries.theory_curves(tiny_config(placement="post", n_layer=3), results, 5) == {}
  assert summaries.theory_curves(tiny_config(placement="post", n_layer=3, norm="dyt"), results, 0) == {}
  peri = summaries.theory_curves(tiny_config(placement="peri", n_layer=3), results, 5)
  assert set(peri) == {"rms"} and peri["rms"][1].endswith("+ rms(b)")
  rms_norm = summaries.theory_curves(tiny_config(placement="peri", n_layer=3, norm="rmsnorm"), results, 5)
  assert "rms(b)" not in rms_norm["rms"][1]


@pytest.mark.slow
def test_the_probes_read_the_same_values_whatever_the_levers():
  """The suite runs the model as configured (its attention always the einsums): with a remat
  policy, fused q/k/v, an unrolled layer scan, the fused attention and the train loss's levers
  set, every probe, the spectral norms included, reads what it reads on the plain model (Peri-LN
  with the embedding norm, random parameters, the same key)."""
  plain = tiny_config(placement="peri", embed_norm=True)
  plain.probe.update(power_iters=2, hutchinson_probes=1, batch_size=2)
  levered = plain.copy_and_resolve_references()
  levered.model.update(remat="dots", qkv_projection="fused", scan_unroll=2, attention_impl="dot_product",
                       loss_chunks=3, head_loss="one_hot")
  params = ref.random_params(plain.model, 0, std=0.2)
  batch = jnp.asarray(np.random.default_rng(1).integers(0, plain.model.vocab_size, (2, 13)), jnp.int32)
  want, got = (suite.suite(c, params, batch, jax.random.key(3)) for c in (plain, levered))
  assert set(got) == set(want) and "jacobian_spectral" in want
  for name in want:
    np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
