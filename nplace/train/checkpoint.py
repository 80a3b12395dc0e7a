"""Orbax checkpoints of a run: train state, grain iterator state and config.

Layout: WORKDIR/checkpoints/<step>/{state,data,config}. Saving is async; restoring
walks back from the newest step past any checkpoint that fails to load. A checkpoint
without `data` (`nplace convert --from-hf` writes one) starts the data from its beginning.
Restoring under a model config other than the one saved is a ConfigError naming the key.
"""
import logging
import sys

import grain
import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from nplace.config import base_config, from_saved
from nplace.errors import ConfigError, DataError
from nplace.runtime import workdirs
from nplace.train import state as train_state

# Model keys that may change between save and restore: they do not change the function.
FREE_MODEL_KEYS = ("init", "init_std", "attn_out_scale", "remat", "dtype", "matmul_precision", "attention_impl",
                   "loss_chunks", "head_loss", "head_vocab_multiple", "scan_unroll", "qkv_projection")


ITEMS = {  # a checkpoint's items -> their orbax args and handler
    "state": (ocp.args.StandardSave, ocp.args.StandardRestore, ocp.StandardCheckpointHandler),
    "config": (ocp.args.JsonSave, ocp.args.JsonRestore, ocp.JsonCheckpointHandler),
    "data": (grain.checkpoint.CheckpointSave, grain.checkpoint.CheckpointRestore, grain.checkpoint.CheckpointHandler),
}


def manager(workdir, checkpoint_config) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=checkpoint_config.keep,
      save_interval_steps=checkpoint_config.every,
      enable_async_checkpointing=checkpoint_config.async_save,
      create=True)
  # Every item's handler named up front: reading one item (the config) then finds the others
  # known, where orbax would otherwise warn about each of them on every resume.
  registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
  for item, (save_args, restore_args, handler) in ITEMS.items():
    for args in (save_args, restore_args):
      registry.add(item, args, handler)
  return ocp.CheckpointManager(workdirs.resolve(workdir) / "checkpoints", options=options,
                               handler_registry=registry)


def held_steps(workdir) -> set[int]:
  """The steps a run's finalized checkpoints hold, read without opening a manager."""
  directory = workdirs.resolve(workdir) / "checkpoints"
  return set(ocp.utils.checkpoint_steps(directory)) if directory.exists() else set()


def no_common_step(held: list[set[int]]) -> bool:
  """Runs holding these steps cannot resume together: some hold checkpoints, at no step all hold."""
  return any(held) and not set.intersection(*held)


def save(mngr: ocp.CheckpointManager, step: int, state, data_iterator, config, force=False) -> bool:
  """Saves when `step` is on the interval (or `force`); returns whether it did.
  `data_iterator` None saves no data position."""
  items = {"state": ocp.args.StandardSave(state), "config": ocp.args.JsonSave(config.to_dict())}
  if data_iterator is not None:
    items["data"] = grain.checkpoint.CheckpointSave(data_iterator)
  return mngr.save(step, force=force, args=ocp.args.Composite(**items))


def saved_config(mngr: ocp.CheckpointManager, step: int) -> dict:
  """The config (as a dict) a checkpoint was saved with."""
  return mngr.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))["config"]


def _config_or_data_error(mngr: ocp.CheckpointManager, step: int) -> dict:
  """saved_config, or a DataError in a line where it does not read (a truncated or emptied file)."""
  try:
    return saved_config(mngr, step)
  except Exception as e:
    raise _unreadable(mngr, step, "its config", e) from None


def check_model(saved: dict, model_config, step: int) -> None:
  """ConfigError unless `model_config` describes the model a checkpoint saved with `saved` holds."""
  for key, value in saved["model"].items():
    if key not in FREE_MODEL_KEYS and key in model_config and model_config[key] != value:
      raise ConfigError(f"model.{key}", model_config[key],
                        f"the checkpoint at step {step} holds a model with {key}={value!r}")


def _with_shardings(abstract_state, shardings):
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      abstract_state, shardings)


def restore_latest(mngr: ocp.CheckpointManager, abstract_state, shardings, data_iterator=None,
                   model_config=None):
  """(state, step) from the newest checkpoint that restores, or (None, 0) when none does.

  `data_iterator`, when given, is set to the saved iterator position in place (if the
  checkpoint holds one). `model_config`, when given, must match the saved model's.
  """
  states, step = restore_together([mngr], abstract_state, shardings, [data_iterator], [model_config])
  return (states[0] if states else None), step


def restore_together(mngrs, abstract_state, shardings, data_iterators, model_configs):
  """([state per manager], step) at the newest step every manager holds a checkpoint of and all
  restore (a cell's runs resume together); ([], 0) when there is none. A ConfigError when some
  hold checkpoints but they share no step (runs started in other cells)."""
  target = _with_shardings(abstract_state, shardings)
  held = [set(mngr.all_steps()) for mngr in mngrs]
  common = set.intersection(*held)
  if no_common_step(held):
    raise ConfigError("checkpoint", {str(m.directory): sorted(h) for m, h in zip(mngrs, held)},
                      "these runs hold checkpoints at no common step: resume them as they were started "
                      "(the same --batch)")
  broken = []  # (manager, step) of the checkpoints that did not restore
  for step in sorted(common, reverse=True):
    states = []
    for mngr, it, model_config in zip(mngrs, data_iterators, model_configs):
      try:
        states.append(_restore(mngr, step, target, it, model_config))
      except ConfigError:
        raise
      except Exception as e:  # a partial or corrupted checkpoint: report it, fall back to the previous one
        print(f"warning: checkpoint {step} failed to restore ({why_not(e)}); trying an older one",
              file=sys.stderr, flush=True)
        broken.append((mngr, step))
        break
    else:
      _set_aside(broken)
      return states, step
  _set_aside(broken)
  return [], 0


def _set_aside(broken) -> None:
  """Renames each checkpoint that did not restore to `<step>.unrestorable` (orbax lists it no more):
  the run trains that step again, and its save there would otherwise be skipped as already held,
  leaving the broken one the run's newest at its end."""
  if jax.process_index() == 0:
    for mngr, step in broken:
      aside, n = mngr.directory / f"{step}.unrestorable", 1
      while aside.exists():
        aside, n = mngr.directory / f"{step}.unrestorable.{n}", n + 1
      (mngr.directory / str(step)).rename(aside)
      print(f"warning: set the checkpoint that did not restore aside, as {aside}", file=sys.stderr, flush=True)
  if broken and jax.process_count() > 1:
    multihost_utils.sync_global_devices("nplace: unrestorable checkpoints set aside")
  for mngr in {id(m): m for m, _ in broken}.values():
    mngr.reload()

_RESTORED_DIRECTORIES: set[str] = set()  # checkpoint directories this process restores from


def _quiet_echoes_of_reads(directory) -> None:
  """A restore that fails leaves orbax's other reads of the checkpoint in flight. They end after
  the restore has raised, on its closed event loop or with nobody to retrieve their error, and
  Python prints each: thousands of lines beside the one line that reports the failure. Drop
  those echoes (errors naming a directory restored from, or the closed loop); pass anything else."""
  if not _RESTORED_DIRECTORIES:
    previous = sys.unraisablehook

    def unraisablehook(unraisable):
      if not _is_echo(unraisable.exc_value):
        previous(unraisable)

    sys.unraisablehook = unraisablehook
    logging.getLogger("asyncio").addFilter(lambda record: not (record.exc_info and _is_echo(record.exc_info[1])))
  _RESTORED_DIRECTORIES.add(str(directory))


def _is_echo(error) -> bool:
  if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
    return True
  while error is not None:
    if any(directory in str(error) for directory in _RESTORED_DIRECTORIES):
      return True
    error = error.__cause__ or error.__context__
  return False


def why_not(error: Exception) -> str:
  """Why a checkpoint did not restore, in a line: the innermost cause's first line, where
  tensorstore names the file it could not read (the outer errors name an array index)."""
  while error.__cause__ is not None:
    error = error.__cause__
  text = str(error).strip()
  return f"{type(error).__name__}: {text.splitlines()[0][:300]}" if text else type(error).__name__


def _check_data_processes(mngr, step) -> None:
  """ConfigError unless checkpoint `step` holds this process's data position: grain saves one per
  process (`process_<i>-of-<n>.json`), so a run saved by n processes resumes only with n. Read
  as a broken checkpoint, every checkpoint of the run was set aside and it trained from step 0."""
  data, n = mngr.directory / str(step) / "data", jax.process_count()
  if not data.is_dir() or (data / f"process_{jax.process_index()}-of-{n}.json").exists():
    return
  saved = sorted({name.partition("-of-")[2].removesuffix(".json") for name in (p.name for p in data.iterdir())
                  if name.startswith("process_") and name.endswith(".json")})
  if saved:
    raise ConfigError("distributed.num_processes", n, f"checkpoint {step} under {mngr.directory} was saved by "
                      f"{' or '.join(saved)} processes (each saved its own data position): resume it with as many")


def _restore(mngr, step, target, data_iterator, model_config):
  """The state of checkpoint `step`; the data iterator set in place (when it holds one)."""
  _quiet_echoes_of_reads(mngr.directory)
  items = {"state": ocp.args.StandardRestore(target)}
  if model_config is not None:
    check_model(saved_config(mngr, step), model_config, step)
  if data_iterator is not None and "data" in mngr.metadata(step).item_handlers:
    _check_data_processes(mngr, step)
    items["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
  return mngr.restore(step, args=ocp.args.Composite(**items))["state"]


def _open(workdir, checkpoint_config, step=None):
  """(manager, step): `step`, or the newest; FileNotFoundError when there is no such checkpoint."""
  directory = workdirs.resolve(workdir) / "checkpoints"
  mngr = manager(workdir, checkpoint_config) if directory.is_dir() else None
  steps = mngr.all_steps() if mngr else []
  if not steps:
    raise FileNotFoundError(f"no checkpoints under {directory}")
  if step is not None and step not in steps:
    raise FileNotFoundError(f"no checkpoint for step {step} under {workdir} (have {sorted(steps)})")
  return mngr, max(steps) if step is None else step


def check_newest_model(workdir, model_config) -> None:
  """check_model against the newest checkpoint under `workdir`, where there is one."""
  try:
    mngr, step = _open(workdir, base_config().checkpoint)
  except FileNotFoundError:
    return
  check_model(_config_or_data_error(mngr, step), model_config, step)


def read_config(workdir, step=None):
  """(config, step): the config checkpoint `step` (default: the newest) was saved with."""
  saved, step = read_saved_config(workdir, step)
  return from_saved(saved), step


def read_saved_config(workdir, step=None):
  """(dict, step): that config as saved, without the keys added to nplace since."""
  mngr, step = _open(workdir, base_config().checkpoint, step)
  return _config_or_data_error(mngr, step), step


def restore_params(config, workdir, step=None):
  """(params, step) of a training checkpoint, on the default device; for `nplace probe` and
  `nplace eval`."""
  mngr, step = _open(workdir, config.checkpoint, step)
  abstract = train_state.abstract(config)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = _with_shardings(abstract, jax.tree.map(lambda _: device, abstract))
  check_model(_config_or_data_error(mngr, step), config.model, step)
  try:
    state = _restore(mngr, step, target, None, None)
  except Exception as e:  # a truncated or corrupted file
    raise _unreadable(mngr, step, "its state", e) from None
  return state["params"], step


def _unreadable(mngr, step, what, error) -> DataError:
  """Which checkpoint did not restore and why, in a line, and where else to look."""
  older = sorted(s for s in mngr.all_steps() if s < step)
  return DataError(f"checkpoint {step} under {mngr.directory}: {what} does not restore ({why_not(error)})"
                   + (f"; an older one: --step {older[-1]}" if older else ""))
