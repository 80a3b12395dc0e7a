"""Mesh sizing, the logical-axis layout of parameters and activations."""
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh

from nplace.config import base_config
from nplace.errors import ConfigError
from nplace.model import layers
from nplace.runtime import sharding
from nplace.train import state as train_state
from conftest import tiny_config, xla_flags

TESTS = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("sizes,devices,want", [
    ((-1, 1, 1), 8, (8, 1, 1)), ((2, -1, 1), 8, (2, 4, 1)), ((2, 2, -1), 8, (2, 2, 2)),
    ((1, 1, 1), 1, (1, 1, 1)), ((-1, 2, 1), 2, (1, 2, 1))])
def test_mesh_shape_fills_minus_one(sizes, devices, want):
  m = base_config().mesh
  m.data, m.fsdp, m.tensor = sizes
  assert sharding.mesh_shape(m, devices) == want


@pytest.mark.parametrize("sizes,devices", [((3, 1, 1), 8), ((2, 2, 1), 8), ((-1, 3, 1), 8)])
def test_mesh_shape_mismatch_is_a_config_error(sizes, devices):
  m = base_config().mesh
  m.data, m.fsdp, m.tensor = sizes
  with pytest.raises(ConfigError, match="mesh"):
    sharding.mesh_shape(m, devices)


def test_param_layout_follows_rules():
  c = tiny_config()
  mesh = sharding.make_mesh(c.mesh)
  specs = train_state.shardings(c, mesh)
  assert tuple(specs["params"]["blocks"]["attn"]["q"]["kernel"].spec) == (None, "fsdp", "tensor", None)
  assert tuple(specs["params"]["blocks"]["mlp"]["fc_out"]["kernel"].spec) == (None, "tensor", "fsdp")
  assert tuple(specs["step"].spec) == ()


def test_uneven_split_names_the_array():
  c = tiny_config()  # vocab 61
  c.mesh.rules = c.mesh.rules + (("vocab", "tensor"),)
  mesh = AbstractMesh((1, 1, 2), sharding.AXES)  # sizes only: the check needs no devices
  with pytest.raises(ConfigError, match=r": \['params'\]\['wte'\]\['embedding'\] has a dimension of 61"):
    train_state.shardings(c, mesh)  # the parameter, not an AdamW moment of its shape (named first)


def _temp_bytes(devices: int) -> int:
  env = dict(os.environ, XLA_FLAGS=xla_flags(f"--xla_force_host_platform_device_count={devices}"),
             PYTHONPATH=str(TESTS), JAX_PLATFORMS="cpu")
  done = subprocess.run([sys.executable, TESTS / "gather_bytes.py"], env=env, capture_output=True,
                        text=True, check=True)
  return int(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_per_device_memory_does_not_grow_with_the_device_count():
  """The logits-gather regression: without activation constraints the fsdp step gathers the
  whole batch (the tiny preset took 93 MB of temporaries per device on 2 devices, 355 MB on 8)."""
  two, eight = _temp_bytes(2), _temp_bytes(8)
  assert eight <= 1.1 * two, (two, eight)


def test_activation_constraints_are_no_ops_without_a_layout():
  x = jnp.ones((4, 3, 8))
  assert sharding.constrain(x, layers.RESIDUAL) is x


def test_uneven_activation_dimension_stays_whole():
  """The probe suite's few sequences on many chips: the batch dimension is left unsplit."""
  c = tiny_config()
  c.mesh.data, c.mesh.fsdp = 1, 2
  mesh = AbstractMesh((1, 2, 1), sharding.AXES)

  def spec_of(batch):
    with sharding.activation_layout(mesh, c.mesh):
      jaxpr = jax.make_jaxpr(lambda x: sharding.constrain(x, layers.RESIDUAL))(jnp.ones((batch, 2, 8)))
    return tuple(jaxpr.eqns[0].params["sharding"].spec)

  assert spec_of(4)[0] == ("data", "fsdp") and spec_of(3)[0] is None


@pytest.mark.parametrize("mesh_sizes,shape,lead", [
    ((2, 1, 1), (4, 1, 8, 8), "data"),             # one sequence: the stack takes the devices
    ((2, 1, 1), (4, 2, 8, 8), None),               # the sequences took them
    ((2, 1, 1), (3, 1, 8, 8), None),               # 3 estimates do not split in two
    ((2, 2, 1), (4, 2, 8, 8), ("data", "fsdp")),   # 2 sequences do not split in four
    ((2, 2, 2), (4, 1, 8, 8), ("data", "fsdp")),   # 4 estimates fill two axes of three
])
def test_a_stack_of_estimates_spreads_over_the_devices_its_sequences_leave(mesh_sizes, shape, lead):
  c = tiny_config()
  c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh_sizes
  with sharding.activation_layout(AbstractMesh(mesh_sizes, sharding.AXES), c.mesh):
    jaxpr = jax.make_jaxpr(lambda x: sharding.spread(x, layers.RESIDUAL))(jnp.ones(shape))
  assert jaxpr.eqns[0].params["sharding"].spec[0] == lead


@pytest.mark.parametrize("held,want", [
    ({0: {0, 1}, 1: {2, 3}}, [(0, 2), (1, 2)]),              # the batch split over the processes
    ({0: {0}, 1: {0}}, [(0, 1), (0, 1)]),                    # tensor across them: the same rows on both
    ({0: {0}, 1: {0}, 2: {1}, 3: {1}}, [(0, 2)] * 2 + [(1, 2)] * 2),  # pairs of processes share rows
    ({0: {0, 2}, 1: {1, 3}}, [(0, 2), (1, 2)]),              # a TPU order: each process's blocks apart
    ({1: {2, 3}, 0: {0, 1}}, [(0, 2), (1, 2)]),
])
def test_each_process_loads_the_rows_its_devices_hold(held, want):
  assert [sharding.share_of(held, p, {}) for p in sorted(held)] == want


@pytest.mark.parametrize("held", [{0: {0, 1}, 1: {1, 2}}, {0: {0}, 1: {1, 2}}])
def test_processes_holding_overlapping_or_unequal_rows_are_a_config_error(held):
  with pytest.raises(ConfigError, match="overlapping or unequal"):
    sharding.share_of(held, 0, {})
