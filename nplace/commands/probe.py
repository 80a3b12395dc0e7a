"""Runs the probe suite at init (no --workdir: the config's model, on random tokens) or on a
training checkpoint (on held-out rows), and writes its results as JSON: probe name -> list over
layers (or norm sites), plus placement, n_layer and step. Definitions: docs/science.md."""
import json
import pathlib

import jax
import numpy as np
from absl import flags

from nplace.commands.flags import Command
from nplace.config import ModelConfig
from nplace.errors import UsageError
from nplace.model import decoder
from nplace.probes import inputs, suite
from nplace.runtime import workdirs
from nplace.train import checkpoint


def _define(fv):
  flags.DEFINE_string("workdir", None, "training run directory; none = probe the init", flag_values=fv)
  flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)", flag_values=fv)
  flags.DEFINE_string("json", None, "output file (required)", flag_values=fv)


COMMAND = Command("nplace probe --config FILE[:ARG] [--workdir DIR [--step N]] --json OUT", __doc__, _define,
                  output_files=("json",))


def probe(config, workdir=None, step=None) -> dict:
  """The suite's results as lists, plus `placement`, `n_layer` and `step`."""
  if workdir is None:
    params, step = decoder.init(ModelConfig.of(config.model), jax.random.key(config.seed)), 0
  else:
    params, step = _restore(config, workdir, step)
  results = suite.suite(config, params, inputs.probe_batch(config, held_out=workdir is not None),
                        inputs.probe_key(config))
  out = {name: np.asarray(value, np.float64).tolist() for name, value in results.items()}
  return out | {"placement": config.model.placement, "n_layer": config.model.n_layer, "step": int(step)}


def _restore(config, workdir, step):
  """restore_params, with a missing run or step as a usage error (before any compile;
  checked first because orbax would create the checkpoints directory)."""
  if not (workdirs.resolve(workdir) / "checkpoints").is_dir():
    raise UsageError(f"--workdir {workdir}: no checkpoints there (not a training run directory)")
  try:
    return checkpoint.restore_params(config, workdir, step)
  except FileNotFoundError as e:
    raise UsageError(f"--workdir {workdir}: {e}") from None


def main(argv):
  fv, _ = COMMAND.parse(argv)
  if fv.json is None:
    raise UsageError("--json OUT is required")
  if fv.step is not None and fv.workdir is None:
    raise UsageError("--step needs --workdir")
  out = probe(fv.config, fv.workdir, fv.step)
  pathlib.Path(fv.json).write_text(json.dumps(out, indent=1) + "\n")
