"""The jitted train and eval steps."""
import functools

import jax
import jax.numpy as jnp
import optax

from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.runtime import cpu_split, sharding
from nplace.train import optim


def _microbatches(batch_BT1, k):
  """[B, T+1] -> [k, B/k, T+1], microbatch j = rows j, j+k, ...: each device's contiguous
  block of rows stays on that device, so the split moves no data."""
  B = batch_BT1.shape[0]
  return batch_BT1.reshape(B // k, k, -1).swapaxes(0, 1)


def make_train_step(config):
  """step(state, batch) -> (state, metrics). A non-finite loss or gradient leaves the params
  and optimizer state as they were (the run then stops or skips, per train.on_divergence)."""
  tx = optim.make(config.optim, config.train.steps)
  lr_at = optim.schedule(config.optim, config.train.steps)
  grad_fn = jax.value_and_grad(functools.partial(decoder.loss, ModelConfig.of(config.model)))
  k = config.train.grad_accum

  def step(state, batch_BT1):
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
    updates, opt_state = tx.update(grads, state["opt_state"], params)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    keep_if_finite = functools.partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
    new_state = {"step": state["step"] + 1,
                 "params": keep_if_finite(optax.apply_updates(params, updates), params),
                 "opt_state": keep_if_finite(opt_state, state["opt_state"])}
    return new_state, {"loss": loss, "grad_norm": grad_norm, "lr": lr_at(state["step"]), "finite": finite}

  return step


def make_eval_step(config):
  """eval(params, batch) -> per-sequence token-mean losses `loss_B`, the teacher-forced argmax
  predictions `pred_BT` and their targets `target_BT` (see nplace/train/evaluation.py)."""
  cfg = ModelConfig.of(config.model)

  def evaluate(params, batch_BT1):
    logits_BTV = decoder.apply(cfg, params, batch_BT1[:, :-1])
    target_BT = batch_BT1[:, 1:]
    loss_B = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, target_BT).mean(-1)
    return {"loss_B": loss_B, "pred_BT": logits_BTV.argmax(-1).astype(jnp.int32), "target_BT": target_BT}

  return evaluate


def compile_steps(config, mesh, state_shardings):
  """The train and eval steps, jitted with explicit shardings (the state is donated) and
  traced under the mesh's activation layout."""
  batch = sharding.batch_sharding(mesh, config.mesh)
  rep = sharding.replicated(mesh)
  options = cpu_split.compiler_options(mesh)
  train_step = jax.jit(make_train_step(config), in_shardings=(state_shardings, batch),
                       out_shardings=(state_shardings, rep), donate_argnums=0, compiler_options=options)
  eval_step = jax.jit(make_eval_step(config), in_shardings=(state_shardings["params"], batch),
                      out_shardings=rep, compiler_options=options)
  return (sharding.under_layout(train_step, mesh, config.mesh),
          sharding.under_layout(eval_step, mesh, config.mesh))
