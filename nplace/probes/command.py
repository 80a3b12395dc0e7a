"""`nplace probe --config CFG [--workdir DIR] [--step N] --json OUT`: the probe suite at init
(no workdir) or on a training checkpoint, written as JSON (probe name -> list over layers)."""
import json
import pathlib

import jax
import numpy as np
from absl import flags

from nplace import model, workdirs
from nplace.probes import suite


def _define(fv):
  flags.DEFINE_string("workdir", None, "training run directory; none = probe the init", flag_values=fv)
  flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)", flag_values=fv)
  flags.DEFINE_string("json", None, "output file", flag_values=fv)


def probe_batch(config, held_out: bool) -> np.ndarray:
  """`[probe.batch_size, seq_len + 1]` tokens, the same on every process: the first
  validation rows when `held_out` (a trained model), else uniform random tokens fixed by
  the seed (at init every token is as good as another, and no data need be on disk)."""
  if held_out:
    from nplace import data
    rows = data.make_iterator(config.data, "val", config.probe.batch_size, seed=config.seed,
                              shuffle=False, process_index=0, process_count=1)
    return next(rows)
  key = jax.random.fold_in(jax.random.key(config.seed), 1)
  return np.asarray(jax.random.randint(key, (config.probe.batch_size, config.data.seq_len + 1), 0,
                                       config.model.vocab_size))


def probe_key(config) -> jax.Array:
  """The key of the probes' random vectors: fixed by the seed, so runs compare."""
  return jax.random.fold_in(jax.random.key(config.seed), 2)


def probe(config, workdir=None, step=None) -> dict:
  """The suite's results as lists, plus `placement`, `n_layer` and `step`."""
  if workdir is None:
    params, step = model.init(config.model, jax.random.key(config.seed)), 0
  else:
    params, step = _restore(config, workdir, step)
  results = suite.suite(config, params, probe_batch(config, held_out=workdir is not None),
                        probe_key(config))
  out = {name: np.asarray(value, np.float64).tolist() for name, value in results.items()}
  return out | {"placement": config.model.placement, "n_layer": config.model.n_layer, "step": int(step)}


def _restore(config, workdir, step):
  """restore_params, with a missing run or step as a usage error (before any compile;
  checked first because orbax would create the checkpoints directory)."""
  from nplace.checkpoint import restore_params
  from nplace.cli import UsageError
  if not (workdirs.resolve(workdir) / "checkpoints").is_dir():
    raise UsageError(f"--workdir {workdir}: no checkpoints there (not a training run directory)")
  try:
    return restore_params(config, workdir, step)
  except FileNotFoundError as e:
    raise UsageError(f"--workdir {workdir}: {e}") from None


def main(argv):
  from nplace.cli import UsageError, parse_flags
  fv = parse_flags(argv, _define)
  if fv.json is None:
    raise UsageError("--json OUT is required")
  if fv.step is not None and fv.workdir is None:
    raise UsageError("--step needs --workdir")
  out = probe(fv.config, fv.workdir, fv.step)
  pathlib.Path(fv.json).write_text(json.dumps(out, indent=1) + "\n")
