"""The device mesh and how parameters and batches are laid out on it.

Parameters carry logical axis names (see nplace/layers.py); `config.mesh.rules`
maps them to the mesh axes `data`, `fsdp`, `tensor`.
"""
import math

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nplace.config import ConfigError

AXES = ("data", "fsdp", "tensor")


def mesh_shape(mesh_config, n_devices: int) -> tuple[int, ...]:
  """Sizes of (data, fsdp, tensor), -1 filled; a ConfigError if they don't tile the devices."""
  sizes = [mesh_config[axis] for axis in AXES]
  fixed = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if n_devices % fixed:
      raise ConfigError("mesh", dict(zip(AXES, sizes)), f"fixed axes ({fixed}) do not divide the {n_devices} devices")
    sizes[sizes.index(-1)] = n_devices // fixed
  if math.prod(sizes) != n_devices:
    raise ConfigError("mesh", dict(zip(AXES, sizes)), f"product {math.prod(sizes)} != {n_devices} devices")
  return tuple(sizes)


def make_mesh(mesh_config, devices=None) -> Mesh:
  devices = jax.devices() if devices is None else devices
  shape = mesh_shape(mesh_config, len(devices))
  return Mesh(np.asarray(devices).reshape(shape), AXES)


def rules(mesh_config) -> tuple:
  return tuple((logical, tuple(m) if isinstance(m, (list, tuple)) else m) for logical, m in mesh_config.rules)


def logical_to_shardings(abstract_boxed, mesh: Mesh, mesh_config):
  """NamedShardings for a pytree whose leaves are `nn.LogicallyPartitioned` (or plain: replicated)."""
  specs = nn.get_partition_spec(abstract_boxed)
  shardings = nn.logical_to_mesh_sharding(specs, mesh, rules(mesh_config))
  check_divisible(nn.unbox(abstract_boxed), shardings)
  return shardings


def check_divisible(abstract, shardings) -> None:
  """Every sharded dimension must split evenly over its mesh axes; names the offending array."""
  flat, _ = jax.tree_util.tree_flatten_with_path(abstract)
  for (path, leaf), sharding in zip(flat, jax.tree.leaves(shardings)):
    for dim, axes in zip(leaf.shape, sharding.spec):
      axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
      parts = math.prod(sharding.mesh.shape[a] for a in axes)
      if dim % parts:
        name = jax.tree_util.keystr(path)
        raise ConfigError("mesh", dict(sharding.mesh.shape),
                          f"{name} has a dimension of {dim}, not divisible over {axes} ({parts} devices)")


def batch_sharding(mesh: Mesh, mesh_config) -> NamedSharding:
  """Batch rows split over the `batch` rule's mesh axes, sequence replicated."""
  batch_axes = dict(rules(mesh_config)).get("batch")
  return NamedSharding(mesh, PartitionSpec(batch_axes, None))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())
