"""Experiment grids: `experiments/NAME.py`'s `get_sweep(arg)` expanded into trials, each with
a stable readable name, its config, and the `nplace train` command that runs it on its own."""
import dataclasses
import importlib.util
import pathlib
import re
import shlex

import ml_collections

from nplace.config import experiment_path, file_error, validate
from nplace.errors import ConfigError
from nplace.protocol import Grid


class GridError(ValueError):
  """A grid that cannot run (no get_sweep, a bad trial); the message is one line."""


@dataclasses.dataclass
class PlannedTrial:
  """A trial of a grid before it runs (what is filed after it is nplace/studies/results.py's Trial)."""
  name: str  # directory under the sweep's workdir
  overrides: dict  # dotted config key -> value (wins over the command line's)
  config: ml_collections.ConfigDict
  command: str  # `nplace train ...` that runs this trial alone


def load_module(path):
  """The experiment file at `path`, run as a module; GridError when there is none."""
  if not pathlib.Path(path).is_file():
    raise GridError(f"{path}: no such experiment file")
  spec = importlib.util.spec_from_file_location(f"nplace_grid_{pathlib.Path(path).stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # noqa: BLE001 - the user's code: whatever it raised, as one line naming where
    raise GridError(file_error(e, path) or f"{path}: {type(e).__name__}: {e}") from None
  return module


def grid_of(module, where) -> Grid:
  """The grid file's `GRID` (nplace.protocol.Grid); GridError naming `where` when it declares none."""
  found = module.__dict__.get("GRID")
  if not isinstance(found, Grid):
    raise GridError(f"{where}: declares no GRID (nplace.protocol.Grid): no grid to sweep or judge")
  return found


def load_grid(path) -> Grid:
  """The GRID of the grid file at `path`; `experiments/NAME.py` missing here is the installed one,
  as for --config."""
  return grid_of(load_module(experiment_path(str(path))), path)


def load_sweep(config_spec: str) -> list[dict]:
  """The sweep (`GRID.sweep(ARG)`, or with no ARG its default) of the grid file in `FILE[:ARG]`."""
  path, _, arg = config_spec.partition(":")
  found = load_grid(path)
  try:
    trials = found.sweep(arg) if arg else found.sweep()
  except Exception as e:  # a bad ARG, typically: the file's own message, on one line
    raise GridError(f"{config_spec}: get_sweep raised {type(e).__name__}: {e}") from None
  if (not isinstance(trials, (list, tuple)) or not trials
      or not all(isinstance(t, dict) and all(isinstance(k, str) for k in t) for t in trials)):
    raise GridError(f"{config_spec}: get_sweep must return a non-empty list of dicts (dotted key -> value)")
  return trials


def reused_names(config_spec: str) -> dict[str, set[str]]:
  """`FILE:OTHER` -> the names of OTHER's trials, for each variant the grid in `FILE[:ARG]` reuses
  (`GRID.reuses(ARG)`): those trials are theirs to run and file."""
  path, _, arg = config_spec.partition(":")
  found = load_grid(path)
  return {f"{path}:{other}": {trial_name(overrides) for overrides in found.sweep(other)}
          for other in found.reuses(arg)}


def _text(value) -> str:
  return f"{value:g}" if isinstance(value, float) else str(value)


def trial_name(overrides: dict) -> str:
  """`placement=peri,dt=0.1,seed=3`: each key's last part (the full key where two share it)
  and its value; characters a directory name should not hold become `-`."""
  lasts = [key.rsplit(".", 1)[-1] for key in overrides]
  parts = [f"{last if lasts.count(last) == 1 else key}={_text(value)}"
           for key, last, value in zip(overrides, lasts, overrides.values())]
  return re.sub(r"[^A-Za-z0-9_.,=+-]", "-", ",".join(parts)) or "base"


def apply(config: ml_collections.ConfigDict, overrides: dict, where: str) -> ml_collections.ConfigDict:
  """A copy of `config` with dotted-key overrides; GridError naming `where` and the key."""
  config = config.copy_and_resolve_references()
  for key, value in overrides.items():
    *path, last = key.split(".")
    node = config
    for part in path:
      node = node.get(part) if isinstance(node, ml_collections.ConfigDict) else None
    if not isinstance(node, ml_collections.ConfigDict) or last not in node:
      raise GridError(f"{where}: no such config key {key!r}")
    if isinstance(node[last], ml_collections.ConfigDict):
      raise GridError(f"{where}: {key!r} is a section: name its keys, dotted ({key}.KEY)")
    try:
      node[last] = value
    except (TypeError, ValueError) as e:
      raise GridError(f"{where}: {key}={value!r}: {e}") from None
  return config


def _flag(key: str, value) -> str:
  return f"--config.{key}={repr(value) if isinstance(value, float) else value}"  # repr: exact floats


def expand(config_spec: str, base: ml_collections.ConfigDict, cli_overrides: list[str],
           workdir) -> list[PlannedTrial]:
  """Every trial of the grid, validated (GridError or ConfigError naming the trial) before
  any runs. `base` is the config file's config with `cli_overrides` already applied."""
  trials, seen = [], {}
  for i, overrides in enumerate(load_sweep(config_spec)):
    name = trial_name(overrides)
    if name in seen:
      raise GridError(f"{config_spec}: trials {seen[name]} and {i} are both named {name!r}")
    seen[name] = i
    config = apply(base, overrides, f"trial {name}")
    try:
      validate(config)
    except ConfigError as e:
      raise GridError(f"trial {name}: {e}") from None
    flags = [f for f in cli_overrides if f.split("=", 1)[0].removeprefix("--config.") not in overrides]
    flags += [_flag(key, value) for key, value in overrides.items()]
    command = shlex.join(["nplace", "train", "--config", config_spec, "--workdir", str(workdir / name), *flags])
    trials.append(PlannedTrial(name, dict(overrides), config, command))
  return trials
