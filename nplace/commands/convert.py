"""Converts Hugging Face GPT-2 checkpoints in and out. --from-hf DIR --out WORKDIR reads DIR's
config.json and model.safetensors (no torch) into a Pre-LN nplace model, written as step 0 of
WORKDIR (a fresh AdamW state, no data position), and prints the --config flags that describe
it for probe, eval and train. --to-hf --workdir DIR [--step N] --out HF_DIR writes a
GPT-2-architecture run as config.json + model.safetensors, which
transformers.GPT2LMHeadModel.from_pretrained loads."""
from absl import flags

from nplace import hf
from nplace.commands.flags import Command
from nplace.errors import UsageError


def _define(fv):
  flags.DEFINE_string("from-hf", None, "Hugging Face GPT-2 directory to read", flag_values=fv)
  flags.DEFINE_boolean("to-hf", False, "write the --workdir run as a Hugging Face GPT-2", flag_values=fv)
  flags.DEFINE_string("workdir", None, "run directory to read (--to-hf)", flag_values=fv)
  flags.DEFINE_integer("step", None, "checkpoint step (--to-hf; default: the newest)", flag_values=fv)
  flags.DEFINE_string("out", None, "directory to write", flag_values=fv)



COMMAND = Command("nplace convert --from-hf DIR --out WORKDIR | --to-hf --workdir DIR [--step N] --out HF_DIR",
                  __doc__, _define, config="optional", output_dirs=("out",), bucket_outputs=False)


def main(argv):
  fv, _ = COMMAND.parse(argv)
  source, to = fv["from-hf"].value, fv["to-hf"].value
  if fv.config is not None:
    raise UsageError("--config: convert reads the model config from config.json or the checkpoint")
  if bool(source) == to:
    raise UsageError("give one of --from-hf DIR or --to-hf")
  if not fv.out:
    raise UsageError("--out is required")
  if source:
    if fv.workdir or fv.step is not None:
      raise UsageError("--workdir and --step go with --to-hf")
    flags_line = hf.from_hf(source, fv.out)
    print(f"wrote {fv.out}: step 0 holds {source}'s weights and a fresh AdamW state. "
          f"Its config (for probe, eval, train):\n  {flags_line}")
    return
  if not fv.workdir:
    raise UsageError("--to-hf needs --workdir")
  try:
    step = hf.to_hf(fv.workdir, fv.out, fv.step)
  except FileNotFoundError as e:
    raise UsageError(str(e)) from None
  print(f"wrote {fv.out}/config.json and model.safetensors from step {step} of {fv.workdir}")
