"""Host memory reuse: a jitted step's large temporary is not page-faulted in anew every call."""
import os
import platform
import subprocess
import sys

import pytest

# A fresh 64 MiB intermediate (sin(x), which the dot cannot fuse away) at every call; the median
# page faults of the last 20 of 40 calls. The median: while the heap settles (its holes taken by
# smaller allocations), a call now and then grows it by a fresh 64 MiB; ~10 times in 600 calls.
_FAULTS_PER_CALL = """
import resource, statistics, sys
from nplace.runtime import malloc
applied = malloc.keep_freed_memory() if sys.argv[1] == "keep" else False
import jax, jax.numpy as jnp
step = jax.jit(lambda x, w: jnp.sin(x) @ w)
x, w = jnp.ones((4096, 4096)), jnp.ones((4096, 4))
faults = []
for _ in range(40):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  jax.block_until_ready(step(x, w))
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(applied, statistics.median(faults[20:]))
"""


def _faults_per_call(mode):
  done = subprocess.run([sys.executable, "-c", _FAULTS_PER_CALL, mode], capture_output=True, text=True,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"}, check=True)
  applied, faults = done.stdout.split()
  return applied == "True", float(faults)


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_kept_memory_is_reused_instead_of_faulted_in_every_call():
  applied, kept = _faults_per_call("keep")
  _, default = _faults_per_call("default")
  assert applied
  assert default >= 8192  # the temporary (16,384 pages) really is faulted in by default ...
  assert kept < default / 10  # ... and reused when freed memory is kept
