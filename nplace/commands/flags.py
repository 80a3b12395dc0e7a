"""What every command shares: its flags (absl), the experiment config with `--config.KEY=VALUE`
overrides (ml_collections config_flags), and its `--help`.

Bad input ends as a UsageError (one line, exit code 2) before anything is built or compiled.
"""
import dataclasses
import pathlib
import re
import sys
import textwrap
from typing import Callable

from absl import flags
import ml_collections
from ml_collections import config_flags

from nplace.config import experiment_path, file_error, validate
from nplace.errors import UsageError
from nplace.runtime import workdirs

CONFIG_HELP = ("experiment config FILE[:ARG], e.g. experiments/tiny.py:peri; override any key with "
               "--config.KEY=VALUE (list them: nplace info --config FILE --keys)")


@dataclasses.dataclass(frozen=True)
class Command:
  """A command's interface: `usage` (its synopsis), `about` (what it does: its module's
  docstring), `define(fv)` (its own flags), whether it takes --config (`required`: validated
  here, `config_default` naming the one the command supplies when none is given; `optional`:
  the command validates what it makes of it; `none`), positional
  arguments, and the flags naming a file (`output_files`) or directory (`output_dirs`) it
  writes: checked here, so an unwritable path fails before the work, not after it, unless a
  flag of `writes_nothing_with` is set (sweep --list only prints); `bucket_outputs=False`: a
  command that writes local files only refuses a `gs://` output in one line."""
  usage: str
  about: str
  define: Callable = lambda fv: None
  config: str = "required"
  args: bool = False
  output_files: tuple[str, ...] = ()
  output_dirs: tuple[str, ...] = ()
  writes_nothing_with: tuple[str, ...] = ()
  bucket_outputs: bool = True
  config_default: str = ""  # what a required --config defaults to where the command supplies one (lab)

  def flag_values(self, argv=(), config=None) -> flags.FlagValues:
    """The flags; with `config` (a ConfigDict), --config.KEY=VALUE overrides apply to it
    instead of to a --config file."""
    fv = flags.FlagValues()
    if self.config != "none":
      # sys_argv: config_flags reads the overrides there, not in sys.argv, so main(argv) works in-process
      if config is None:
        config_flags.DEFINE_config_file("config", None, CONFIG_HELP, flag_values=fv, sys_argv=list(argv))
      else:
        config_flags.DEFINE_config_dict("config", config, CONFIG_HELP, flag_values=fv, sys_argv=list(argv))
    self.define(fv)
    return fv

  def parse(self, argv, config=None, check_outputs=True) -> tuple[flags.FlagValues, list[str]]:
    """(the parsed flags, the positional arguments). `config`: what the overrides apply to
    when argv names no --config file (eval: the checkpoint's). `check_outputs=False`: a
    command line read, not run (the report's trial commands)."""
    argv = ["nplace", *(_installed_configs(argv) if self.config != "none" else argv)]
    file = _config_file(argv)
    # config_flags runs a --config file as the module config_config, and into the one already in
    # sys.modules when there is one: a second file read in one process (report's trial commands)
    # would see the first's names, its get_config among them
    sys.modules.pop("config_config", None)
    try:
      fv = self.flag_values(argv, config)  # inside: with a ConfigDict, a bad override raises here
      extra = fv(argv)[1:]  # runs the config file
      config = fv.config if self.config != "none" else None
      if config is not None:
        getattr(config, "model", None)  # a config file that failed to load raises OSError here
    except Exception as e:  # noqa: BLE001 - a config file runs the user's code: whatever it raised
      error = _parse_error(e, argv, file)
      if error is None:
        raise
      raise error from None
    if extra and not self.args:
      raise UsageError(f"unexpected argument {extra[0]!r}")
    if file and not isinstance(config, ml_collections.ConfigDict):
      raise UsageError(f"--config {file}: get_config() returned {'None' if config is None else type(config).__name__}, "
                       "not an ml_collections.ConfigDict")
    if self.config == "required":
      if config is None:
        raise UsageError("--config is required")
      validate(config)
    writes = check_outputs and not any(fv[name].value for name in self.writes_nothing_with)
    for name in (*self.output_files, *self.output_dirs) if writes else ():
      if fv[name].value is None:
        continue
      path = workdirs.resolve(fv[name].value)
      if workdirs.is_remote(path) and not self.bucket_outputs:
        raise UsageError(f"--{name} {path}: a bucket; this command writes to local disk only")
      workdirs.check_writable(path, f"--{name}", file=name in self.output_files)
    return fv, extra

  def help(self) -> str:
    """The usage, what the command does, and each of its flags with its doc."""
    fv, rows = self.flag_values(), []
    for name in fv:
      flag = fv[name]
      shown = f"--[no]{name}" if flag.boolean else f"--{name}"
      default = "" if flag.default in (None, False) or name == "config" else f" (default: {flag.default})"
      needed = ((f" (default: {self.config_default})" if self.config_default else " (required)")
                if name == "config" and self.config == "required" else "")
      rows.append((shown, f"{flag.help}{default}{needed}"))
    width = max([len(shown) for shown, _ in rows], default=0) + 2
    lines = [f"usage: {self.usage}", "", textwrap.dedent(self.about).strip(), "", "flags:"]
    for shown, doc in rows:
      wrapped = textwrap.wrap(doc, 96 - width) or [""]
      lines += [f"  {shown:{width}}{wrapped[0]}", *(f"  {'':{width}}{line}" for line in wrapped[1:])]
    lines.append(f"  {'--help':{width}}this text")
    return "\n".join(lines)


def names_config(argv) -> bool:
  """Whether argv names a --config file (not only --config.KEY=VALUE overrides)."""
  return any(a == "--config" or a.startswith("--config=") for a in argv)


def _config_file(argv) -> str | None:
  """The file argv's --config FILE[:ARG] names, as config_flags runs it."""
  for i, arg in enumerate(argv):
    if arg.startswith("--config="):
      return arg.removeprefix("--config=").partition(":")[0]
    if arg == "--config" and i + 1 < len(argv):
      return argv[i + 1].partition(":")[0]
  return None


def _parse_error(error: Exception, argv, file) -> UsageError | None:
  """One line for what parsing argv raised: the config file's own error (where in it), a bad
  flag, an override naming no key; None for anything else (a bug, not bad input)."""
  in_file = file and file_error(error, file)
  if in_file:
    return UsageError(f"--config {in_file}")
  if file and isinstance(error, AttributeError) and error.name == "get_config":
    return UsageError(f"--config {file}: defines no get_config()")
  if isinstance(error, (flags.Error, OSError)):
    return UsageError(_one_line(error))
  if isinstance(error, (AttributeError, KeyError)):  # an override naming a key the config lacks
    key, hint = _unknown_key(error)
    where = next((a for a in argv if a.startswith("--config.") and f".{key}" in a), key)
    return UsageError(f"no such config key {key!r} (in {where})" + (f"; {hint}" if hint else ""))
  return None


def _unknown_key(error: Exception) -> tuple[str, str]:
  """(the key, ml_collections' suggestion or "") of an override naming a key the config lacks.
  Its KeyError, maybe as the argument of an AttributeError, holds the key quoted, then a line
  `Did you mean "steps" instead of "stpes"?`: str() of either would quote it all once more."""
  while error.args and isinstance(error.args[0], Exception):
    error = error.args[0]
  first, _, hint = str(error.args[0] if error.args else error).partition("\n")
  below_a_value = re.search(r"Attempting to lookup: (\S+)", first)  # a key under one that is not a section
  if below_a_value:
    return below_a_value.group(1), ""
  return first.strip("\"'"), hint[:1].lower() + hint[1:]


def _installed_configs(argv):
  """`--config experiments/NAME.py:ARG` read from the installed experiments when the path
  does not exist here (a worker's non-editable install, another working directory). A FILE
  in neither place is one line naming it: config_flags' own message buries it mid-sentence."""
  out = list(argv)
  for i, arg in enumerate(out):
    if arg.startswith("--config="):
      out[i] = "--config=" + _existing_config(arg.removeprefix("--config="))
    elif arg == "--config" and i + 1 < len(out):
      out[i + 1] = _existing_config(out[i + 1])
  return out


def _existing_config(spec: str) -> str:
  if not spec.partition(":")[0]:
    raise UsageError(f"--config {spec!r}: names no file (FILE[:ARG], e.g. experiments/tiny.py:peri)")
  found = experiment_path(spec)
  file = found.partition(":")[0]
  if not pathlib.Path(file).exists():
    raise UsageError(f"--config {spec.partition(':')[0]}: no such file")
  return found


def _one_line(error: Exception) -> str:
  """The first line and, past a traceback, the exception it ended in."""
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  if any(line.startswith("Traceback") for line in lines):
    lines = [lines[0].split("Traceback")[0], lines[-1]]
  return " ".join(lines)
