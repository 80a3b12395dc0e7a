"""Checkpoints: a corrupted newest checkpoint is reported and the previous one is used."""
import logging
import sys
import types

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from nplace.runtime import sharding
from nplace.train import checkpoint
from nplace.errors import ConfigError


def _setup(tmp_path):
  cfg = ml_collections.ConfigDict({"every": 1, "keep": 5, "async_save": True})
  mngr = checkpoint.manager(tmp_path, cfg)
  it = iter(grain.MapDataset.range(100).batch(2).to_iter_dataset())
  return mngr, it, ml_collections.ConfigDict({"note": "test"})


def test_corrupted_newest_checkpoint_falls_back_to_previous(tmp_path, capsys, monkeypatch):
  printed = []  # what reaches Python's own hook, which prints it
  monkeypatch.setattr(sys, "unraisablehook", printed.append)
  monkeypatch.setattr(checkpoint, "_RESTORED_DIRECTORIES", set())
  monkeypatch.setattr(logging.getLogger("asyncio"), "filters", [])
  mngr, it, config = _setup(tmp_path)
  states = {s: {"w": jnp.full((4, 3), float(s)), "step": jnp.asarray(s)} for s in (1, 2)}
  for s in (1, 2):
    next(it)
    checkpoint.save(mngr, s, states[s], it, config)
  mngr.wait_until_finished()
  for f in (tmp_path / "checkpoints/2/state").rglob("*"):
    if f.is_file():
      f.write_bytes(b"garbage")
  mngr = checkpoint.manager(tmp_path, ml_collections.ConfigDict({"every": 1, "keep": 5, "async_save": True}))
  fresh = iter(grain.MapDataset.range(100).batch(2).to_iter_dataset())
  mesh = sharding.make_mesh(ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1}))
  abstract = jax.eval_shape(lambda: states[1])
  restored, step = checkpoint.restore_latest(mngr, abstract, jax.tree.map(lambda _: sharding.replicated(mesh), abstract), fresh)
  assert step == 1 and "checkpoint 2 failed to restore" in capsys.readouterr().err
  np.testing.assert_array_equal(restored["w"], states[1]["w"])
  np.testing.assert_array_equal(next(fresh), [2, 3])  # the iterator resumes after the one batch taken
  # the failed reads' late errors are dropped; any other unraisable error still prints
  late_read = Exception("reading an array index")
  late_read.__cause__ = ValueError(f'OUT_OF_RANGE at local file "{tmp_path}/checkpoints/2/state/"')
  unrelated = ValueError("an unrelated error")
  closed_loop = RuntimeError("Event loop is closed")
  for error in (late_read, closed_loop, unrelated):
    sys.unraisablehook(types.SimpleNamespace(exc_value=error))
  passed = [u.exc_value for u in printed]
  assert unrelated in passed and late_read not in passed and closed_loop not in passed
  # set aside, so that step 2 trained again is saved: orbax skipped a step it still held, and the
  # rerun ended on the broken checkpoint
  assert mngr.all_steps() == [1] and (tmp_path / "checkpoints/2.unrestorable").is_dir()
  assert checkpoint.save(mngr, 2, states[2], None, config)
  mngr.wait_until_finished()
  again, step = checkpoint.restore_latest(mngr, abstract, jax.tree.map(lambda _: sharding.replicated(mesh), abstract))
  assert step == 2
  np.testing.assert_array_equal(again["w"], states[2]["w"])
  assert not logging.getLogger("asyncio").filter(logging.LogRecord(
      "asyncio", logging.ERROR, "", 0, "Task exception was never retrieved", (), (Exception, late_read, None)))


def test_no_checkpoint_means_fresh_start(tmp_path):
  mngr, it, _ = _setup(tmp_path)
  assert checkpoint.restore_latest(mngr, {}, {}, it) == (None, 0)


def test_checkpoint_without_data_restores_and_leaves_the_iterator_at_its_start(tmp_path):
  mngr, it, config = _setup(tmp_path)
  state = {"w": jnp.ones((2,))}
  checkpoint.save(mngr, 0, state, None, config, force=True)
  mngr.wait_until_finished()
  mesh = sharding.make_mesh(ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1}))
  abstract = jax.eval_shape(lambda: state)
  restored, step = checkpoint.restore_latest(mngr, abstract, {"w": sharding.replicated(mesh)}, it)
  assert step == 0
  np.testing.assert_array_equal(restored["w"], state["w"])
  np.testing.assert_array_equal(next(it), [0, 1])


def test_restoring_under_another_model_config_names_the_key(tmp_path, make_config):
  mngr, it, _ = _setup(tmp_path)
  saved = make_config()
  checkpoint.save(mngr, 1, {"w": jnp.ones((2,))}, it, saved)
  mngr.wait_until_finished()
  free = make_config(remat="full", dtype="bfloat16", scan_unroll=2).model  # FREE_MODEL_KEYS only
  checkpoint.check_model(checkpoint.saved_config(mngr, 1), free, 1)
  with pytest.raises(ConfigError, match=r"model.norm_eps=1e-06: the checkpoint at step 1 holds .*norm_eps=1e-05"):
    checkpoint.check_model(checkpoint.saved_config(mngr, 1), make_config(norm_eps=1e-6).model, 1)
  with pytest.raises(ConfigError, match="model.n_layer"):
    checkpoint.restore_latest(mngr, {}, {}, model_config=make_config(n_layer=3).model)


def test_a_checkpoint_of_another_process_count_is_refused_and_kept(tmp_path):
  """Its data positions are per process: read as a broken checkpoint, each of the run's
  checkpoints was set aside and the run trained from step 0 (2 processes, resumed by 1)."""
  mngr, it, config = _setup(tmp_path)
  state = {"w": jnp.ones((2,))}
  checkpoint.save(mngr, 1, state, it, config)
  mngr.wait_until_finished()
  data = tmp_path / "checkpoints/1/data"
  position = (data / "process_0-of-1.json").read_text()
  (data / "process_0-of-1.json").unlink()
  for i in range(2):  # as two processes save it
    (data / f"process_{i}-of-2.json").write_text(position)
  mesh = sharding.make_mesh(ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1}))
  abstract = jax.eval_shape(lambda: state)
  with pytest.raises(ConfigError, match=r"^config error: distributed.num_processes=1: checkpoint 1 under .* "
                                        r"was saved by 2 processes .*: resume it with as many$"):
    checkpoint.restore_latest(mngr, abstract, {"w": sharding.replicated(mesh)}, it)
  assert mngr.all_steps() == [1] and not (tmp_path / "checkpoints/1.unrestorable").exists()
