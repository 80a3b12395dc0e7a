"""What a process settles before JAX's backend starts: the platforms it may start, host memory,
the CPU's devices, jax.distributed.

Which backends a command may start: the CPU alone where libtpu is installed (the `aot`
extra, for compiling against TPU topologies) but this machine has no TPU and no GPU plugin.

JAX would end up on the CPU there anyway, but only after starting libtpu, which prints
errors about TPU hosts it cannot find (jax-ml/jax#11668). A platform the user chose
(JAX_PLATFORMS, jax_platforms) is left as it is.
"""
import glob
import hashlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

from nplace.config import flatten
from nplace.errors import NOT_SET, ConfigError
from nplace.runtime import cpu_split, malloc

GOOGLE_PCI_VENDOR = "0x1ae0"  # TPU chips; also Google's virtual NIC, so a GCE VM counts as maybe-TPU


def tpu_may_be_present() -> bool:
  """A Google PCI device (or a TPU device node) on this machine."""
  if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
    return True
  for path in glob.glob("/sys/bus/pci/devices/*/vendor"):
    try:
      with open(path) as f:
        if f.read().strip() == GOOGLE_PCI_VENDOR:
          return True
    except OSError:
      continue
  return False


def gpu_plugin_installed() -> bool:
  """A PJRT plugin (CUDA, ROCm, ...) JAX would try: a `jax_plugins` module or entry point."""
  if importlib.metadata.entry_points(group="jax_plugins"):
    return True
  try:
    import jax_plugins  # a namespace package holding the plugins; absent when none is installed
  except ImportError:
    return False
  return any(pkgutil.iter_modules(jax_plugins.__path__))


def libtpu_installed() -> bool:
  return importlib.util.find_spec("libtpu") is not None


def libtpu_can_only_fail() -> bool:
  """libtpu is installed, but this machine has no TPU for it and JAX no GPU plugin to try instead."""
  return libtpu_installed() and not tpu_may_be_present() and not gpu_plugin_installed()


def chosen_platforms() -> str | None:
  """The platforms the user chose (JAX_PLATFORMS, jax_platforms), e.g. "cpu" or "cuda,cpu"."""
  return os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms


def cpu_only_without_tpu() -> bool:
  """Restricts JAX to the CPU when libtpu could only fail here; True when it did."""
  if chosen_platforms() or not libtpu_can_only_fail():
    return False
  jax.config.update("jax_platforms", "cpu")
  return True


def cpu_backend_only() -> bool:
  """JAX will run on the CPU: the platforms chosen are CPU only, or there is no GPU plugin and
  no TPU that an installed libtpu could use."""
  chosen = chosen_platforms()
  if chosen:
    return set(chosen.split(",")) == {"cpu"}
  return not gpu_plugin_installed() and not (libtpu_installed() and tpu_may_be_present())


def prepare_process(config) -> None:
  """What must run before anything touches a device, in the trainer and the benchmarks: the
  host memory setting, the CPU's devices, then jax.distributed for multi-process runs."""
  if config.train.reuse_host_memory:
    malloc.keep_freed_memory()
  if cpu_backend_only():  # a GPU or TPU host's CPU devices do no work: leave them as they are
    cpu_split.split(config)
  d = config.distributed
  if not d.initialize:
    return
  # CPU processes need a collectives backend; TPU and GPU ignore this setting.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if d.num_processes:  # it waits until every process has joined, silently: say what for
    print(f"waiting for {d.num_processes} processes at {d.coordinator_address or 'the auto-detected coordinator'} "
          "(jax.distributed.initialize)", file=sys.stderr, flush=True)
  try:
    jax.distributed.initialize(coordinator_address=d.coordinator_address,
                               num_processes=d.num_processes, process_id=d.process_id)
  except ValueError as e:  # what it could not detect here (no TPU pod, SLURM or Open MPI): a traceback before
    raise ConfigError("distributed.initialize", True, f"jax.distributed.initialize: {str(e).strip()} (outside a TPU "
                      "pod, SLURM or Open MPI, set distributed.coordinator_address, num_processes and "
                      "process_id)") from None
  check_same_config(config)


def check_same_config(config) -> None:
  """ConfigError, on every process alike, unless all run this config (distributed.*, which
  jax.distributed has agreed on, aside): a process started with other values trained on
  silently, and the run's summary and events recorded process 0's config alone."""
  flat = {k: v for k, v in flatten(config.to_dict()).items() if not k.startswith("distributed.")}
  keys = sorted(flat)
  hashes = np.array([_digest(f"{k}={flat[k]!r}") for k in keys], np.int32)
  whole = multihost_utils.process_allgather(np.array([len(keys), _digest(hashes.tobytes())], np.int32))
  if (whole == whole[0]).all():
    return
  if (whole[:, 0] != len(keys)).any():
    raise ConfigError("distributed", NOT_SET, "the processes run configs of other keys (other nplace versions?)")
  rows = multihost_utils.process_allgather(hashes)
  key = keys[int(np.argmax((rows != rows[0]).any(axis=0)))]
  raise ConfigError(key, flat[key], "the processes of this run were given different values: every process "
                    "must run the same command (distributed.* aside)")


def _digest(text) -> int:
  data = text.encode() if isinstance(text, str) else text
  return int.from_bytes(hashlib.sha256(data).digest()[:4], "little", signed=True)
