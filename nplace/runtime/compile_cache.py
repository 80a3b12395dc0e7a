"""JAX's persistent compilation cache for `nplace sweep`, in the sweep's directory.

Its cells compile the same programs (one train step per model shape, placement and trial
count: nplace/train/steps.py), and the sweep drops JAX's in-memory caches after each cell, so
without a cache on disk every cell compiled them again; a rerun (after a kill or a preemption)
finds them too."""
import contextlib

import jax
from jax.experimental.compilation_cache import compilation_cache

DIRNAME = ".jax_cache"  # in the sweep's directory, hidden beside its trials' directories


@contextlib.contextmanager
def persistent(path):
  """JAX's persistent compilation cache in `path` for the `with` block, every compile written
  to it (jax's default keeps only those over 1 s; most of a cell's repeat in every cell); the
  settings from before after it. A cache the user chose (jax_compilation_cache_dir,
  $JAX_COMPILATION_CACHE_DIR) is used as it is."""
  if jax.config.jax_compilation_cache_dir:
    yield
    return
  min_seconds = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_compilation_cache_dir", str(path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  compilation_cache.reset_cache()  # jax opens its cache once, at the first compile after a reset
  try:
    yield
  finally:
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_seconds)
    compilation_cache.reset_cache()
