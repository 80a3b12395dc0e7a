"""What the probe suite runs on: a fixed batch and a fixed key, so that runs (and the steps of
one run) compare."""
import jax
import numpy as np

from nplace.data import loader


def probe_batch(config, held_out: bool) -> np.ndarray:
  """`[probe.batch_size, seq_len + 1]` tokens, the same on every process: the first
  validation rows when `held_out` (a trained model), else uniform random tokens fixed by
  the seed (at init every token is as good as another, and no data need be on disk)."""
  if held_out:
    rows = loader.make_iterator(config.data, "val", config.probe.batch_size, seed=config.seed,
                                shuffle=False, process_index=0, process_count=1)
    return next(rows)
  key = jax.random.fold_in(jax.random.key(config.seed), 1)
  return np.asarray(jax.random.randint(key, (config.probe.batch_size, config.data.seq_len + 1), 0,
                                       config.model.vocab_size))


def probe_key(config) -> jax.Array:
  """The key of the probes' random vectors: fixed by the seed, so runs compare."""
  return jax.random.fold_in(jax.random.key(config.seed), 2)
