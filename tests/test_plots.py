"""Figures: labelled axes, per-probe scales, PNG size; `nplace plot` on real runs and JSON."""
import json

import matplotlib.colors
import numpy as np
import pytest
from PIL import Image

from nplace import cli, compare, plots
from nplace.probes import catalog


def png_size(fig, path):
  plots.save(fig, path)
  return Image.open(path).size


def test_profile_of_48_layers_with_theory(tmp_path):
  values = np.geomspace(1e-6, 1.0, 48)
  fig = plots.profile("grad_h", values, "block", theory=values / 3, theory_label="norm factors alone", step=20)
  (ax,) = fig.axes[:1]
  assert ax.get_xlabel() == catalog.XLABELS["block"] and ax.get_ylabel() == catalog.PROBES["grad_h"].ylabel
  assert ax.get_yscale() == "log" and ax.get_title() == "grad_h at step 20"
  lo, hi = ax.get_xlim()
  assert lo < 1 and hi > 48
  theory = [line for line in ax.get_lines() if line.get_label() == "norm factors alone"]
  assert len(theory) == 1 and matplotlib.colors.to_hex(theory[0].get_color()) == matplotlib.colors.to_hex("tab:red")
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ["measured", "norm factors alone"]
  assert png_size(fig, tmp_path / "p.png") == (plots.WIDTH, plots.HEIGHT)
  assert plots.to_rgb(fig).shape == (plots.HEIGHT, plots.WIDTH, 3)
  ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
  assert {"1e-4", "0.01", "1"} <= set(ticks) and not any("e+" in t or "$" in t for t in ticks), ticks


def test_profile_of_a_one_value_probe(tmp_path):
  fig = plots.profile("loss", [4.25], "single", step=3)
  ax = fig.axes[0]
  assert ax.get_ylabel() == "loss (nats)" and ax.get_xlabel() == "one value" and list(ax.get_xticks()) == []
  assert "4.25" in [t.get_text() for t in ax.texts]
  lo, hi = ax.get_ylim()
  assert lo < 4.25 < hi and lo > 0  # no negative axis around a lone point
  assert png_size(fig, tmp_path / "p.png") == (plots.WIDTH, plots.HEIGHT)


def test_sublayer_profile_tells_attention_from_mlp():
  fig = plots.profile("norm_backward", np.linspace(0.5, 1.0, 8), "sublayer")
  ax = fig.axes[0]
  lines = {line.get_label(): line for line in ax.get_lines()}
  assert lines["attention"].get_xdata().tolist() == [0.5, 1.5, 2.5, 3.5]
  assert lines["MLP"].get_xdata().tolist() == [1, 2, 3, 4]
  assert lines["attention"].get_marker() != lines["MLP"].get_marker()


@pytest.mark.parametrize("name,values", [("rms", 1 + 6e-8 * np.arange(4)), ("attention_entropy", 2 + 1e-7 * np.arange(4))])
def test_nearly_flat_profile_is_drawn_flat(name, values):
  ax = plots.profile(name, values, "block").axes[0]
  lo, hi = ax.get_ylim()
  if catalog.PROBES[name].log:
    assert np.log10(hi / lo) >= 1
  else:
    assert hi - lo >= 0.1 * values.mean()


def test_scale_is_per_probe_not_per_image():
  narrow = plots.profile("similarity", [0.1, 0.11], "block").axes[0]
  wide = plots.profile("similarity", [0.0, 0.9], "block").axes[0]
  assert narrow.get_yscale() == wide.get_yscale() == "linear" and narrow.get_ylim() == wide.get_ylim()
  assert plots.profile("grad_h", [1.0, 1.1], "block").axes[0].get_yscale() == "log"


def test_heatmap_layers_by_steps(tmp_path):
  labels = catalog.labels("sublayer", 6)
  fig = plots.heatmap("norm_backward", [0, 10, 20], np.full((3, 6), 0.8), "sublayer", labels)
  ax, colorbar = fig.axes
  assert ax.get_xlabel() == "step" and ax.get_ylabel() == catalog.XLABELS["sublayer"]
  assert colorbar.get_ylabel() == catalog.PROBES["norm_backward"].ylabel
  norm = ax.collections[0].norm
  assert isinstance(norm, matplotlib.colors.LogNorm) and norm.vmin <= 0.8 and np.isclose(norm.vmin * norm.vmax, 1)  # centred on 1
  assert png_size(fig, tmp_path / "h.png") == (plots.WIDTH, plots.HEIGHT)


def test_curves_with_reference_lines():
  fig = plots.curves({"post": ([1, 2, 3], [4.0, 3.0, 2.5]), "peri": ([1, 2, 3], [4.0, 2.0, 1.5])}, "step",
                     "loss (nats)", "loss", hlines={"frequency loss": 4.48})
  ax = fig.axes[0]
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ["post", "peri", "frequency loss"]
  assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("step", "loss (nats)", "loss")


@pytest.mark.parametrize("draw", [
    lambda: plots.profile("grad_h", [0.5, 0.7, 0.6], "block"),  # log: a decade beyond either end
    lambda: plots.profile("attention_entropy", [1.0, 2.5, 2.0], "block"),
    lambda: plots.heatmap("rms", [0, 50, 100], np.full((3, 4), 3.0), "block", catalog.labels("block", 4)),
])
def test_ticks_are_built_in_view_only_and_the_pixels_stay_the_same(draw):
  fig = draw()
  pixels = plots.to_rgb(fig)
  axes = [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]
  beyond = 0
  for axis in axes:
    lo, hi = sorted(axis.get_view_interval())
    major, minor = axis.get_major_locator(), axis.get_minor_locator()
    for locator in (major, minor):
      inside, everywhere = np.asarray(locator()), np.asarray(locator.locator())
      assert np.all((inside >= lo - 1e-9 * (hi - lo)) & (inside <= hi + 1e-9 * (hi - lo)))
      beyond += everywhere.size - inside.size
    axis.set_major_locator(major.locator)  # back to matplotlib's own
    axis.set_minor_locator(minor.locator)
  assert beyond > 0  # the wrapped locators did return ticks outside the view
  np.testing.assert_array_equal(plots.to_rgb(fig), pixels)


def test_plot_command_compares_a_run_and_a_probe_json(probe_run, tmp_path, capsys):
  probed = tmp_path / "init.json"
  probed.write_text(json.dumps({"similarity": [0.05, 0.2], "placement": "post", "n_layer": 2, "step": 0}))
  out = tmp_path / "cmp.png"
  assert cli.main(["plot", str(probe_run), str(probed), "--probe", "similarity", "--out", str(out)]) == 0
  assert Image.open(out).size == (plots.WIDTH, plots.HEIGHT)
  fig = compare.figure([probe_run, probed], "similarity")
  assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["run (step 2)", "init (step 0)"]
  assert cli.main(["plot", str(probe_run), "--probe", "loss", "--out", str(out)]) == 0


@pytest.mark.parametrize("argv,needle", [
    (["--out", "x.png"], "--probe"),
    (["--probe", "similarity", "--out", "x.png"], "RUN_DIR"),
    (["nowhere", "--probe", "similarity", "--out", "x.png"], "nowhere"),
    (["{run}", "--probe", "nosuch", "--out", "x.png"], "nosuch"),
    (["{run}", "--probe", "similarity", "--step", "7", "--out", "x.png"], "step 7"),
])
def test_plot_bad_input_is_one_line(probe_run, capsys, argv, needle):
  argv = [a.format(run=probe_run) for a in argv]
  assert cli.main(["plot", *argv]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and needle in err, err
