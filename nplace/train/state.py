"""The train state (step, params, optimizer state): its shapes, its shardings, and a fresh one
created directly in its sharded layout."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.runtime import sharding
from nplace.train import optim


def start_from(config, params):
  """Step 0 at `params` (plain or boxed) with a fresh optimizer state."""
  return {"step": jnp.zeros((), jnp.int32), "params": params,
          "opt_state": optim.make(config.optim, config.train.steps).init(params)}


def _init_boxed(config, key):
  return start_from(config, decoder.init_boxed(ModelConfig.of(config.model), key))


def abstract_boxed(config):
  """The state's shapes with logical-axis boxes; nothing allocated."""
  return jax.eval_shape(functools.partial(_init_boxed, config), jax.random.key(0))


def abstract(config):
  return nn.unbox(abstract_boxed(config))


def shardings(config, mesh, trials: int | None = None):
  """The state's layout on `mesh`; with `trials`, of a cell's states stacked on a leading axis."""
  return sharding.logical_to_shardings(abstract_boxed(config), mesh, config.mesh, trials)


def init(config, state_shardings, seeds=None):
  """A fresh state, each array created directly in its sharded layout; with `seeds`, a cell's
  states stacked, one per seed (each the state its run would start from alone)."""
  one = lambda key: nn.unbox(_init_boxed(config, key))
  if seeds is None:
    return jax.jit(one, out_shardings=state_shardings)(jax.random.key(config.seed))
  keys = jnp.stack([jax.random.key(seed) for seed in seeds])
  return jax.jit(jax.vmap(one), out_shardings=state_shardings)(keys)
