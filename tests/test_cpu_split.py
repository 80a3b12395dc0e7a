"""nplace/runtime/cpu_split.py: how many devices a CPU host is split into, and a run split so."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from conftest import xla_flags

from nplace.runtime import cpu_split
from nplace.config import experiment
from test_train import run, scalars

NPLACE = pathlib.Path(sys.executable).parent / "nplace"


def config_with(**train):
  config = experiment("tiny", "pre")
  config.train.update(**train)
  return config


@pytest.mark.parametrize("cores,train,mesh,expected", [
    (2, {"batch_size": 16}, {}, 2),
    (8, {"batch_size": 16}, {}, 8),
    (4, {"batch_size": 6}, {}, 3),                      # the most cores the rows split over
    (4, {"batch_size": 3}, {}, 3),
    (2, {"batch_size": 3}, {}, 1),
    (4, {"batch_size": 8, "grad_accum": 4}, {}, 2),     # a microbatch's 2 rows
    (4, {"batch_size": 16}, {"tensor": 2}, 4),          # tensor halves the batch's ways: 2 | 16
    (3, {"batch_size": 16}, {"tensor": 2}, 2),          # 3 devices do not tile tensor=2
    (2, {"batch_size": 16}, {"data": 1}, 1),            # a fixed mesh of one device
    (8, {"batch_size": 16, "cpu_devices": 3}, {}, 3),   # chosen, not derived
])
def test_device_count(cores, train, mesh, expected):
  config = config_with(**train)
  config.mesh.update(**mesh)
  assert cpu_split.device_count(config, cores) == expected


def test_a_multi_process_run_keeps_one_cpu_device_per_process():
  config = config_with(batch_size=16)
  config.distributed.initialize = True
  assert cpu_split.device_count(config, 8) == 1


SPLIT_HOST = """
import json, types, jax, numpy as np
from conftest import tiny_config
from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.probes import inputs, suite
from nplace.runtime import cpu_split, sharding
from nplace.train import hooks
from nplace.train.cell import Cell, Run
config = tiny_config()
mesh = sharding.make_mesh(config.mesh)
params = decoder.init(ModelConfig.of(config.model), jax.random.key(0))

def probes(mesh):
  p, b = jax.device_put((params, inputs.probe_batch(config, held_out=False)), sharding.replicated(mesh))
  hlo = suite.lower(config, p, b, inputs.probe_key(config), mesh).as_text()
  return jax.device_get(suite.suite(config, p, b, inputs.probe_key(config), mesh)), hlo

(spread, hlo), (one, _) = probes(mesh), probes(sharding.make_mesh(config.mesh, jax.devices()[:1]))

# the trainer's probe hook, with suite.suite watched: which devices does it lay the suite over?
laid_over, traced = [], suite.suite

def watched(config, params, batch, key, mesh=None):
  laid_over.append(None if mesh is None else mesh.devices.size)
  return traced(config, params, batch, key, mesh)

suite.suite = watched
loop, config.probe.every = hooks.Hooks(), 1
run = Run("run", config, None, writer=types.SimpleNamespace(summary=False),
          summary=types.SimpleNamespace(status="completed"))
hooks.probe_hook(loop, Cell([run], jax.devices()), types.SimpleNamespace(message=print, who=lambda name, stacked: ""))
loop.start({"params": jax.device_put(params, sharding.replicated(mesh))})
print(json.dumps({"options": cpu_split.compiler_options(mesh),
                  # the power iteration's [layers, 1 sequence, T, d] vectors, split by layer
                  "layers_split": '[{"data"}, {}, {}, {}]' in hlo,
                  "probe_error": max(float(np.max(np.abs(spread[k] - one[k]) / (np.abs(one[k]) + 1e-6)))
                                     for k in one),
                  "hook_devices": laid_over}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("devices,split", [(1, False), (max(cpu_split.cores(), 2), True)])
def test_a_split_host_runs_ops_on_one_thread_and_the_probes_over_its_devices(devices, split):
  """The probe suite's stacks of estimates spread over the devices (sharding.spread) give
  one device's results, and the trainer's probe hook lays the suite over all of them."""
  flag = f"--{cpu_split.USER_FLAG}={devices}"
  out = subprocess.run([sys.executable, "-c", SPLIT_HOST], check=True, capture_output=True, text=True,
                       env=dict(os.environ, XLA_FLAGS=xla_flags(flag), JAX_PLATFORMS="cpu",
                                PYTHONPATH=os.path.dirname(__file__))).stdout
  got = json.loads(out.splitlines()[-1])
  assert got["options"] == ({"xla_cpu_multi_thread_eigen": False} if split else {})
  assert got["layers_split"] == split
  assert got["probe_error"] < 1e-4
  assert got["hook_devices"] == [devices]  # the hook's suite runs over the train mesh


@pytest.mark.slow
@pytest.mark.skipif(cpu_split.cores() < 2, reason="needs two cores")
def test_a_run_split_per_core_trains_like_one_device(tmp_path, env):  # noqa: F811
  split = run(tmp_path / "split", "--config.train.steps=3", env=env)
  one = run(tmp_path / "one", "--config.train.steps=3", "--config.train.cpu_devices=1", env=env)
  n = cpu_split.device_count(config_with(batch_size=8), cpu_split.cores())  # test_train's SMALL batch
  assert f"devices: {n} x cpu" in split and "devices: 1 x cpu" in one, (split, one)
  split, one = scalars(tmp_path / "split", "train/loss"), scalars(tmp_path / "one", "train/loss")
  assert sorted(split) == [1, 2, 3]
  np.testing.assert_allclose([split[s] for s in (1, 2, 3)], [one[s] for s in (1, 2, 3)], rtol=1e-5)


@pytest.mark.slow
def test_devices_the_batch_does_not_split_over_are_a_config_error(tmp_path, env):  # noqa: F811
  out = run(tmp_path / "run", "--config.train.cpu_devices=3", env=env, expect=2)
  assert out.count("\n") == 1 and "train.batch_size" in out and "3 devices" in out, out


BATCH_SWEEP = '''
from nplace.config import experiment
from nplace.protocol import Grid


def get_config(arg=None):
  c = experiment("tiny", "pre")
  c.model.update(n_layer=2, d_model=32, remat="none")
  c.data.update(seq_len=16, synthetic_tokens=65536)
  c.train.update(steps=2, log_every=1, eval_every=2, eval_batches=2, peak_flops=1e11)
  c.eval.rouge = False
  return c


def get_sweep(arg=None):
  return [{"train.batch_size": 8}, {"train.batch_size": 3}]


GRID = Grid(config=get_config, sweep=get_sweep)
'''


@pytest.mark.slow
@pytest.mark.skipif(cpu_split.cores() < 2, reason="needs two cores")
def test_a_sweeps_later_trial_takes_the_devices_its_batch_splits_over(tmp_path, env):  # noqa: F811
  """The first trial split the host; the second's 3 rows do not split over 2 devices, so it
  runs on one (before: a ConfigError on train.batch_size, the trial lost)."""
  (tmp_path / "grid.py").write_text(BATCH_SWEEP)
  command = [NPLACE, "sweep", "--config", str(tmp_path / "grid.py"), "--workdir", str(tmp_path / "runs")]
  out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stdout + out.stderr
  assert "devices: 2 x cpu" in out.stdout and "devices: 1 x cpu" in out.stdout, out.stdout
  trials = {n: tmp_path / "runs" / f"batch_size={n}" for n in (8, 3)}
  assert [json.loads((d / "summary.json").read_text())["status"] for d in trials.values()] == ["completed"] * 2
  # perf/mfu counts the peak of the devices the trial ran on: twice as many for the first
  mfu_per_tps = {n: scalars(d, "perf/mfu")[2] / scalars(d, "perf/tokens_per_sec")[2] for n, d in trials.items()}
  np.testing.assert_allclose(mfu_per_tps[3] / mfu_per_tps[8], 2, rtol=1e-4)
