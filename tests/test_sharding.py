"""Mesh sizing and the logical-axis layout of parameters."""
import pytest
from jax.sharding import AbstractMesh

from nplace import sharding, train_state
from nplace.config import ConfigError, mesh_config
from conftest import tiny_config


@pytest.mark.parametrize("sizes,devices,want", [
    ((-1, 1, 1), 8, (8, 1, 1)), ((2, -1, 1), 8, (2, 4, 1)), ((2, 2, -1), 8, (2, 2, 2)),
    ((1, 1, 1), 1, (1, 1, 1)), ((-1, 2, 1), 2, (1, 2, 1))])
def test_mesh_shape_fills_minus_one(sizes, devices, want):
  m = mesh_config()
  m.data, m.fsdp, m.tensor = sizes
  assert sharding.mesh_shape(m, devices) == want


@pytest.mark.parametrize("sizes,devices", [((3, 1, 1), 8), ((2, 2, 1), 8), ((-1, 3, 1), 8)])
def test_mesh_shape_mismatch_is_a_config_error(sizes, devices):
  m = mesh_config()
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
  with pytest.raises(ConfigError, match=r"\['wte'\]\['embedding'\] has a dimension of 61"):
    train_state.shardings(c, mesh)
