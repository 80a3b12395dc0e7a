"""`nplace COMMAND [flags]`: the console script.

Each command is a module with `main(argv)` (listed in COMMANDS, imported only when
run) that parses its flags with `parse_flags`. `--config FILE[:ARG]` accepts
`--config.a.b=value` overrides (ml_collections config_flags). Bad input ends with
one line on stderr and exit code 2, before anything is built or compiled.
"""
import importlib
import sys

from absl import flags
from ml_collections import config_flags

from nplace import backends
from nplace.config import ConfigError, experiment_path, validate
from nplace.data.errors import DataError

COMMANDS = {  # name -> module whose main(argv) runs it
    "info": "nplace.info",
    "demo": "nplace.demo",
    "prepare": "nplace.data.command",
    "train": "nplace.train",
    "probe": "nplace.probes.command",
    "lab": "nplace.lab",
    "convert": "nplace.convert",
    "report": "nplace.report.command",
    "plot": "nplace.compare",
    "eval": "nplace.evaluation",
    "sweep": "nplace.sweep",
    "compile": "nplace.fit",
}
USAGE = f"usage: nplace {{{','.join(COMMANDS)}}} [--config FILE[:ARG]] [--config.KEY=VALUE ...]"


class UsageError(Exception):
  """Bad command-line input; reported as one line, exit code 2."""


def parse_flags(argv, define=None, need_config=True):
  """Parses argv (without the command name) into a FlagValues; validates the config."""
  fv = flags.FlagValues()
  argv = ["nplace", *_installed_configs(argv)]
  # sys_argv: config_flags finds the overrides there, not in sys.argv, so main(argv) works in-process.
  config_flags.DEFINE_config_file("config", None, "config file, FILE[:ARG]", flag_values=fv,
                                  sys_argv=argv)
  if define:
    define(fv)
  try:
    extra = fv(argv)[1:]
    config = fv.config
    if config is not None:
      getattr(config, "model", None)  # a config file that failed to load raises OSError here
  except (flags.Error, OSError) as e:
    raise UsageError(_one_line(e)) from None
  except (AttributeError, KeyError) as e:  # an override naming a key the config lacks
    key = str(e).strip("\"'")
    where = next((a for a in argv if a.startswith("--config.") and f".{key}" in a), key)
    raise UsageError(f"no such config key {key!r} (in {where})") from None
  if extra:
    raise UsageError(f"unexpected argument {extra[0]!r}")
  if need_config:
    if config is None:
      raise UsageError("--config is required")
    validate(config)
  return fv


def _installed_configs(argv):
  """`--config experiments/NAME.py:ARG` read from the installed experiments when the path
  does not exist here (a worker's non-editable install, another working directory)."""
  out = list(argv)
  for i, arg in enumerate(out):
    if arg.startswith("--config="):
      out[i] = "--config=" + experiment_path(arg.removeprefix("--config="))
    elif arg == "--config" and i + 1 < len(out):
      out[i + 1] = experiment_path(out[i + 1])
  return out


def _one_line(error: Exception) -> str:
  """The first line and, past a traceback, the exception it ended in."""
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  if any(line.startswith("Traceback") for line in lines):
    lines = [lines[0].split("Traceback")[0], lines[-1]]
  return " ".join(lines)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  if not argv or argv[0] not in COMMANDS:
    print(USAGE, file=sys.stderr)
    return 2
  backends.cpu_only_without_tpu()
  try:
    importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])
  except (UsageError, ConfigError, DataError) as e:
    print(f"nplace {argv[0]}: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
