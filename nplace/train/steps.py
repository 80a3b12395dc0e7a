"""The jitted train and eval steps, for one run and for a cell of runs trained together.

A cell's runs differ only in values that need not change the program (HYPERPARAMETERS, and the
seed): its step is the one run's step vmapped over a leading `trial` axis of the state, the
batch, those values and an `active` flag per run, the trial axis laid over the mesh's `trial`
axis (`spmd_axis_name`), so no run's gradients meet another's.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import optax

from nplace.config import ModelConfig, OptimConfig
from nplace.model import decoder
from nplace.runtime import cpu_split, sharding
from nplace.train import optim

# Config keys a cell's runs may differ in, passed to its step as per-run arrays (the seed too,
# which only sets the init and the data order).
HYPERPARAMETERS = ("optim.lr", "optim.weight_decay", "optim.b1", "optim.b2", "optim.eps", "optim.min_lr_ratio",
                   "model.dt")
# Taken as arguments by every cell's step, varied or not, so that a grid's cells of one shape and
# placement share one program: traced, they give the bits of the constants (tests/test_steps.py).
# The others are arguments only where a cell varies them: optax computes 1 - b1, 1 - b2 and
# 1 - min_lr_ratio from Python floats in float64, which float32 arguments do not reproduce, and
# XLA folds a constant dt other than 1 into its neighbours.
ALWAYS_TRACED = ("optim.lr", "optim.weight_decay", "optim.eps")


def _microbatches(batch_BT1, k):
  """[B, T+1] -> [k, B/k, T+1], microbatch j = rows j, j+k, ...: each device's contiguous
  block of rows stays on that device, so the split moves no data."""
  B = batch_BT1.shape[0]
  return batch_BT1.reshape(B // k, k, -1).swapaxes(0, 1)


def _run_step(config):
  """step(state, batch, hyper, active) -> (state, metrics) of one run; `hyper` maps some of
  HYPERPARAMETERS to their (traced) values, the rest come from `config`. A non-finite loss or
  gradient, or `active` False, leaves the params and optimizer state as they were (the run
  then stops or skips, per train.on_divergence)."""
  cfg, k, steps = ModelConfig.of(config.model), config.train.grad_accum, config.train.steps

  def step(state, batch_BT1, hyper, active):
    o = dataclasses.replace(OptimConfig.of(config.optim),
                            **{key.removeprefix("optim."): v for key, v in hyper.items() if key.startswith("optim.")})
    tx, lr_at = optim.make(o, steps), optim.schedule(o, steps)
    grad_fn = jax.value_and_grad(functools.partial(decoder.loss, cfg, dt=hyper.get("model.dt")))
    params = state["params"]
    if k == 1:
      loss, grads = grad_fn(params, batch_BT1)
    else:
      def accumulate(total, micro_BT1):
        return jax.tree.map(jnp.add, total, grad_fn(params, micro_BT1)), None
      zeros = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
      (loss, grads), _ = jax.lax.scan(accumulate, zeros, _microbatches(batch_BT1, k))
      loss, grads = jax.tree.map(lambda x: x / k, (loss, grads))
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    keep = finite & active  # else the old params and optimizer state stay

    def update(old):
      updates, opt_state = tx.update(grads, old["opt_state"], old["params"])
      return {"params": optax.apply_updates(old["params"], updates), "opt_state": opt_state}

    old = {"params": params, "opt_state": state["opt_state"]}
    if config.train.update_guard == "cond":  # under a cell's vmap, a select again
      new = jax.lax.cond(keep, update, lambda old: old, old)
    else:
      new = jax.tree.map(lambda new, old: jnp.where(keep, new, old), update(old), old)
    return ({"step": state["step"] + 1, **new},
            {"loss": loss, "grad_norm": grad_norm, "lr": lr_at(state["step"]), "finite": finite})

  return step


def make_train_step(config):
  """step(state, batch) -> (state, metrics): one run, every value from `config`."""
  step = _run_step(config)
  return lambda state, batch_BT1: step(state, batch_BT1, {}, True)


def make_cell_step(config, varying: tuple[str, ...]):
  """step(state_K, batch_KBT1, hyper, active_K) -> (state_K, metrics_K): the runs of a cell,
  `hyper` holding a [K] array for each of the `varying` HYPERPARAMETERS."""
  step = _run_step(config)
  return jax.vmap(step, in_axes=(0, 0, {key: 0 for key in varying}, 0), spmd_axis_name="trial")


def generates(config) -> bool:
  """Whether the eval step decodes continuations: eval.generate sequences a batch, and a score
  to give them (ROUGE, or a BERTScore model)."""
  e = config.eval
  return bool(e.generate and (e.rouge or e.bertscore_model))


def prompt_length(seq_len: int) -> int:
  """Tokens of a validation sequence its generated continuation is prompted with: the first half."""
  return seq_len // 2


def greedy_continuation(logits_fn, tokens_BT, prompt: int):
  """The greedy (argmax) continuation [B, T - prompt] of each row's first `prompt` tokens, to
  the rows' length T, with no KV cache: each new token is a full forward over a fixed [B, T]
  buffer (causal, so the slots not yet written do not reach position t - 1's logits), T -
  prompt forwards in a lax loop. For models given as a logits function (the tests' hand-made
  ones); the decoder's own is `decoder.generate`, which caches keys and values and gives the
  same tokens (tests/test_evaluation.py)."""
  T = tokens_BT.shape[1]

  def write_next(t, buffer_BT):
    next_B = logits_fn(buffer_BT)[:, t - 1].argmax(-1)
    return buffer_BT.at[:, t].set(next_B.astype(buffer_BT.dtype))

  buffer_BT = jnp.where(jnp.arange(T) < prompt, tokens_BT, 0)
  return jax.lax.fori_loop(prompt, T, write_next, buffer_BT)[:, prompt:]


def make_eval_step(config, forward=None):
  """eval(params, batches, hyper={}) over an evaluation's validation batches stacked [J, B,
  T+1] -> per-sequence token-mean losses `loss_JB`, the inputs `input_JBT`, the
  teacher-forced argmax predictions `pred_JBT` and their targets `target_JBT`, a batch at a
  time; and (when `generates(config)`) the greedy continuations `gen_JBG` of the first
  eval.generate inputs' first halves of every batch, all decoded in one loop (see
  nplace/train/evaluation.py). `hyper` as the train step's: a cell's run is evaluated, and
  generates, at its own `model.dt`. `forward(params, tokens_BT, dt) -> logits_BTV` stands in
  for the model (tests score hand-made ones; they generate without a KV cache)."""
  cfg = ModelConfig.of(config.model)
  logits_fn = forward or (lambda params, tokens_BT, dt: decoder.apply(cfg, params, tokens_BT, dt=dt))
  generate = generates(config)

  def evaluate(params, batches_JBT1, hyper=None):
    dt = (hyper or {}).get("model.dt")

    def one_batch(batch_BT1):
      input_BT, target_BT = batch_BT1[:, :-1], batch_BT1[:, 1:]
      logits_BTV = logits_fn(params, input_BT, dt)
      loss_B = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, target_BT).mean(-1)
      return {"loss_JB": loss_B, "input_JBT": input_BT, "pred_JBT": logits_BTV.argmax(-1).astype(jnp.int32),
              "target_JBT": target_BT}

    out = jax.lax.map(one_batch, batches_JBT1)
    if generate:
      # the first rows only: a few sequences a batch show it
      prompts_JBT = out["input_JBT"][:, :config.eval.generate]
      J, B, T = prompts_JBT.shape
      prompts_BT, prompt = prompts_JBT.reshape(J * B, T), prompt_length(T)
      if forward is None:
        gen_BG = decoder.generate(cfg, params, prompts_BT, prompt, dt)
      else:
        gen_BG = greedy_continuation(lambda tokens_BT: forward(params, tokens_BT, dt), prompts_BT, prompt)
      out["gen_JBG"] = gen_BG.reshape(J, B, T - prompt)
    return out

  return evaluate


def compile_steps(config, mesh, state_shardings, varying=None):
  """The train and eval steps, jitted with explicit shardings (the state is donated) and
  traced under the mesh's activation layout. With `varying` (a cell: `mesh` has a `trial`
  axis, the state is stacked on it), the cell's steps: train(state_K, batch_KBT1, hyper,
  active_K); eval(params_K, batches_JBT1, hyper), every run on the same validation batches at
  its own values of `varying`."""
  batch = sharding.batch_sharding(mesh, config.mesh)
  eval_batches = sharding.batch_sharding(mesh, config.mesh, stacked=True)
  rep = sharding.replicated(mesh)
  options = cpu_split.compiler_options(mesh)
  if varying is None:
    train_step = jax.jit(make_train_step(config), in_shardings=(state_shardings, batch),
                         out_shardings=(state_shardings, rep), donate_argnums=0, compiler_options=options)
    eval_step = jax.jit(make_eval_step(config), in_shardings=(state_shardings["params"], eval_batches),
                        out_shardings=rep, compiler_options=options)
  else:
    trials = sharding.trial_sharding(mesh)
    train_step = jax.jit(make_cell_step(config, varying),
                         in_shardings=(state_shardings, sharding.batch_sharding(mesh, config.mesh, trials=True),
                                       trials, trials),
                         out_shardings=(state_shardings, trials), donate_argnums=0, compiler_options=options)
    eval_step = jax.jit(jax.vmap(make_eval_step(config), in_axes=(0, None, {key: 0 for key in varying}),
                                 spmd_axis_name="trial"),
                        in_shardings=(state_shardings["params"], eval_batches, trials), out_shardings=trials,
                        compiler_options=options)
  return (sharding.under_layout(train_step, mesh, config.mesh),
          sharding.under_layout(eval_step, mesh, config.mesh))
