"""What every command shares: its flags (absl), the experiment config with `--config.KEY=VALUE`
overrides (ml_collections config_flags), and its `--help`.

Bad input ends as a UsageError (one line, exit code 2) before anything is built or compiled.
"""
import dataclasses
import textwrap
from typing import Callable

from absl import flags
from ml_collections import config_flags

from nplace.config import experiment_path, validate
from nplace.errors import UsageError

CONFIG_HELP = ("experiment config FILE[:ARG], e.g. experiments/tiny.py:peri; override any key with "
               "--config.KEY=VALUE (list them: nplace info --config FILE --keys)")


@dataclasses.dataclass(frozen=True)
class Command:
  """A command's interface: `usage` (its synopsis), `about` (what it does: its module's
  docstring), `define(fv)` (its own flags), whether it takes --config (`required`: validated
  here; `optional`: the command validates what it makes of it; `none`) and positional
  arguments."""
  usage: str
  about: str
  define: Callable = lambda fv: None
  config: str = "required"
  args: bool = False

  def flag_values(self, argv=()) -> flags.FlagValues:
    fv = flags.FlagValues()
    if self.config != "none":
      # sys_argv: config_flags reads the overrides there, not in sys.argv, so main(argv) works in-process
      config_flags.DEFINE_config_file("config", None, CONFIG_HELP, flag_values=fv, sys_argv=list(argv))
    self.define(fv)
    return fv

  def parse(self, argv) -> tuple[flags.FlagValues, list[str]]:
    """(the parsed flags, the positional arguments)."""
    argv = ["nplace", *_installed_configs(argv)]
    fv = self.flag_values(argv)
    try:
      extra = fv(argv)[1:]
      config = fv.config if self.config != "none" else None
      if config is not None:
        getattr(config, "model", None)  # a config file that failed to load raises OSError here
    except (flags.Error, OSError) as e:
      raise UsageError(_one_line(e)) from None
    except (AttributeError, KeyError) as e:  # an override naming a key the config lacks
      key = str(e).strip("\"'")
      where = next((a for a in argv if a.startswith("--config.") and f".{key}" in a), key)
      raise UsageError(f"no such config key {key!r} (in {where})") from None
    if extra and not self.args:
      raise UsageError(f"unexpected argument {extra[0]!r}")
    if self.config == "required":
      if config is None:
        raise UsageError("--config is required")
      validate(config)
    return fv, extra

  def help(self) -> str:
    """The usage, what the command does, and each of its flags with its doc."""
    fv, rows = self.flag_values(), []
    for name in fv:
      flag = fv[name]
      shown = f"--[no]{name}" if flag.boolean else f"--{name}"
      default = "" if flag.default in (None, False) or name == "config" else f" (default: {flag.default})"
      needed = " (required)" if name == "config" and self.config == "required" else ""
      rows.append((shown, f"{flag.help}{default}{needed}"))
    width = max([len(shown) for shown, _ in rows], default=0) + 2
    lines = [f"usage: {self.usage}", "", textwrap.dedent(self.about).strip(), "", "flags:"]
    for shown, doc in rows:
      wrapped = textwrap.wrap(doc, 96 - width) or [""]
      lines += [f"  {shown:{width}}{wrapped[0]}", *(f"  {'':{width}}{line}" for line in wrapped[1:])]
    lines.append(f"  {'--help':{width}}this text")
    return "\n".join(lines)


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
