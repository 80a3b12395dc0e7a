"""Host memory that XLA's CPU runtime can reuse from step to step (glibc's malloc).

XLA allocates a CPU step's temporaries afresh at every execution. glibc serves a request that
large with a new mmap (always, from the per-thread arenas XLA's worker threads use), so the
kernel page-faults and zeroes all of it again every step: ~35,000 faults and ~100 ms of system
time in a 250 ms step of `experiments/tiny.py` on a 2-core CPU. Keeping freed memory in one
heap removes that, at the price of a higher resident set (BUILD_NOTES.md, "Runtime").
"""
import ctypes
import platform

# mallopt parameters, from glibc's <malloc.h>
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_SETTINGS = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1))


def keep_freed_memory() -> bool:
  """One malloc arena, no mmap'd chunks, freed memory trimmed only past 2 GiB.

  Takes effect only before JAX starts its backend (its threads keep the arenas they already
  have), so call it before anything touches a device. Returns whether it was applied: False
  where the C library is not glibc (macOS, musl), which then keeps its own behaviour.
  """
  if platform.libc_ver()[0] != "glibc":
    return False
  libc = ctypes.CDLL("libc.so.6")
  return all(libc.mallopt(param, value) == 1 for param, value in _SETTINGS)
