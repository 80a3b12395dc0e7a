"""benchmarks/step_vs_torch.py and cell_overhead.py as a user runs them: bad arguments, or no
torch, are one line and exit code 2 before any worker starts or anything trains (the benchmarks
themselves are not tests)."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "step_vs_torch.py"
WITHOUT_TORCH = f"""
import importlib.util, runpy, sys
found = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "torch" else found(name, *a)
sys.argv = [{str(SCRIPT)!r}, "--workloads", "tiny", "--placements", "pre"]
sys.path.insert(0, {str(SCRIPT.parent)!r})
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(*command):
  return subprocess.run(command, capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))


@pytest.mark.parametrize("args,named", [
    (["--workloads", "tiny,huge"], "workload 'huge'"),
    (["--placements", "pre,nope"], "'nope'"),
    (["--remat", "nope"], "model.remat='nope'"),
])
@pytest.mark.slow
def test_a_bad_argument_is_one_line_naming_it(args, named):
  done = _run(sys.executable, str(SCRIPT), *args)
  assert done.returncode == 2 and done.stdout == "", done
  assert done.stderr.strip().splitlines()[-1].startswith("step_vs_torch.py: error:") and named in done.stderr


def test_without_torch_it_says_how_to_install_it():
  done = _run(sys.executable, "-c", WITHOUT_TORCH)
  assert done.returncode == 2 and done.stdout == "", done
  assert done.stderr.count("\n") == 1 and "pip install torch" in done.stderr, done.stderr


@pytest.mark.parametrize("args,named", [
    (["--config", "experiments/nope.py:cpu"], "nope.py: no such file"),
    (["--config", "experiments/stability.py:cpu", "--trials", "0"], "--trials"),
])
@pytest.mark.slow
def test_cell_overhead_a_bad_argument_is_one_line_naming_it(args, named):
  done = _run(sys.executable, str(SCRIPT.parent / "cell_overhead.py"), *args)
  assert done.returncode == 2 and done.stdout == "", done
  assert done.stderr.count("\n") == 1 and done.stderr.startswith("cell_overhead.py: ") and named in done.stderr, done
