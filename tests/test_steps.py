"""The jitted train step: sharding-invariance, gradient accumulation, the non-finite guard, a
cell's inactive runs (the fast ones on a stand-in bigram model); the eval step's losses."""
import functools
import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import tiny_config, xla_flags
from nplace.config import ModelConfig, OptimConfig
from nplace.runtime import sharding
from nplace.train import optim, state as train_state, steps

TESTS = pathlib.Path(__file__).resolve().parent


@pytest.mark.slow
def test_meshes_give_the_losses_of_one_device():
  env = dict(os.environ, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=8"), PYTHONPATH=str(TESTS))
  meshes = ["1,1,1", "8,1,1", "2,4,1", "2,2,2"]
  done = subprocess.run([sys.executable, TESTS / "mesh_losses.py", *meshes], env=env,
                        capture_output=True, text=True, check=True)
  losses = json.loads(done.stdout.strip().splitlines()[-1])
  for mesh in meshes[1:]:
    np.testing.assert_allclose(losses[mesh], losses["1,1,1"], rtol=1e-5, err_msg=mesh)
  assert losses["1,1,1"][2] < losses["1,1,1"][0]


def _one_device_steps(c):
  mesh = sharding.make_mesh(c.mesh)
  shardings = train_state.shardings(c, mesh)
  step, _ = steps.compile_steps(c, mesh, shardings)
  return train_state.init(c, shardings), step


@pytest.mark.slow
def test_grad_accumulation_equals_one_big_batch():
  results = {}
  for k in (1, 4):
    c = tiny_config()
    c.train.batch_size, c.train.grad_accum, c.optim.warmup_steps = 8, k, 0
    c.optim.eps = 1.0  # Adam's first step is ~sign(g) otherwise, amplifying float noise where g ~ 0
    state, step = _one_device_steps(c)
    batch = jax.random.randint(jax.random.key(0), (8, c.data.seq_len + 1), 0, c.model.vocab_size)
    state, m = step(state, batch)
    results[k] = (m, state["params"])
  np.testing.assert_allclose(results[4][0]["loss"], results[1][0]["loss"], rtol=1e-6)
  np.testing.assert_allclose(results[4][0]["grad_norm"], results[1][0]["grad_norm"], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(results[4][1]), jax.tree.leaves(results[1][1])):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


@pytest.mark.slow
def test_non_finite_step_leaves_params_and_optimizer_state():
  """Either guard (train.update_guard): a finite step updates, a non-finite one keeps the params
  and optimizer state; the two guards' states are the same bits. The conditional one does it
  without the copies of the donated state that the select makes XLA insert."""
  after_both = {}
  for guard in ("select", "cond"):
    c = tiny_config()
    c.train.batch_size, c.optim.warmup_steps, c.train.update_guard = 4, 0, guard
    state, step = _one_device_steps(c)
    batch = jax.random.randint(jax.random.key(0), (4, c.data.seq_len + 1), 0, c.model.vocab_size)
    state, _ = step(state, batch)
    before = jax.tree.map(np.array, jax.device_get(state))
    poisoned = dict(state, params=jax.tree.map(lambda p: p, state["params"]))
    poisoned["params"]["wte"]["embedding"] = poisoned["params"]["wte"]["embedding"].at[0, 0].set(jnp.nan)
    batch = batch.at[:, 0].set(0)  # every sequence reads the poisoned row
    before["params"]["wte"]["embedding"][0, 0] = np.nan
    after, m = step(poisoned, batch)
    assert not bool(m["finite"]) and int(after["step"]) == 2
    for a, b in zip(jax.tree.leaves(after["opt_state"]), jax.tree.leaves(before["opt_state"])):
      np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(after["params"]["blocks"]["attn"]["q"]["kernel"],
                                  before["params"]["blocks"]["attn"]["q"]["kernel"])
    after_both[guard] = before, jax.device_get(after)
    abstract = (train_state.abstract(c), jax.ShapeDtypeStruct(batch.shape, batch.dtype))
    hlo = jax.jit(steps.make_train_step(c), donate_argnums=0).lower(*abstract).compile().as_text()
    copied = re.findall(r"copy\(%?state\S*opt_state", hlo)  # the donated moments, copied before the update
    assert bool(copied) == (guard == "select"), (guard, len(copied))
  jax.tree.map(np.testing.assert_array_equal, after_both["cond"], after_both["select"])


# Study A's cpu grid's train step on fixed batches: the same bits at 56b0cfa (protocols 2 and 3's
# code) and after issue 58's model changes (a5f1644). Every change to the step must leave the study
# configs' losses and gradients bit-equal (filed trials are rerun and extended), or be an option off
# by default. At the suite's -O0.
STUDY_STEPS = {  # placement -> (loss, gradient norm) of 3 steps, as float.hex
    "pre": (["0x1.8faf000000000p+2", "0x1.8e1d900000000p+2", "0x1.893c1a0000000p+2"],
            ["0x1.db694e0000000p-1", "0x1.7b8ac40000000p-1", "0x1.6442360000000p-2"]),
    "peri": (["0x1.8fa7000000000p+2", "0x1.8f9df60000000p+2", "0x1.8aaf400000000p+2"],
             ["0x1.32e59c0000000p+2", "0x1.54568a0000000p+2", "0x1.e246540000000p-2"]),
}


@pytest.mark.slow
def test_the_study_configs_train_step_is_bit_equal_to_the_filed_trials_step():
  from nplace.config import experiment
  found = {}
  for placement in STUDY_STEPS:
    c = experiment("stability", "cpu")
    c.model.update(n_layer=6, d_model=32, placement=placement, embed_norm=placement == "peri")
    c.optim.lr = 0.1
    state, step = _one_device_steps(c)
    batches = jax.random.randint(jax.random.key(7), (3, c.train.batch_size, c.data.seq_len + 1), 0, 256)
    losses, norms = [], []
    for batch in batches:
      state, metrics = step(state, batch)
      losses.append(float(metrics["loss"]).hex()), norms.append(float(metrics["grad_norm"]).hex())
    found[placement] = (losses, norms)
  assert found == STUDY_STEPS


@pytest.mark.slow
def test_a_cell_traces_lr_weight_decay_and_eps_with_the_bits_of_constants():
  """A study cell varying only lr (as the grids' cells do) takes weight decay and eps as arguments
  too (steps.ALWAYS_TRACED: one program for a grid's cells of one shape and placement); its state
  after 3 steps has the bits of the same cell with them as constants. Pre-LN and Peri-LN at dt 1
  and Peri-LN at dt 0.1 (a constant dt beside the traced values), at the suite's -O0."""
  from nplace.config import experiment
  from nplace.train import cell as cell_lib
  for placement, dt in (("pre", 1.0), ("peri", 1.0), ("peri", 0.1)):
    c = experiment("stability", "cpu")
    c.model.update(n_layer=6, d_model=32, placement=placement, embed_norm=placement == "peri", dt=dt)
    configs = [c.copy_and_resolve_references() for _ in range(2)]
    configs[1].optim.lr, configs[1].seed = 10 ** -0.5, 1
    assert cell_lib.varying(configs) == ("optim.lr",)
    assert cell_lib.traced(cell_lib.varying(configs)) == ("optim.lr", "optim.weight_decay", "optim.eps")
    mesh = sharding.make_mesh(c.mesh, trials=2)
    shardings = train_state.shardings(c, mesh, 2)
    batches = jax.random.randint(jax.random.key(7), (3, 2, c.train.batch_size, c.data.seq_len + 1), 0, 256)
    found = []
    for keys in (cell_lib.varying(configs), cell_lib.traced(cell_lib.varying(configs))):
      step, _ = steps.compile_steps(c, mesh, shardings, keys)
      hyper = {key: jnp.asarray([cell_lib.value(x, key) for x in configs], jnp.float32) for key in keys}
      state, out = train_state.init(c, shardings, [0, 1]), []
      for batch in batches:
        state, metrics = step(state, batch, hyper, jnp.ones(2, bool))
        out.append(np.asarray(metrics["loss"]))
      found.append([*out, *map(np.asarray, jax.tree.leaves(state))])
    for constant, argument in zip(*found):
      np.testing.assert_array_equal(argument, constant, err_msg=f"{placement} dt {dt}")


LEVERS = {"model": dict(remat="full", loss_chunks=3, head_loss="one_hot", qkv_projection="fused", scan_unroll=2,
                        attention_impl="xla"),
          "train": dict(grad_accum=2, update_guard="cond")}


@pytest.mark.slow
def test_a_cell_with_the_levers_on_steps_each_run_as_the_plain_step_alone():
  """A cell of two runs apart in lr and dt (traced: dt reaches the scanned, rematerialised blocks),
  with every speed and memory lever on, takes each run's two steps as its lone run with none of
  them: the same losses and parameters to float32 rounding (Peri-LN with the embedding norm)."""
  from nplace.train import cell as cell_lib
  c = tiny_config(placement="peri", embed_norm=True)
  c.train.update(batch_size=4, steps=10)
  c.optim.update(warmup_steps=0, eps=1e-3)
  runs = [c.copy_and_resolve_references() for _ in range(2)]
  runs[1].optim.lr, runs[1].model.dt = 3e-3, 0.5
  states = [train_state.start_from(r, steps.decoder.init(ModelConfig.of(r.model), jax.random.key(i)))
            for i, r in enumerate(runs)]
  batches = jax.random.randint(jax.random.key(8), (2, 2, 4, c.data.seq_len + 1), 0, c.model.vocab_size)
  levered = c.copy_and_resolve_references()
  for section, keys in LEVERS.items():
    levered[section].update(keys)
  varying = ("optim.lr", "model.dt")
  assert cell_lib.varying(runs) == varying
  hyper = {key: jnp.asarray([cell_lib.value(r, key) for r in runs], jnp.float32) for key in varying}
  cell_step, cell = jax.jit(steps.make_cell_step(levered, varying)), jax.tree.map(lambda *x: jnp.stack(x), *states)
  cell_metrics = []
  for batch in batches:
    cell, m = cell_step(cell, batch, hyper, jnp.ones(2, bool))
    cell_metrics.append((m["loss"], m["grad_norm"]))
  for i, (run, state) in enumerate(zip(runs, states)):
    step = jax.jit(steps.make_train_step(run))
    for j, batch in enumerate(batches):
      state, m = step(state, batch[i])
      np.testing.assert_allclose([x[i] for x in cell_metrics[j]], [m["loss"], m["grad_norm"]], rtol=1e-5,
                                 err_msg=f"run {i} step {j + 1}: loss, gradient norm")
    for a, b in zip(jax.tree.leaves(cell["params"]), jax.tree.leaves(state["params"])):
      np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-7, err_msg=f"run {i}")


V = 8  # the stand-in model's vocabulary


def bigram_loss(cfg, params, batch_BT1, dt=None):
  """decoder.loss's stand-in in the fast tests: a bigram model's mean cross-entropy (nonlinear in
  its params, compiled in a blink). `gate` reaches the loss as 0 * sqrt(gate): at gate 0 the loss
  stays finite and its gradient is NaN, the case a guard on the loss alone would miss."""
  fc = params["blocks"]["fc"]
  logits_BTV = fc["kernel"][batch_BT1[:, :-1]] + fc["bias"]
  ce = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, batch_BT1[:, 1:]).mean()
  return ce + 0.0 * jnp.sqrt(params["gate"]["scale"]).sum()


def bigram_run(monkeypatch, grad_accum=1, guard="select", clip_norm=1.0):
  """(config, a fresh state, 8 sequences) of the stand-in model, under a 4-step warmup (its
  gradient norm ~0.2: clipped only below that)."""
  monkeypatch.setattr(steps.decoder, "loss", bigram_loss)
  c = tiny_config()
  c.train.update(batch_size=8, grad_accum=grad_accum, steps=10, update_guard=guard)
  c.optim.update(lr=0.1, warmup_steps=4, eps=1e-3, weight_decay=0.1, clip_norm=clip_norm)
  rng = np.random.default_rng(0)
  params = {"blocks": {"fc": {"kernel": jnp.asarray(rng.normal(size=(V, V)), jnp.float32),
                              "bias": jnp.zeros(V)}},
            "gate": {"scale": jnp.ones(())}}
  tx = optim.make(OptimConfig.of(c.optim), c.train.steps)
  state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params)}
  batch_BT1 = jnp.asarray(rng.integers(V, size=(8, c.data.seq_len + 1)), jnp.int32)
  return c, state, batch_BT1


def reference_step(c, state, batch_BT1):
  """One step on the whole batch, by optax directly: (loss, gradient norm, new params). Jitted:
  optax op by op takes seconds to dispatch."""
  tx = optim.make(OptimConfig.of(c.optim), c.train.steps)

  def step(state, batch_BT1):
    loss, grads = jax.value_and_grad(functools.partial(bigram_loss, None))(state["params"], batch_BT1)
    updates, _ = tx.update(grads, state["opt_state"], state["params"])
    return loss, optax.tree.norm(grads), optax.apply_updates(state["params"], updates)

  return jax.jit(step)(state, batch_BT1)


@pytest.mark.parametrize("grad_accum,clip_norm", [(1, 1.0), (4, 1.0), (4, 0.05)])
def test_a_step_is_the_mean_loss_and_gradient_of_its_batch_and_one_adamw_update(monkeypatch, grad_accum, clip_norm):
  """Microbatches' losses and gradients are averaged, not summed (a sum is Adam-invariant but
  for eps and clipping, and k times the logged loss and gradient norm), then clipped as one
  batch's; the logged lr is the one the update used, lr/warmup at the first step."""
  c, state, batch_BT1 = bigram_run(monkeypatch, grad_accum, clip_norm=clip_norm)
  after, m = jax.jit(steps.make_train_step(c))(state, batch_BT1)
  loss, grad_norm, params = reference_step(c, state, batch_BT1)
  np.testing.assert_allclose(m["loss"], loss, rtol=1e-6)
  np.testing.assert_allclose(m["grad_norm"], grad_norm, rtol=1e-5)
  np.testing.assert_allclose(m["lr"], 0.1 / 4, rtol=1e-6)
  assert bool(m["finite"]) and int(after["step"]) == 1
  for a, b in zip(jax.tree.leaves(after["params"]), jax.tree.leaves(params)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("guard", ["select", "cond"])
def test_a_finite_loss_with_a_non_finite_gradient_is_not_applied(monkeypatch, guard):
  """An overflow in the backward alone (the loss finite) must still leave the state as it was."""
  c, state, batch_BT1 = bigram_run(monkeypatch, guard=guard)
  state["params"]["gate"]["scale"] = jnp.zeros(())
  after, m = jax.jit(steps.make_train_step(c))(state, batch_BT1)
  assert np.isfinite(m["loss"]) and not np.isfinite(m["grad_norm"]) and not bool(m["finite"])
  jax.tree.map(np.testing.assert_array_equal, {k: after[k] for k in ("params", "opt_state")},
               {k: state[k] for k in ("params", "opt_state")})
  assert int(after["step"]) == 1


@pytest.mark.parametrize("guard", ["select", "cond"])
def test_one_non_finite_microbatch_drops_the_whole_step(monkeypatch, guard):
  """With train.grad_accum=4, a NaN in one microbatch alone (row 0's tokens read a NaN row of the
  table; the other microbatches' are finite) makes the step's mean loss and gradient non-finite:
  the step is dropped whole, as a non-finite step is, not taken on the finite microbatches."""
  c, state, batch_BT1 = bigram_run(monkeypatch, grad_accum=4, guard=guard)
  kernel = state["params"]["blocks"]["fc"]["kernel"]
  state["params"]["blocks"]["fc"]["kernel"] = kernel.at[V - 1].set(jnp.nan)
  batch_BT1 = jnp.where(batch_BT1 == V - 1, 0, batch_BT1).at[0, 0].set(V - 1)  # microbatch 0 = rows 0, 4
  after, m = jax.jit(steps.make_train_step(c))(state, batch_BT1)
  finite = [bool(jnp.isfinite(bigram_loss(None, state["params"], batch_BT1[j::4]))) for j in range(4)]
  assert finite == [False, True, True, True] and not bool(m["finite"]) and int(after["step"]) == 1
  jax.tree.map(np.testing.assert_array_equal, {k: after[k] for k in ("params", "opt_state")},
               {k: state[k] for k in ("params", "opt_state")})


def test_a_cells_inactive_run_keeps_its_state_while_the_active_one_steps(monkeypatch):
  """A run that diverged (train.on_divergence=stop) is still stepped with its cell, inactive: its
  later steps may be finite, and must not move its params or optimizer state."""
  c, state, batch_BT1 = bigram_run(monkeypatch)
  stack = lambda *xs: jax.tree.map(lambda *x: jnp.stack(x), *xs)
  cell_step = jax.jit(steps.make_cell_step(c, ()))
  after, m = cell_step(stack(state, state), stack(batch_BT1, batch_BT1), {}, jnp.array([True, False]))
  _, _, params = reference_step(c, state, batch_BT1)
  for a, b in zip(jax.tree.leaves(after["params"]), jax.tree.leaves(params)):
    np.testing.assert_allclose(a[0], b, rtol=1e-5, atol=1e-7)
  for a, b in zip(jax.tree.leaves({k: after[k] for k in ("params", "opt_state")}),
                  jax.tree.leaves({k: state[k] for k in ("params", "opt_state")})):
    np.testing.assert_array_equal(a[1], b)
  np.testing.assert_array_equal(m["finite"], [True, True])  # inactive is not non-finite


def test_eval_losses_are_each_sequences_token_mean_cross_entropy():
  """loss_JB is per sequence (perplexity averages exp over it), against numpy's log-softmax."""
  c = tiny_config()
  c.eval.generate = 0
  rng = np.random.default_rng(1)
  table_VV = rng.normal(size=(V, V)).astype(np.float32)
  forward = lambda params, tokens_BT, dt: jnp.asarray(table_VV)[tokens_BT]
  batches_JBT1 = rng.integers(V, size=(2, 3, c.data.seq_len + 1)).astype(np.int32)
  out = jax.jit(steps.make_eval_step(c, forward))(None, batches_JBT1)
  logits_JBTV = table_VV.astype(np.float64)[batches_JBT1[..., :-1]]
  log_p_JBTV = logits_JBTV - np.log(np.exp(logits_JBTV).sum(-1, keepdims=True))
  target_JBT = batches_JBT1[..., 1:]
  want_JB = -np.take_along_axis(log_p_JBTV, target_JBT[..., None], -1)[..., 0].mean(-1)
  np.testing.assert_allclose(out["loss_JB"], want_JB, rtol=1e-5)
  np.testing.assert_array_equal(out["target_JBT"], target_JBT)
  np.testing.assert_array_equal(out["pred_JBT"], logits_JBTV.argmax(-1))
