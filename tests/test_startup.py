"""Commands on a machine with libtpu (the `aot` extra) and no TPU start on the CPU quietly."""
import os
import pathlib
import subprocess
import sys

import pytest

from nplace.runtime import startup

ROOT = pathlib.Path(__file__).resolve().parent.parent
NPLACE = pathlib.Path(sys.executable).parent / "nplace"


@pytest.mark.skipif(not startup.libtpu_can_only_fail(), reason="needs libtpu, no TPU and no GPU plugin")
def test_command_without_a_platform_starts_no_tpu_runtime():
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  done = subprocess.run([NPLACE, "info", "--config", str(ROOT / "experiments/tiny.py:pre")], env=env,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0 and "params" in done.stdout, done.stderr
  assert "TPU" not in done.stderr, done.stderr  # libtpu's start-up errors


def test_a_platform_the_user_chose_is_kept(monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cuda")
  assert startup.cpu_only_without_tpu() is False


def test_a_plugin_in_the_jax_plugins_namespace_counts(tmp_path, monkeypatch):
  (tmp_path / "jax_plugins" / "some_gpu").mkdir(parents=True)
  (tmp_path / "jax_plugins" / "some_gpu" / "__init__.py").write_text("")
  monkeypatch.syspath_prepend(str(tmp_path))
  for name in [m for m in sys.modules if m.startswith("jax_plugins")]:
    monkeypatch.delitem(sys.modules, name)
  assert startup.gpu_plugin_installed()


@pytest.mark.parametrize("platforms,gpu,tpu,cpu_only", [
    ("cpu", True, True, True),        # chosen: whatever is installed
    ("cpu,cuda", False, False, False),
    ("", False, False, True),
    ("", True, False, False),         # a GPU plugin
    ("", False, True, None),          # a TPU, if libtpu is installed to use it
])
def test_the_cpu_is_split_only_where_jax_will_run_on_it(monkeypatch, platforms, gpu, tpu, cpu_only):
  import jax
  monkeypatch.setenv("JAX_PLATFORMS", platforms)
  monkeypatch.setattr(startup, "gpu_plugin_installed", lambda: gpu)
  monkeypatch.setattr(startup, "tpu_may_be_present", lambda: tpu)
  if cpu_only is None:
    cpu_only = not startup.libtpu_installed()
  before = jax.config.jax_platforms  # read from JAX_PLATFORMS when jax was imported
  jax.config.update("jax_platforms", None)
  try:
    assert startup.cpu_backend_only() is cpu_only
  finally:
    jax.config.update("jax_platforms", before)



def test_distributed_initialize_with_no_cluster_to_join_is_one_line(tmp_path):
  """`--config.distributed.initialize=True` where JAX detects no cluster (no TPU pod, SLURM or Open
  MPI) and no coordinator is given: jax.distributed.initialize's ValueError was a traceback."""
  done = subprocess.run([NPLACE, "train", "--config", str(ROOT / "experiments/tiny.py:pre"), "--workdir",
                         str(tmp_path / "run"), "--config.distributed.initialize=True"],
                        env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True, timeout=300)
  assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-3000:]
  assert done.stderr.startswith("nplace train: config error: distributed.initialize=True: "
                                "jax.distributed.initialize: coordinator_address should be defined."), done.stderr
