"""A CPU host split into one XLA device per core, data-parallel over the batch.

XLA's CPU backend runs one device's step as a chain of small GEMMs and fusions, each spread
over all cores: every op waits for its slowest thread, and ops this small scale poorly
(2 cores: ~1.5x over one). With one device per core and each device's ops on one thread,
each core runs its own share of the batch start to finish, and only the gradients meet
(an all-reduce in shared memory). Measured in BUILD_NOTES.md.
"""
import os

import jax
from jax._src import xla_bridge  # backends_are_initialized has no public spelling

from nplace.errors import ConfigError
from nplace.runtime import sharding

USER_FLAG = "xla_force_host_platform_device_count"
_split_here = False  # split() chose this process's device count (not the user)


def cores() -> int:
  """The cores this process may run on (its affinity, which `taskset` and containers set)."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def device_count(config, n_cores: int) -> int:
  """`train.cpu_devices`; for -1 the most devices, up to one per core, that the mesh and a
  microbatch's rows split over evenly, and one in a multi-process run (its processes already
  share out the cores)."""
  if config.train.cpu_devices != -1:
    return config.train.cpu_devices
  if config.distributed.initialize:
    return 1
  for n in range(n_cores, 1, -1):
    try:
      sharding.check_batch(dict(zip(sharding.AXES, sharding.mesh_shape(config.mesh, n))), config)
      return n
    except ConfigError:
      continue
  return 1


def split(config) -> None:
  """Asks JAX for `device_count` CPU devices, unless that is not ours to set: the user chose
  (XLA_FLAGS' --xla_force_host_platform_device_count, jax_num_cpu_devices) or the backend has
  started (a notebook that already used a device)."""
  global _split_here
  user_chose = USER_FLAG in os.environ.get("XLA_FLAGS", "") or jax.config.jax_num_cpu_devices >= 0
  if not user_chose and not xla_bridge.backends_are_initialized():
    jax.config.update("jax_num_cpu_devices", device_count(config, cores()))
    _split_here = True


def mesh_devices(config) -> list:
  """The devices a run's mesh takes: all of them, except where split() chose their number for
  an earlier run in this one-process job (`nplace sweep`'s and `nplace demo`'s later trials):
  there a run with `train.cpu_devices=-1` takes the most of them its batch splits over."""
  devices = jax.devices()
  if _split_here and config.train.cpu_devices == -1 and jax.process_count() == 1:
    return devices[:device_count(config, len(devices))]
  return devices


def is_split(mesh) -> bool:
  """`mesh` is one CPU process's devices, a device per core or more."""
  return (mesh.devices.flat[0].platform == "cpu" and jax.process_count() == 1
          and mesh.devices.size >= max(cores(), 2))


def compiler_options(mesh) -> dict:
  """XLA options for a step on `mesh`: on a split host each device runs its ops on one thread
  (the cores are already shared out by device)."""
  return {"xla_cpu_multi_thread_eigen": False} if is_split(mesh) else {}
