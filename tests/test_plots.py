"""Several runs on one axis (`plots.curves`): its labels, its legend and its reference lines."""
import warnings

import numpy as np
import pytest

from conftest import misplaced_texts
from nplace.logs import plots


def test_curves_with_reference_lines():
  fig = plots.curves({"post": ([1, 2, 3], [4.0, 3.0, 2.5]), "peri": ([1, 2, 3], [4.0, 2.0, 1.5])}, "step",
                     "loss (nats)", "loss", hlines={"frequency loss": 4.48})
  ax = fig.axes[0]
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ["post", "peri"]
  assert [t.get_text() for t in ax.texts] == ["frequency loss"]  # labelled on its line instead
  assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("step", "loss (nats)", "loss")
  drawn = {line.get_label(): line for line in ax.get_lines()}
  np.testing.assert_allclose(drawn["peri"].get_ydata(), [4.0, 2.0, 1.5])
  np.testing.assert_allclose(drawn["frequency loss"].get_ydata(), [4.48, 4.48])
  lo, hi = ax.get_ylim()
  assert lo < 1.5 and hi > 4.48


def test_a_long_y_label_wraps_inside_the_figure():
  label = "mean cosine between tokens, batch-mean token removed"  # `nplace plot similarity_centered`
  fig = plots.curves({"peri": ([0, 1], [0.5, -0.5])}, "step", label, "similarity_centered")
  assert fig.axes[0].get_ylabel() == "mean cosine between tokens,\nbatch-mean token removed"
  assert not misplaced_texts(fig)


def test_a_flat_series_is_not_stretched():
  lo, hi = plots.limits(np.array([2.0, 2.0 + 1e-7]), log=False)
  assert hi - lo >= 0.2
  lo, hi = plots.limits(np.array([1e-3, 1.1e-3]), log=True)
  assert np.log10(hi / lo) >= plots.MIN_DECADES


def test_dots_draw_each_value_and_the_mean_per_row():
  fig = plots.dots({"Pre-LN": [2.0, 2.2], "Peri-LN": [4.4, 4.5, 4.6]}, "final val loss",
                   vlines={"frequency loss 4.48": 4.48})
  ax = fig.axes[0]
  assert [t.get_text() for t in ax.get_yticklabels()] == ["Pre-LN", "Peri-LN"]  # top to bottom
  dots_, bar = ax.get_lines()[2:4]  # Peri-LN's row
  np.testing.assert_allclose(dots_.get_xdata(), [4.4, 4.5, 4.6])
  np.testing.assert_allclose(bar.get_xdata(), [4.5, 4.5])
  assert [t.get_text() for t in ax.texts] == ["frequency loss 4.48"]
  with warnings.catch_warnings():  # a row whose runs all diverged: its dots, no mean, no warning
    warnings.simplefilter("error")
    fig = plots.dots({"Pre-LN": [2.0, 2.2], "Post-LN": [np.nan, np.nan]}, "final val loss")
  assert len(fig.axes[0].get_lines()) == 3


def test_a_legend_above_wraps_into_rows_inside_the_figure():
  labels = ["Post-LN", "Post-LN, GPT-2 init", "Post-LN, centered", "Pre-LN", "Peri-LN", "Post-LN, small attention"]
  fig = plots.curves({label: ([0, 1], [1.0, 2.0]) for label in labels}, "step", "loss", "loss", legend_above=True)
  fig.canvas.draw()
  box = fig.axes[0].get_legend().get_window_extent()
  assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
  assert box.y0 >= fig.axes[0].get_window_extent().y1 - 1  # above the axes, clear of the data
  assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == labels


def test_a_log_x_axis_over_one_to_two_decades_has_no_overlapping_labels():
  """The growth figure (depth 3 to 96, log-log): matplotlib's own minor labels, 3x10^0 4x10^0
  ..., ran into each other there."""
  depths = [3, 6, 12, 24, 48, 96]
  fig = plots.curves({"pre": (depths, [0.3, 0.5, 0.7, 1.1, 2.0, 3.1])}, "depth D", "growth", "growth",
                     log_y=True, log_x=True)
  assert not misplaced_texts(fig)
  fig.canvas.draw()
  shown = [t.get_text() for t in fig.axes[0].get_xticklabels(minor=True) + fig.axes[0].get_xticklabels()
           if t.get_text()]
  assert {"10", "50"} <= set(shown), shown


def test_a_sweep_with_more_arms_than_colours_draws_no_two_alike():
  """The placements figure has 12 arms against matplotlib's 10 colours."""
  rates = np.array([1e-3, 1e-2, 1e-1])
  arm = {"mean": (rates, [3.0, 2.5, 2.8]), "seeds": (rates, [3.0, 2.5, 2.8]), "failed": (rates[:0], rates[:0]),
         "dashed": False}
  fig = plots.sweep({f"arm {i}": {**arm, "color": i} for i in range(12)}, "rate", "loss", cap=4.5)
  handles = fig.axes[0].get_legend().legend_handles
  assert len({(h.get_color(), h.get_marker()) for h in handles}) == 12
  assert not misplaced_texts(fig)
  # six legend rows make the figure taller, not the axes smaller
  two = plots.sweep({f"arm {i}": {**arm, "color": i} for i in range(2)}, "rate", "loss", cap=4.5)
  assert fig.axes[0].get_window_extent().height == pytest.approx(two.axes[0].get_window_extent().height)
  assert fig.bbox.height > two.bbox.height
