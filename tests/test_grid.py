"""Trial names and overrides of experiment grids (the sweep itself: test_sweep.py)."""
import pytest

from nplace.studies import grid
from nplace.config import base_config


def test_trial_names_are_readable_stable_and_unambiguous():
  assert grid.trial_name({"model.placement": "peri", "model.dt": 0.1, "optim.weight_decay": 0.0, "seed": 3}) \
      == "placement=peri,dt=0.1,weight_decay=0,seed=3"
  # Two keys ending alike keep their full names; a path's slashes and colons become dashes.
  assert grid.trial_name({"model.init_std": 0.02, "optim.init_std": 1e-5}) \
      == "model.init_std=0.02,optim.init_std=1e-05"
  assert grid.trial_name({"data.source": "text:/data/a b.txt"}) == "source=text--data-a-b.txt"
  assert grid.trial_name({}) == "base"


def test_apply_copies_and_names_bad_keys_and_types():
  base = base_config()
  config = grid.apply(base, {"model.dt": 0.1, "seed": 2}, "trial t")
  assert (config.model.dt, config.seed, base.model.dt, base.seed) == (0.1, 2, 1.0, 0)
  with pytest.raises(grid.GridError, match="trial t: no such config key 'model.dt.x'"):
    grid.apply(base, {"model.dt.x": 1}, "trial t")
  with pytest.raises(grid.GridError, match="trial t: model.n_layer='four'"):
    grid.apply(base, {"model.n_layer": "four"}, "trial t")


def test_a_grid_file_is_found_installed_and_its_error_is_one_line_naming_the_line(tmp_path, monkeypatch):
  file = tmp_path / "mine.py"
  file.write_text("x = 1\nraise RuntimeError('boom')\n")
  with pytest.raises(grid.GridError, match=f"^{file}, line 2: RuntimeError: boom$"):
    grid.load_grid(file)
  monkeypatch.chdir(tmp_path)  # no experiments/ here: the installed grid files, as --config finds them
  assert grid.load_sweep("experiments/collapse.py:cpu")


def test_a_protocol_claiming_a_metric_its_kind_does_not_measure_is_one_line_where_it_is_declared(tmp_path):
  """It was a ValueError traceback from `nplace report`, after the page had been built for a minute."""
  file = tmp_path / "mine.py"
  file.write_text(
      "from nplace.config import base_config\n"
      "from nplace.protocol import STABILITY_SWEEP, Claim, Grid, Protocol\n"
      "PROTOCOL = Protocol('mine', 1, STABILITY_SWEEP, 'a sweep', seeds=3, bootstrap_resamples=100,\n"
      "                    bootstrap_seed=0, interval=0.95, thresholds=(),\n"
      "                    claims=(Claim('flatter', 'a is flatter', 'final_loss', better='a', worse='b'),))\n"
      "GRID = Grid(config=lambda arg='': base_config(), sweep=lambda arg='': [{}], judged_by=lambda arg: (PROTOCOL,))\n")
  with pytest.raises(grid.GridError, match=f"^{file}, line 3: ValueError: protocol mine v1: claim 'flatter' has metric "
                     "'final_loss', which kind 'stability sweep' does not measure \\(lr_sensitivity, "):
    grid.load_grid(file)
