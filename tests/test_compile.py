"""`nplace compile` as a user runs it: a tiny config on a small TPU slice (libtpu compiles it
here, no TPU needed), the exit-3 one-liner when it does not fit, and bad topologies."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from nplace.commands import compile as compile_command, main
from nplace.runtime import chips

NPLACE = pathlib.Path(sys.executable).parent / "nplace"
TINY = ["--config", "experiments/tiny.py:peri", "--config.model.n_layer=2"]
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu not installed (pip install 'nplace[aot]')")


def compile_cli(*args, cwd):
  env = dict(os.environ, JAX_PLATFORMS="cpu")  # libtpu's topologies need no TPU backend
  return subprocess.run([NPLACE, "compile", *args], env=env, cwd=cwd, capture_output=True,
                        text=True, timeout=600)


@pytest.mark.slow
@needs_libtpu
def test_tiny_config_fits_a_v5e_slice(tmp_path):
  # bfloat16 with probes: the spectral-norm probe once mixed float32 tangents into a bf16 model
  done = compile_cli(*TINY, "--config.probe.every=10", "--config.model.dtype=bfloat16", "--topology",
                     "v5litepod-4", "--batch-per-chip", "2", "--json", cwd=tmp_path)
  assert done.returncode == 0, done.stderr
  report = json.loads(done.stdout)
  assert report["fits"] and report["topology"] == "v5e:2x2" and report["chips"] == 4
  assert report["dtype"] == "bfloat16"
  assert report["global_batch"] == 8 and report["mesh"] == {"data": 4, "fsdp": 1, "tensor": 1}
  assert 0 < report["bytes"]["peak"] < report["hbm_bytes"] == 16 * chips.GiB
  assert 0 < report["probe_bytes"]["peak"] < report["hbm_bytes"]
  assert 0 < report["mfu"] < 1
  # the stages on stderr (stdout is the JSON), and none of libtpu's complaints about the TPU it lacks
  assert "compiling the train step for v5litepod-4...\ncompiling the probe suite for v5litepod-4...\n" in done.stderr
  assert "could not determine TPU" not in done.stderr and "INVALID_ARGUMENT" not in done.stderr, done.stderr


@pytest.mark.slow
@needs_libtpu
def test_chunked_loss_over_a_padded_head_compiles_with_fsdp(tmp_path):
  # padding the head's table inside the loss's loop made XLA's TPU compiler fail a RET_CHECK
  done = compile_cli(*TINY, "--config.model.vocab_size=500", "--config.model.loss_chunks=8",
                     "--config.model.dtype=bfloat16", "--config.mesh.data=1", "--config.mesh.fsdp=-1",
                     "--topology", "v5e:2x2", "--json", cwd=tmp_path)
  assert done.returncode == 0, done.stderr[-2000:]
  assert json.loads(done.stdout)["mesh"]["fsdp"] == 4


@pytest.mark.slow
@needs_libtpu
def test_oversized_config_exits_3_with_one_line(tmp_path):
  # a 2M-token vocabulary at width 2048: 4.1e9 embedding weights, 16 bytes each with Adam
  done = compile_cli(*TINY, "--config.model.vocab_size=2000000", "--config.model.d_model=2048",
                     "--config.mesh.data=1", "--config.mesh.fsdp=-1", "--topology", "v5e:2x2",
                     cwd=tmp_path)
  assert done.returncode == 3, done.stderr
  lines = [line for line in done.stderr.splitlines() if line.startswith("does not fit")]
  assert len(lines) == 1 and "GiB per chip; try --batch-per-chip 4" in lines[0], done.stderr
  assert "--config.model.loss_chunks=8" in lines[0]
  assert done.stdout.startswith("loading libtpu for v5litepod-4's abstract devices (v5e:2x2, 4 chips)...\n")
  assert done.stdout.splitlines()[-1] == "compiling the train step for v5litepod-4..."  # no report


def test_help_spells_the_batch_flag_as_its_usage_line_and_the_docs_do(capsys):
  assert main.main(["compile", "--help"]) == 0
  out = capsys.readouterr().out
  assert "[--batch-per-chip N]" in out and "  --batch-per-chip " in out and "batch_per_chip" not in out


def test_unmeasured_roofline_says_it_is_a_bound_and_gives_no_mfu_where_compute_bounds_it():
  # a cell of 8 tiny runs on a trial-only mesh: no traffic, 0.03 ms; it printed "0 ms/step, MFU 100%"
  cell = {"step_s": 3.3e-5, "compute_s": 3.3e-5, "comm_s": 0.0, "mfu": 1.0, "tokens_per_sec": 2.48e8,
          "model_flops_per_chip": 6.5e9}
  line = compile_command._roofline(cell)
  assert line == ("roofline (a bound, not measured): at least 0.033 ms/step, at most 248,000,000 tokens/s; "
                  "compute-bound at the chip's peak FLOP/s (model FLOPs 6.5e+09/chip/step)")
  sharded = cell | {"step_s": 0.12, "comm_s": 0.12, "mfu": 0.42}
  assert "at least 120 ms/step" in compile_command._roofline(sharded)
  assert "traffic over ICI bounds it: MFU at most 42%" in compile_command._roofline(sharded)


@needs_libtpu
def test_a_mesh_the_slice_cannot_tile_is_refused_before_any_stage(capsys):
  """It printed "loading libtpu... compiling the train step..." and only then refused."""
  assert main.main(["compile", *TINY, "--config.mesh.tensor=3", "--topology", "v5e:2x2"]) == 2
  out, err = capsys.readouterr()
  assert out == "" and len(err.splitlines()) == 1 and "mesh" in err and "4 devices" in err, (out, err)


def test_unknown_topology_is_a_usage_error(tmp_path):
  done = compile_cli(*TINY, "--topology", "v5litepod-12", cwd=tmp_path)
  assert done.returncode == 2 and "unknown topology 'v5litepod-12'" in done.stderr


@pytest.mark.parametrize("name", ["v5e:3x3", "v5e:0x4", "v5e:64x64", "v5e:4x4x4", "v4:2x2"])
def test_a_libtpu_name_of_no_slice_is_refused_before_libtpu_sees_it(name):
  """libtpu raised on some of these and aborted the process on others (v5e:64x64)."""
  with pytest.raises(ValueError, match=f"topology '{name}': not a {name.partition(':')[0]} slice; its shapes are "):
    chips.resolve(name)


@needs_libtpu
@pytest.mark.parametrize("name", ["v5litepod-1", "v6e-1"])
def test_a_one_chip_slice_is_one_host_of_one_chip(name):
  """libtpu's default host is 2x2 chips, which a one-chip slice does not divide into."""
  assert len(chips.resolve(name).devices()) == 1


@pytest.mark.parametrize("name,want", [("v4-8", ("v4:2x2x1", 4)), ("v5p-8", ("v5p:2x2x1", 4)),
                                       ("v5litepod-16", ("v5e:4x4", 16)), ("v5e-64", ("v5e:8x8", 64)),
                                       ("v6e-4", ("v6e:2x2", 4)), ("v4:2x2x4", ("v4:2x2x4", 16))])
def test_cloud_and_libtpu_names(name, want):
  topo = chips.resolve(name)
  assert (topo.name, topo.chips) == want
  assert chips.resolve(topo.cloud_name) == topo


@needs_libtpu
def test_tensor_axis_may_split_a_torus_axis_while_another_process_holds_libtpu():
  """tensor=2 on a v5e 4x4 takes half of one physical axis (jax refuses unless allowed). Another
  process holding libtpu (a pytest worker, a second compile) once aborted this one on libtpu's
  lock file."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("ALLOW_MULTIPLE_LIBTPU_LOAD", None)
  hold = ("import sys; from nplace.runtime import chips\n"
          "chips.resolve('v5e:2x2').devices(); print('held', flush=True); sys.stdin.read()")
  holder = subprocess.Popen([sys.executable, "-c", hold], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    code = ("from nplace.runtime import chips, sharding; from nplace.config import base_config\n"
            "m = base_config().mesh; m.data, m.fsdp, m.tensor = 1, 8, 2\n"
            "print(dict(sharding.make_mesh(m, chips.resolve('v5e:4x4').devices()).shape))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  finally:
    holder.communicate("", timeout=60)
  assert done.stdout.strip().splitlines()[-1:] == ["{'data': 1, 'fsdp': 8, 'tensor': 2}"], done.stderr[-2000:]
