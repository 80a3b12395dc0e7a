"""The probe figures say what they show: axis labels from the catalog, the values and the
theory curve as drawn data, a probe's scale fixed by its catalog entry, the PNG size."""
import numpy as np
import pytest
from PIL import Image

from conftest import misplaced_texts
from nplace.config import ModelConfig
from nplace.logs import plots
from nplace.probes import catalog, figures, theory


def png_size(fig, path):
  plots.save(fig, path)
  return Image.open(path).size


def lines(ax) -> dict:
  return {line.get_label(): line for line in ax.get_lines()}


def test_profile_of_48_layers_with_theory(tmp_path):
  values = np.geomspace(1e-6, 1.0, 48)
  fig = figures.profile("grad_h", values, "block", theory=values / 3, theory_label="norm factors alone", step=20)
  (ax,) = fig.axes[:1]
  assert ax.get_xlabel() == catalog.XLABELS["block"] and ax.get_ylabel() == catalog.PROBES["grad_h"].ylabel
  assert ax.get_yscale() == "log" and ax.get_title() == "grad_h at step 20"
  drawn = lines(ax)
  np.testing.assert_array_equal(drawn["measured"].get_xdata(), np.arange(1, 49))
  np.testing.assert_allclose(drawn["measured"].get_ydata(), values)
  np.testing.assert_allclose(drawn["norm factors alone"].get_ydata(), values / 3)
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ["measured", "norm factors alone"]
  lo, hi = ax.get_ylim()
  assert lo <= values.min() / 3 and hi >= values.max()  # every point in view
  ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
  assert {"1e-4", "0.01", "1"} <= set(ticks) and not any("e+" in t or "$" in t for t in ticks), ticks
  assert png_size(fig, tmp_path / "p.png") == (plots.WIDTH, plots.HEIGHT)
  assert plots.to_rgb(fig).shape == (plots.HEIGHT, plots.WIDTH, 3)


def test_profile_of_a_one_value_probe(tmp_path):
  fig = figures.profile("loss", [4.25], "single", step=3)
  ax = fig.axes[0]
  assert ax.get_ylabel() == "loss (nats)" and ax.get_xlabel() == "one value" and list(ax.get_xticks()) == []
  assert "4.25" in [t.get_text() for t in ax.texts]
  lo, hi = ax.get_ylim()
  assert lo < 4.25 < hi and lo > 0  # no negative axis around a lone point
  assert png_size(fig, tmp_path / "p.png") == (plots.WIDTH, plots.HEIGHT)


def test_sublayer_profile_tells_attention_from_mlp():
  values = np.linspace(0.5, 1.0, 8)
  drawn = lines(figures.profile("norm_backward", values, "sublayer").axes[0])
  assert drawn["attention"].get_xdata().tolist() == [0.5, 1.5, 2.5, 3.5]
  assert drawn["MLP"].get_xdata().tolist() == [1, 2, 3, 4]
  np.testing.assert_allclose(drawn["attention"].get_ydata(), values[0::2])
  np.testing.assert_allclose(drawn["MLP"].get_ydata(), values[1::2])


@pytest.mark.parametrize("name,values", [("rms", 1 + 6e-8 * np.arange(4)), ("attention_entropy", 2 + 1e-7 * np.arange(4))])
def test_nearly_flat_profile_is_drawn_flat(name, values):
  ax = figures.profile(name, values, "block").axes[0]
  lo, hi = ax.get_ylim()
  if catalog.PROBES[name].log:
    assert np.log10(hi / lo) >= 1
  else:
    assert hi - lo >= 0.1 * values.mean()


def test_scale_is_per_probe_not_per_image():
  narrow = figures.profile("similarity", [0.1, 0.11], "block").axes[0]
  wide = figures.profile("similarity", [0.0, 0.9], "block").axes[0]
  assert narrow.get_yscale() == wide.get_yscale() == "linear" and narrow.get_ylim() == wide.get_ylim()
  assert figures.profile("grad_h", [1.0, 1.1], "block").axes[0].get_yscale() == "log"


def test_heatmap_layers_by_steps(tmp_path):
  labels = catalog.labels("sublayer", 6)
  values = np.full((3, 6), 0.8)
  fig = figures.heatmap("norm_backward", [0, 10, 20], values, "sublayer", labels)
  ax, colorbar = fig.axes
  assert ax.get_xlabel() == "step" and ax.get_ylabel() == catalog.XLABELS["sublayer"]
  assert colorbar.get_ylabel() == catalog.PROBES["norm_backward"].ylabel
  cells = ax.collections[0]
  assert cells.get_array().shape == (6, 3)  # layers (rows) x steps (columns)
  norm = cells.norm
  assert norm.vmin <= 0.8 and np.isclose(norm.vmin * norm.vmax, 1)  # a backward factor: centred on 1
  assert png_size(fig, tmp_path / "h.png") == (plots.WIDTH, plots.HEIGHT)


def widest(names, kind) -> str:
  """The probe of `kind` among `names` with the longest label: its images are the likeliest to
  run off."""
  return max((n for n in names if catalog.probe(n).kind == kind), key=lambda n: len(catalog.probe(n).ylabel))


def across_scale(name, n) -> np.ndarray:
  """n values over all of a probe's scale (its fixed range, nine decades on a log one, nats on
  a linear one): its widest tick labels."""
  p = catalog.probe(name)
  return np.linspace(*p.ylim, n) if p.ylim else np.geomspace(1e-5, 1e4, n) if p.log else np.linspace(1, 12, n)


LAYERS, STEPS = 48, np.linspace(0, 200_000, 21).astype(int)  # a deep model's images late in a long run
IMAGES = ([("profile", widest(catalog.PROBES, kind), None) for kind in catalog.KINDS]
          + [("profile", c.probe, c.label(ModelConfig())) for c in theory.CURVES.values()]
          + [("heatmap", widest(catalog.HEATMAPS, kind), None)
             for kind in dict.fromkeys(catalog.probe(n).kind for n in catalog.HEATMAPS)])


@pytest.mark.parametrize("image,name,theory_label", IMAGES, ids=[f"{i}-{n}" for i, n, _ in IMAGES])
def test_every_text_of_an_image_lies_inside_it_clear_of_the_others(image, name, theory_label):
  kind = catalog.probe(name).kind
  values = across_scale(name, {"sublayer": 2 * LAYERS, "single": 1}.get(kind, LAYERS))
  if image == "profile":
    fig = figures.profile(name, values, kind, values / 2 if theory_label else None, theory_label, step=STEPS[-1])
  else:
    fig = figures.heatmap(name, STEPS, np.stack([values] * STEPS.size), kind, catalog.labels(kind, values.size))
  assert not misplaced_texts(fig)
