"""Orbax checkpoints of a run: train state, grain iterator state and config.

Layout: WORKDIR/checkpoints/<step>/{state,data,config}. Saving is async; restoring
walks back from the newest step past any checkpoint that fails to load.
"""
import pathlib
import sys

import grain
import jax
import orbax.checkpoint as ocp

from nplace import config as config_lib
from nplace import train_state


def manager(workdir, checkpoint_config) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=checkpoint_config.keep,
      save_interval_steps=checkpoint_config.every,
      enable_async_checkpointing=checkpoint_config.async_save,
      create=True)
  return ocp.CheckpointManager(pathlib.Path(workdir).absolute() / "checkpoints", options=options)


def save(mngr: ocp.CheckpointManager, step: int, state, data_iterator, config, force=False) -> bool:
  """Saves when `step` is on the interval (or `force`); returns whether it did."""
  return mngr.save(step, force=force, args=ocp.args.Composite(
      state=ocp.args.StandardSave(state),
      data=grain.checkpoint.CheckpointSave(data_iterator),
      config=ocp.args.JsonSave(config.to_dict())))


def _with_shardings(abstract_state, shardings):
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      abstract_state, shardings)


def restore_latest(mngr: ocp.CheckpointManager, abstract_state, shardings, data_iterator=None):
  """(state, step) from the newest checkpoint that restores, or (None, 0) when none does.

  `data_iterator`, when given, is set to the saved iterator position in place.
  """
  target = _with_shardings(abstract_state, shardings)
  for step in sorted(mngr.all_steps(), reverse=True):
    items = {"state": ocp.args.StandardRestore(target)}
    if data_iterator is not None:
      items["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
    try:
      restored = mngr.restore(step, args=ocp.args.Composite(**items))
    except Exception as e:  # a partial or corrupted checkpoint: report it, fall back to the previous one
      reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
      print(f"warning: checkpoint {step} failed to restore ({type(e).__name__}: {reason}); "
            "trying an older one", file=sys.stderr, flush=True)
      continue
    return restored["state"], step
  return None, 0


def _checked_step(mngr, workdir, step):
  steps = mngr.all_steps()
  if not steps:
    raise FileNotFoundError(f"no checkpoints under {pathlib.Path(workdir) / 'checkpoints'}")
  if step is not None and step not in steps:
    raise FileNotFoundError(f"no checkpoint for step {step} under {workdir} (have {sorted(steps)})")
  return max(steps) if step is None else step


def restore_config(workdir, step=None):
  """The config a training checkpoint was saved with (the newest, or `step`'s)."""
  mngr = manager(workdir, config_lib.base_config().checkpoint)
  step = _checked_step(mngr, workdir, step)
  saved = mngr.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))["config"]
  return config_lib.from_saved(saved)


def restore_params(config, workdir, step=None):
  """(params, step) of a training checkpoint, on the default device; for `nplace probe` and
  `nplace eval`."""
  mngr = manager(workdir, config.checkpoint)
  step = _checked_step(mngr, workdir, step)
  abstract = train_state.abstract(config)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = _with_shardings(abstract, jax.tree.map(lambda _: device, abstract))
  restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))
  return restored["state"]["params"], step
