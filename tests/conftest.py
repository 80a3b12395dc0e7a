"""Shared fixtures: tiny model configs."""
import jax
import pytest

from nplace.config import base_config

jax.config.update("jax_default_matmul_precision", "highest")


def tiny_config(**model_overrides):
  """A 2-layer, d=32 model with random-looking weights, small enough for references."""
  c = base_config()
  c.model.update(vocab_size=61, max_len=16, n_layer=2, n_head=4, d_model=32, remat="none")
  c.model.update(**model_overrides)
  c.data.seq_len = 12
  return c


@pytest.fixture
def make_config():
  return tiny_config
