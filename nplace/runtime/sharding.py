"""The device mesh and how parameters, batches and activations are laid out on it.

Parameters and activations carry logical axis names (see nplace/model/layers.py);
`config.mesh.rules` maps them to the mesh axes `data`, `fsdp`, `tensor`. A cell of runs trained
together (nplace/train/steps.py) adds a leading `trial` axis: each run's arrays stacked on it,
laid over that mesh axis, which no collective crosses.
"""
import contextlib
import contextvars
import math

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nplace.config import MESH_AXES as AXES  # the mesh's axes, as config.mesh names them
from nplace.errors import ConfigError

TRIAL = "trial"


def mesh_shape(mesh_config, n_devices: int) -> tuple[int, ...]:
  """Sizes of (data, fsdp, tensor), -1 filled; a ConfigError if they don't tile the devices."""
  sizes = [mesh_config[axis] for axis in AXES]
  fixed = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if n_devices % fixed:
      raise ConfigError("mesh", dict(zip(AXES, sizes)), f"fixed axes ({fixed}) do not divide the {n_devices} devices")
    sizes[sizes.index(-1)] = n_devices // fixed
  if math.prod(sizes) != n_devices:
    raise ConfigError("mesh", dict(zip(AXES, sizes)), f"its axes multiply to {math.prod(sizes)}, but the run has "
                      f"{n_devices} device{'s' * (n_devices != 1)} (-1 fills an axis; on a CPU, train.cpu_devices "
                      "sets how many)")
  return tuple(sizes)


def trial_ways(mesh_config, n_devices: int, trials: int) -> int:
  """Devices a cell of `trials` runs spreads its runs over: the most that divide the runs and
  leave devices the (data, fsdp, tensor) axes tile (each group of them trains its own runs)."""
  for ways in range(min(trials, n_devices), 0, -1):
    if trials % ways == 0 and n_devices % ways == 0:
      try:
        mesh_shape(mesh_config, n_devices // ways)
        return ways
      except ConfigError:
        continue
  mesh_shape(mesh_config, n_devices)  # the ConfigError of the plain mesh
  return 1


def make_mesh(mesh_config, devices=None, trials: int | None = None) -> Mesh:
  """The (data, fsdp, tensor) mesh, laid out on the TPU torus by jax's mesh builder; for a cell
  of `trials` runs, (trial, data, fsdp, tensor). Split physical axes are allowed: e.g.
  tensor=2 on a v5e 4x4 takes half of one torus axis."""
  devices = jax.devices() if devices is None else devices
  if trials is None:
    shape, names = mesh_shape(mesh_config, len(devices)), AXES
  else:
    ways = trial_ways(mesh_config, len(devices), trials)
    shape, names = (ways, *mesh_shape(mesh_config, len(devices) // ways)), (TRIAL, *AXES)
  if devices[0].platform != "tpu":
    return Mesh(np.asarray(devices).reshape(shape), names)
  return Mesh(mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True), names)


def rules(mesh_config) -> tuple:
  return tuple((logical, tuple(m) if isinstance(m, (list, tuple)) else m) for logical, m in mesh_config.rules)


_LAYOUT = contextvars.ContextVar("activation_layout", default=None)  # (mesh, rules) or None


@contextlib.contextmanager
def activation_layout(mesh: Mesh, mesh_config):
  """Traced inside this, `constrain` pins activations to the mesh (outside: a no-op).

  Its own context rather than flax's logical_axis_rules: under those, flax also constrains
  every parameter as it is read, and DenseGeneral's init reshapes its kernel first, which
  breaks shape evaluation; parameter layouts already come from the jit's in_shardings."""
  token = _LAYOUT.set((mesh, rules(mesh_config)))
  try:
    yield
  finally:
    _LAYOUT.reset(token)


def activation_sharding(shape: tuple, logical_axes: tuple) -> NamedSharding | None:
  """The layout of an activation of `shape` inside activation_layout (None outside). A
  dimension that does not split evenly stays whole (the probe suite's 4 sequences on 16
  chips, GPT-2's 50257-token vocabulary)."""
  layout = _LAYOUT.get()
  if layout is None:
    return None
  mesh, logical_rules = layout
  spec = nn.logical_to_mesh_axes(logical_axes, logical_rules)
  spec = [axes if dim % _ways(mesh.shape, axes) == 0 else None for dim, axes in zip(shape, spec)]
  return NamedSharding(mesh, PartitionSpec(*spec))


def constrain(x, logical_axes: tuple):
  """`x` laid out by the logical axes' rules inside activation_layout; else `x` itself."""
  layout = activation_sharding(x.shape, logical_axes)
  return x if layout is None else jax.lax.with_sharding_constraint(x, layout)


def spread(x_E, logical_axes: tuple):
  """`x_E`, a stack of independent estimates (power iterations, Hutchinson probes) whose other
  axes are laid out by `logical_axes`, with its leading axis split over the mesh axes those
  leave free and it divides (inside activation_layout; else `x_E` itself). The probe suite's
  few sequences leave devices idle, or repeating each other's work, without it."""
  layout = activation_sharding(x_E.shape[1:], logical_axes)
  if layout is None:
    return x_E
  mesh, taken = layout.mesh, set(jax.tree.leaves(tuple(layout.spec)))
  lead = ()
  for axis in mesh.axis_names:
    ways = _ways(mesh.shape, lead) * mesh.shape[axis]
    if axis not in taken and mesh.shape[axis] > 1 and x_E.shape[0] % ways == 0:
      lead += (axis,)
  return jax.lax.with_sharding_constraint(x_E, NamedSharding(mesh, PartitionSpec(lead or None, *layout.spec)))


def platform() -> str:
  """The platform being compiled for: the layout mesh's devices' (an ahead-of-time compile for
  a TPU slice runs on a CPU host), else the default backend's."""
  layout = _LAYOUT.get()
  return mesh_platform(layout[0] if layout else None)


def mesh_platform(mesh=None) -> str:
  """The platform of `mesh`'s devices; without one, the default backend's."""
  return mesh.devices.flat[0].platform if mesh is not None else jax.default_backend()


def _ways(sizes, axes) -> int:
  """How many pieces mesh axes (None, a name or a tuple of names) of these sizes (a mesh's
  `shape`) split a dimension into."""
  axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
  return math.prod(sizes[a] for a in axes)


def under_layout(fn, mesh: Mesh, mesh_config):
  """`fn` (a jitted function) called, and so traced, under activation_layout; `.lower` too."""
  def call(*args):
    with activation_layout(mesh, mesh_config):
      return fn(*args)

  def lower(*args):
    with activation_layout(mesh, mesh_config):
      return fn.lower(*args)

  call.lower = lower
  return call


def logical_to_shardings(abstract_boxed, mesh: Mesh, mesh_config, trials: int | None = None):
  """NamedShardings for a pytree whose leaves are `nn.LogicallyPartitioned` (or plain: replicated);
  with `trials`, for that many copies stacked on a leading axis laid over the `trial` axis."""
  specs = nn.get_partition_spec(abstract_boxed)
  shardings = nn.logical_to_mesh_sharding(specs, mesh, rules(mesh_config))
  abstract = nn.unbox(abstract_boxed)
  if trials is not None:
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, PartitionSpec(TRIAL, *s.spec)), shardings)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct((trials, *x.shape), x.dtype), abstract)
  check_divisible(abstract, shardings)
  return shardings


def check_divisible(abstract, shardings) -> None:
  """Every sharded dimension must split evenly over its mesh axes; names the offending array."""
  flat, _ = jax.tree_util.tree_flatten_with_path(abstract)
  named = [(jax.tree_util.keystr(path), leaf, sharding)
           for (path, leaf), sharding in zip(flat, jax.tree.leaves(shardings))]
  # shortest name first: a parameter's (['params']['wte']...), not an AdamW moment's copy of its shape
  for name, leaf, sharding in sorted(named, key=lambda item: len(item[0])):
    for dim, axes in zip(leaf.shape, sharding.spec):
      parts = _ways(sharding.mesh.shape, axes)
      if dim % parts:
        raise ConfigError("mesh", dict(sharding.mesh.shape),
                          f"{name} has a dimension of {dim}, not divisible over {axes} ({parts} devices)")


def check_batch(sizes, config) -> None:
  """A microbatch's rows must split evenly over the devices the `batch` rule gives them, on
  mesh axes of these sizes (a mesh's `shape`)."""
  rows = config.train.batch_size // config.train.grad_accum
  ways = _ways(sizes, dict(rules(config.mesh)).get("batch"))
  if rows % ways:
    raise ConfigError("train.batch_size", config.train.batch_size,
                      f"{rows} rows per microbatch do not split over the batch's {ways} devices "
                      f"(mesh {dict(sizes)})")


def batch_sharding(mesh: Mesh, mesh_config, trials: bool = False, stacked: bool = False) -> NamedSharding:
  """Batch rows split over the `batch` rule's mesh axes, sequence replicated; with `trials`,
  a cell's batches stacked on a leading axis over the `trial` axis; `stacked`, an
  evaluation's batches on a leading axis, whole on every device."""
  batch_axes = dict(rules(mesh_config)).get("batch")
  lead = (TRIAL,) if trials else (None,) if stacked else ()
  return NamedSharding(mesh, PartitionSpec(*lead, batch_axes, None))


def process_share(mesh: Mesh, mesh_config) -> tuple[int, int]:
  """(i, n): this process loads the i-th of n equal shares of a global batch's rows, the rows
  its devices hold under batch_sharding. n is the process count where the batch splits over the
  processes (the usual layout), less where it does not (mesh.tensor across hosts): processes
  whose devices hold the same rows must load the same rows. Each loading its own 1/P of the
  batch, the devices held other rows on each host and the run trained on B/P rows, silently."""
  ways = _ways(mesh.shape, dict(rules(mesh_config)).get("batch"))
  block = batch_sharding(mesh, mesh_config).devices_indices_map((ways, 1))  # device -> its block of rows
  held = {}  # process -> the blocks of rows its devices hold
  for device in mesh.devices.flat:
    held.setdefault(device.process_index, set()).add(block[device][0].indices(ways)[0])
  return share_of(held, jax.process_index(), dict(mesh.shape))


def share_of(held: dict, process: int, sizes) -> tuple[int, int]:
  """process_share from `held` (process -> the blocks of the batch's rows its devices hold, on a
  mesh of these sizes): the distinct sets of blocks are the shares, in the order of their first
  block. A share need not be contiguous (a TPU mesh's device order): its rows map into its blocks."""
  shares = sorted({tuple(sorted(blocks)) for blocks in held.values()})
  if len({len(share) for share in shares}) > 1 or len(set().union(*held.values())) != sum(map(len, shares)):
    raise ConfigError("mesh", sizes, f"its processes hold overlapping or unequal parts of the batch's blocks of "
                      f"rows: {shares}")
  return shares.index(tuple(sorted(held[process]))), len(shares)


def trial_sharding(mesh: Mesh) -> NamedSharding:
  """One value per run of a cell, over the `trial` axis."""
  return NamedSharding(mesh, PartitionSpec(TRIAL))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())
