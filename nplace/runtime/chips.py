"""The accelerators nplace knows: the TPU slices `nplace compile` targets (each chip's memory
and speed, slice names) and the peak FLOP/s that perf/mfu divides by.

A slice is named as libtpu does (`v5e:4x4`, `v4:2x2x4`) or as Cloud TPU's accelerator type
(`v5litepod-16`, `v4-8`, `v5p-8`, `v6e-4`). Cloud counts TensorCores for v4 and v5p (two per
chip: v4-8 is 4 chips) and chips for v5e and v6e. Figures per chip from the Cloud TPU
system-architecture pages: HBM, bf16 peak, HBM bandwidth and the total inter-chip (ICI)
bandwidth.
"""
import dataclasses
import math
import os
import re

import jax
from jax.experimental import topologies

from nplace.runtime import stderr_filter

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
  generation: str  # libtpu's topology prefix
  cloud: str  # Cloud accelerator-type prefix
  hbm_bytes: int
  peak_flops: float  # dense bf16 FLOP/s (float32 matmuls at default precision run on the same MXU)
  hbm_bandwidth: float  # bytes/s
  ici_bandwidth: float  # bytes/s, all links of one chip together
  cores_in_cloud_name: int  # TensorCores a chip adds to the Cloud name's count
  chip_config: str | None  # libtpu chip config giving one device per chip (megacore)
  shapes: dict  # chips -> torus shape of the standard slice
  device_kinds: tuple[str, ...]  # what jax's `device.device_kind` calls it


_SHAPES_3D = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4),
              128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8)}
_SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8),
              128: (8, 16), 256: (16, 16)}

CHIPS = {c.generation: c for c in (
    Chip("v4", "v4", 32 * GiB, 275e12, 1.2e12, 300e9, 2, "megacore", _SHAPES_3D, ("TPU v4",)),
    Chip("v5e", "v5litepod", 16 * GiB, 197e12, 0.82e12, 200e9, 1, None, _SHAPES_2D, ("TPU v5 lite", "TPU v5e")),
    Chip("v5p", "v5p", 95 * GiB, 459e12, 2.77e12, 600e9, 2, "megacore", _SHAPES_3D, ("TPU v5p", "TPU v5")),
    Chip("v6e", "v6e", 32 * GiB, 918e12, 1.64e12, 448e9, 1, None, _SHAPES_2D, ("TPU v6 lite", "TPU v6e")),
)}
# Peak dense bf16 FLOP/s per device: the TPU chips above and these GPUs.
PEAK_FLOPS = {kind: chip.peak_flops for chip in CHIPS.values() for kind in chip.device_kinds} | {
    "NVIDIA A100-SXM4-40GB": 312e12, "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA H100 80GB HBM3": 989e12, "NVIDIA H200": 989e12,
}
CLOUD_ALIASES = {"v5e": "v5litepod"}  # v5e-16 is also heard for v5litepod-16


@dataclasses.dataclass(frozen=True)
class Topology:
  chip: Chip
  name: str  # libtpu's name, e.g. v5e:4x4
  chips: int

  @property
  def cloud_name(self) -> str:
    return f"{self.chip.cloud}-{self.chips * self.chip.cores_in_cloud_name}"

  def devices(self) -> list:
    """The slice's abstract devices (one per chip): needs libtpu, no TPU (libtpu's complaints
    about the TPU it cannot find are dropped)."""
    kwargs = {"chip_config_name": self.chip.chip_config} if self.chip.chip_config else {}
    if self.chips < 4:  # a slice smaller than libtpu's default 2x2 host (v5e-1) is one host of its shape
      shape = [int(s) for s in self.name.partition(":")[2].split("x")]
      kwargs["chips_per_host_bounds"] = (shape + [1, 1])[:3]
    # no TPU is touched, so several processes may load libtpu at once (it otherwise takes a
    # machine-wide lock file: a second pytest worker or compile would abort)
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    with stderr_filter.dropping(stderr_filter.LIBTPU_WITHOUT_TPU):
      return list(topologies.get_topology_desc(platform="tpu", topology_name=self.name, **kwargs).devices)


def supported() -> list[str]:
  """Every Cloud name the table knows, smallest slice first."""
  return [Topology(c, "", n).cloud_name for c in CHIPS.values() for n in c.shapes]


def resolve(name: str) -> Topology:
  """A Topology from a libtpu or Cloud name; ValueError (one line) when unknown."""
  libtpu = re.fullmatch(r"(v\w+):(\d+(?:x\d+)+)", name)
  if libtpu and libtpu[1] in CHIPS:
    chip, shape = CHIPS[libtpu[1]], tuple(int(s) for s in libtpu[2].split("x"))
    if shape not in chip.shapes.values():  # libtpu lays out only whole hosts, and aborts on some shapes
      raise ValueError(f"topology {name!r}: not a {chip.generation} slice; its shapes are "
                       f"{', '.join('x'.join(map(str, s)) for s in chip.shapes.values())}")
    return Topology(chip, name, math.prod(shape))
  cloud = re.fullmatch(r"(v\w+)-(\d+)", name)
  if cloud:
    prefix = CLOUD_ALIASES.get(cloud[1], cloud[1])
    for chip in CHIPS.values():
      chips, rest = divmod(int(cloud[2]), chip.cores_in_cloud_name)
      if chip.cloud == prefix and not rest and chips in chip.shapes:
        return Topology(chip, f"{chip.generation}:{'x'.join(map(str, chip.shapes[chips]))}", chips)
  raise ValueError(f"unknown topology {name!r}: give a libtpu name (v5e:4x4, v4:2x2x4; generations "
                   f"{', '.join(CHIPS)}) or a Cloud type ({', '.join(supported()[:4])}, ...)")


def peak_flops(device_kind: str, configured: float | None) -> float | None:
  """Peak FLOP/s of one device for perf/mfu: `train.peak_flops` when set, else the table's."""
  return configured if configured is not None else PEAK_FLOPS.get(device_kind)


def _host_bytes() -> int | None:
  """This host's physical memory; None where the platform does not say."""
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (AttributeError, ValueError, OSError):
    return None


def memory_bytes(devices) -> int | None:
  """The memory `devices` hold together: each accelerator's allocator limit (`bytes_limit`), or
  for CPU devices their hosts' physical memory, which a host's devices share; None where this
  process cannot tell (a device that reports no limit). Another process's devices report
  nothing here: they count as this process's (a mesh's devices are of one kind)."""
  if all(d.platform == "cpu" for d in devices):
    host = _host_bytes()
    return None if host is None else host * len({d.process_index for d in devices})
  local = [d for d in devices if d.process_index == jax.process_index()]
  limits = [(d.memory_stats() or {}).get("bytes_limit") for d in local]
  return None if not limits or None in limits else sum(limits) * len(devices) // len(local)
