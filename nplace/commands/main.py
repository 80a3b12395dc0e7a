"""`nplace COMMAND [flags]`: the console script. Each command is the module of its name in this
package (imported only when it runs), with a `COMMAND` (its usage, flags and help) and
`main(argv)`. Bad input ends with one line on stderr and exit code 2."""
import faulthandler
import importlib
import logging
import os
import signal
import sys
import warnings

from nplace.errors import ConfigError, DataError, UsageError

COMMANDS = {  # name -> what it does, in a line
    "train": "train a model in a run directory, or resume it there",
    "probe": "the probe suite at init or on a checkpoint, written as JSON",
    "eval": "evaluate a checkpoint: validation loss, perplexity, ROUGE, BERTScore",
    "sweep": "run an experiment grid, each trial in its own run directory",
    "report": "report.md and its figures for sweeps and runs",
    "plot": "one probe of several runs (or probe JSON files) on one axis",
    "lab": "a placement's scorecard at init, or each configuration's measured maximum stable rate",
    "compile": "does a run fit a TPU slice? an ahead-of-time compile, per-chip memory",
    "convert": "Hugging Face GPT-2 checkpoints in and out",
    "prepare": "tokenize a data source once into token shards",
    "info": "a config's size and cost, its keys with their docs, or every placement",
    "demo": "the tiny model with each placement, then a report (make demo)",
}
USAGE = f"usage: nplace {{{','.join(COMMANDS)}}} [flags] (nplace --help lists the commands)"


def overview() -> str:
  width = max(map(len, COMMANDS)) + 2
  lines = ["usage: nplace COMMAND [flags]", "", "Where the normalization goes in a Transformer: train, probe and "
           "compare norm placements.", "", "commands:"]
  lines += [f"  {name:{width}}{about}" for name, about in COMMANDS.items()]
  lines += ["", "nplace COMMAND --help prints a command's flags; nplace info --config FILE --keys lists "
            "every config key."]
  return "\n".join(lines)


TRAINING = ("train", "sweep", "demo")  # the commands a rerun resumes
INTERRUPTED = 128 + signal.SIGINT  # the exit code after Ctrl-C


def main(argv=None):
  owns_process = argv is None  # the console script: a native crash prints every thread's Python stack
  if owns_process:
    faulthandler.enable()
    argv = sys.argv[1:]
  # A save that Ctrl-C cuts short leaves orbax's handlers' coroutines unawaited, and Python names
  # each at exit, after the command's last line. Set before flax is imported: set after, it is
  # not heeded at exit (seen with flax 0.12.8).
  warnings.filterwarnings("ignore", r"coroutine '\w+\.async_save' was never awaited", RuntimeWarning)
  try:
    code = _dispatch(argv)
    sys.stdout.flush()  # a reader that left shows here, not in Python's flush at exit
  except BrokenPipeError:  # the reader left early (`nplace sweep --list | head`): stop quietly, as Unix tools do
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is left in the buffer goes nowhere
    return 128 + signal.SIGPIPE
  if owns_process and code == INTERRUPTED:
    # A save that Ctrl-C cut short can leave orbax's threads waiting: Python's exit joined them
    # for ever (seen once in a full test run), and one Ctrl-C in 8 ended in SIGABRT after the line.
    # What was saved stays and the unfinished step is dropped on resume, so end here.
    sys.stderr.flush()
    os._exit(code)
  return code


def _dispatch(argv) -> int:
  if argv[:1] in (["--help"], ["-h"]):
    print(overview())
    return 0
  if not argv or argv[0] not in COMMANDS:
    print(USAGE, file=sys.stderr)
    return 2
  name, rest = argv[0], argv[1:]
  command = importlib.import_module(f"nplace.commands.{name}")
  if "--help" in rest or "-h" in rest:
    print(command.COMMAND.help())
    return 0
  from nplace.runtime import startup  # jax: loaded only when a command runs, not for --help
  startup.cpu_only_without_tpu()
  try:
    code = command.main(rest)  # None, or the exit code of a command that ended without an error
  except (UsageError, ConfigError, DataError) as e:
    print(f"nplace {name}: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:  # Ctrl-C: one line; what was saved stays
    # a save cut short fails on orbax's threads after this (its executor shut down), logged
    # through absl: its tracebacks would follow the line
    logging.getLogger("absl").setLevel(logging.CRITICAL)
    resume = "; rerun the same command to resume from the last checkpoint" if name in TRAINING else ""
    print(f"\nnplace {name}: interrupted{resume}", file=sys.stderr)
    return INTERRUPTED
  return code or 0


if __name__ == "__main__":
  sys.exit(main())
