"""Evaluates a training checkpoint as the trainer does: validation loss, perplexity both ways,
ROUGE-1/2/L of the teacher-forced argmax predictions and, with eval.bertscore_model set,
BERTScore. The config is the one the checkpoint was saved with (--config.KEY=VALUE overrides
apply to it), unless --config is given."""
import json

from absl import flags

from nplace.commands.flags import Command, names_config
from nplace.config import base_config, validate
from nplace.errors import UsageError
from nplace.runtime import workdirs
from nplace.train import checkpoint
from nplace.train.evaluation import evaluate_checkpoint


def _define(fv):
  flags.DEFINE_string("workdir", None, "training run directory (required)", flag_values=fv)
  flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)", flag_values=fv)
  flags.DEFINE_string("json", None, "also write the numbers to this JSON file", flag_values=fv)


COMMAND = Command("nplace eval --workdir DIR [--step N] [--json OUT] [--config FILE[:ARG]]", __doc__, _define,
                  config="optional", output_files=("json",))


def main(argv):
  named = names_config(argv)
  # without a --config file the overrides are checked against today's keys (a saved config
  # has them all, nplace.config.from_saved), then applied to the checkpoint's config
  fv, _ = COMMAND.parse(argv, config=None if named else base_config())
  if not fv.workdir:
    raise UsageError("--workdir is required")
  try:
    if not named:
      fv, _ = COMMAND.parse(argv, config=checkpoint.read_config(fv.workdir, fv.step)[0], check_outputs=False)
    validate(fv.config)
    out = evaluate_checkpoint(fv.config, fv.workdir, fv.step)
  except FileNotFoundError as e:
    raise UsageError(str(e)) from None
  for name, value in out.items():
    print(f"{name:28s} {value:.6g}" if isinstance(value, float) else f"{name:28s} {value}")
  if fv.json:
    workdirs.write_atomic(workdirs.resolve(fv.json), json.dumps(out, indent=2) + "\n")
