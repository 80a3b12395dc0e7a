"""Trains a model in a run directory, or resumes it there from the newest good checkpoint.

TensorBoard event files, checkpoints (every checkpoint.every steps, on SIGTERM and at the end)
and, when the run ends, summary.json go to --workdir (a local path or gs://BUCKET/...). Run the
same command again to resume an interrupted run (it says from which step and checkpoint); a
finished run is left as it is, summary.json included. A workdir whose run was started with
another train.steps is refused unless --extend trains it on to the new train.steps.
"""
import shlex

from absl import flags

from nplace.commands.flags import Command
from nplace.errors import UsageError
from nplace.train.loop import train


def _define(fv):
  flags.DEFINE_string("workdir", None, "run directory (required)", flag_values=fv)
  flags.DEFINE_bool("extend", False, "train a run started with another train.steps on to this config's "
                    "(its learning-rate schedule then differs from a fresh run's)", flag_values=fv)


COMMAND = Command("nplace train --config FILE[:ARG] --workdir DIR [--extend] [--config.KEY=VALUE ...]", __doc__, _define,
                  output_dirs=("workdir",))


def config_of(command: str):
  """The config the command line `nplace train ...` trains (read, not run: no output is checked)."""
  return COMMAND.parse(shlex.split(command)[2:], check_outputs=False)[0].config


def main(argv):
  fv, _ = COMMAND.parse(argv)
  if not fv.workdir:
    raise UsageError("--workdir is required")
  train(fv.config, fv.workdir, fv.extend)
