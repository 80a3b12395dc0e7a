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


def shardings(config, mesh):
  return sharding.logical_to_shardings(abstract_boxed(config), mesh, config.mesh)


def init(config, state_shardings):
  """A fresh state, each array created directly in its sharded layout."""
  init_fn = jax.jit(lambda key: nn.unbox(_init_boxed(config, key)), out_shardings=state_shardings)
  return init_fn(jax.random.key(config.seed))
