"""Runs the probe suite at init (no --workdir: the config's model, on random tokens) or on a
training checkpoint (on held-out rows), and writes its results as JSON: probe name -> list over
layers (or norm sites), plus placement, n_layer and step. On a checkpoint the config is the one
it was saved with (--config.KEY=VALUE overrides apply to it), unless --config is given, as in
`nplace eval`. Definitions: docs/science.md."""
import json

import jax
import numpy as np
from absl import flags

from nplace.commands.flags import Command, names_config
from nplace.config import ModelConfig, base_config, validate
from nplace.errors import UsageError
from nplace.logs.progress import stage
from nplace.model import decoder
from nplace.probes import inputs, suite
from nplace.runtime import workdirs
from nplace.train import checkpoint


def _define(fv):
  flags.DEFINE_string("workdir", None, "training run directory; none = probe the init", flag_values=fv)
  flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)", flag_values=fv)
  flags.DEFINE_string("json", None, "output file (required)", flag_values=fv)


COMMAND = Command("nplace probe --config FILE[:ARG] --json OUT | nplace probe --workdir DIR [--step N] --json OUT "
                  "[--config FILE[:ARG]]", __doc__, _define, config="optional", output_files=("json",))


def probe(config, workdir=None, step=None) -> dict:
  """The suite's results as lists, plus `placement`, `n_layer` and `step`."""
  if workdir is None:
    params, step = decoder.init(ModelConfig.of(config.model), jax.random.key(config.seed)), 0
  else:
    params, step = _restore(config, workdir, step)
  m = config.model
  where = f"{workdir} at step {step}" if workdir else "at init"
  stage(f"probing {m.placement} ({m.n_layer} x {m.d_model}) {where}: compiling the suite, then running it...")
  results = suite.suite(config, params, inputs.probe_batch(config, held_out=workdir is not None),
                        inputs.probe_key(config))
  out = {name: np.asarray(value, np.float64).tolist() for name, value in results.items()}
  return out | {"placement": config.model.placement, "n_layer": config.model.n_layer, "step": int(step)}


def _check_run(workdir):
  """A usage error unless `workdir` holds checkpoints (checked before orbax opens it: it would
  create the checkpoints directory)."""
  if not (workdirs.resolve(workdir) / "checkpoints").is_dir():
    raise UsageError(f"--workdir {workdir}: no checkpoints there (not a training run directory)")


def _restore(config, workdir, step):
  """restore_params, with a missing run or step as a usage error (before any compile)."""
  _check_run(workdir)
  try:
    return checkpoint.restore_params(config, workdir, step)
  except FileNotFoundError as e:
    raise UsageError(f"--workdir {workdir}: {e}") from None


def _parse(argv):
  """The flags, their config the checkpoint's unless argv names a --config file (the overrides
  are checked against today's keys first: a saved config has them all, nplace.config.from_saved)."""
  named = names_config(argv)
  fv, _ = COMMAND.parse(argv, config=None if named else base_config())
  if fv.json is None:
    raise UsageError("--json OUT is required")
  if fv.step is not None and fv.workdir is None:
    raise UsageError("--step needs --workdir")
  if not named:
    if fv.workdir is None:
      raise UsageError("--config is required at init (without --workdir)")
    _check_run(fv.workdir)
    try:
      saved = checkpoint.read_config(fv.workdir, fv.step)[0]
    except FileNotFoundError as e:
      raise UsageError(f"--workdir {fv.workdir}: {e}") from None
    fv, _ = COMMAND.parse(argv, config=saved, check_outputs=False)
  validate(fv.config)
  return fv


def main(argv):
  fv = _parse(argv)
  out = probe(fv.config, fv.workdir, fv.step)
  workdirs.write_atomic(workdirs.resolve(fv.json), json.dumps(out, indent=1) + "\n")
  stage(f"wrote {fv.json} ({len(out) - 3} probes)")
