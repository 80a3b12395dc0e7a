"""The drawing process: plots drawn to pixels in a child at the lowest priority."""
import os

import numpy as np
import pytest

from nplace.logs import drawing, plots
from nplace.probes import figures


@pytest.mark.slow
def test_pixels_match_drawing_here_and_the_child_runs_at_nice_19():
  drawer = drawing.Drawer()
  args = "rms", np.exp(np.linspace(0, 1, 5)), "block"
  try:
    pixels = drawer.rgb(figures.profile, *args)
    assert os.getpriority(os.PRIO_PROCESS, drawer._child.pid) == 19
  finally:
    drawer.close()
  assert drawer._child is None
  assert pixels.dtype == np.uint8 and np.array_equal(pixels, plots.to_rgb(figures.profile(*args)))


def test_an_error_in_the_child_is_raised_here_with_its_traceback():
  drawer = drawing.Drawer()
  try:
    with pytest.raises(RuntimeError, match=r"drawing profile failed in the drawing process:(.|\n)*ValueError"):
      drawer.rgb(figures.profile, "rms", "not numbers", "block")
    assert drawer.rgb(figures.profile, "rms", np.ones(3), "block").shape == (plots.HEIGHT, plots.WIDTH, 3)
  finally:
    drawer.close()
