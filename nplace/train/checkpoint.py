"""Orbax checkpoints of a run: train state, grain iterator state and config.

Layout: WORKDIR/checkpoints/<step>/{state,data,config}. Saving is async; restoring
walks back from the newest step past any checkpoint that fails to load. A checkpoint
without `data` (`nplace convert --from-hf` writes one) starts the data from its beginning.
Restoring under a model config other than the one saved is a ConfigError naming the key.
"""
import sys

import grain
import jax
import orbax.checkpoint as ocp

from nplace.config import base_config, from_saved
from nplace.errors import ConfigError
from nplace.runtime import workdirs
from nplace.train import state as train_state

# Model keys that may change between save and restore: they do not change the function.
FREE_MODEL_KEYS = ("init", "init_std", "remat", "dtype", "attention_impl", "loss_chunks",
                   "head_vocab_multiple")


def manager(workdir, checkpoint_config) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=checkpoint_config.keep,
      save_interval_steps=checkpoint_config.every,
      enable_async_checkpointing=checkpoint_config.async_save,
      create=True)
  return ocp.CheckpointManager(workdirs.resolve(workdir) / "checkpoints", options=options)


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
  target = _with_shardings(abstract_state, shardings)
  for step in sorted(mngr.all_steps(), reverse=True):
    items = {"state": ocp.args.StandardRestore(target)}
    try:
      if model_config is not None:
        check_model(saved_config(mngr, step), model_config, step)
      if data_iterator is not None and "data" in mngr.metadata(step).item_handlers:
        items["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
      restored = mngr.restore(step, args=ocp.args.Composite(**items))
    except ConfigError:
      raise
    except Exception as e:  # a partial or corrupted checkpoint: report it, fall back to the previous one
      reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
      print(f"warning: checkpoint {step} failed to restore ({type(e).__name__}: {reason}); "
            "trying an older one", file=sys.stderr, flush=True)
      continue
    return restored["state"], step
  return None, 0


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


def read_config(workdir, step=None):
  """(config, step): the config checkpoint `step` (default: the newest) was saved with."""
  mngr, step = _open(workdir, base_config().checkpoint, step)
  return from_saved(saved_config(mngr, step)), step


def restore_params(config, workdir, step=None):
  """(params, step) of a training checkpoint, on the default device; for `nplace probe` and
  `nplace eval`."""
  mngr, step = _open(workdir, config.checkpoint, step)
  abstract = train_state.abstract(config)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = _with_shardings(abstract, jax.tree.map(lambda _: device, abstract))
  check_model(saved_config(mngr, step), config.model, step)
  restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))
  return restored["state"]["params"], step
