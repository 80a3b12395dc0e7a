"""The experiment configs travel with the package: a wheel holds them, and `--config
experiments/NAME.py:ARG` works from any directory (a pod worker's non-editable install)."""
import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

from nplace import config

ROOT = pathlib.Path(__file__).resolve().parent.parent
NPLACE = pathlib.Path(sys.executable).parent / "nplace"


@pytest.mark.slow
def test_wheel_holds_every_module_and_experiment(tmp_path):
  """pyproject.toml lists the packages: a subpackage left off that list would be missing here."""
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp_path, ROOT],
                 check=True, capture_output=True)
  names = set(zipfile.ZipFile(next(tmp_path.glob("nplace-*.whl"))).namelist())
  modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "nplace").rglob("*.py")}
  assert modules - names == set()
  for path in (ROOT / "experiments").glob("*.py"):
    assert f"nplace/experiments/{path.name}" in names


def test_experiment_names_resolve_outside_the_source_tree(tmp_path, monkeypatch):
  done = subprocess.run([NPLACE, "info", "--config", "experiments/tiny.py:peri", "--json"], cwd=tmp_path,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  assert json.loads(done.stdout)["placement"] == "peri"
  monkeypatch.chdir(tmp_path)
  assert config.experiment_path("experiments/gpt2.py:1.5b") == f"{config.EXPERIMENTS / 'gpt2.py'}:1.5b"
  assert config.experiment("tiny", "post").model.placement == "post"
  assert config.experiment_path("elsewhere/tiny.py") == "elsewhere/tiny.py"  # not ours: as given
