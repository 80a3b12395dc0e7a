"""model.attention_impl: the fused path against the einsum path (loss and every gradient), which
path `auto` takes, the probes still reading probabilities, and the config's one-line errors."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplace import model
from nplace.probes import attention, suite
from conftest import tiny_config
from test_cli import GPT2, run_main
from test_model import random_params


def loss_and_grads(impl):
  cfg = tiny_config(placement="peri", attention_impl=impl).model
  params = random_params(cfg, jax.random.key(0), std=0.2)
  batch = jax.random.randint(jax.random.key(1), (3, 13), 0, cfg.vocab_size)
  return jax.jit(jax.value_and_grad(functools.partial(model.loss, model.freeze(cfg))))(params, batch)


def test_dot_product_equals_einsum_in_loss_and_gradients():
  (fused_loss, fused_grads), (einsum_loss, einsum_grads) = map(loss_and_grads, ("dot_product", "xla"))
  np.testing.assert_allclose(fused_loss, einsum_loss, rtol=1e-6)
  for (path, got), want in zip(jax.tree_util.tree_flatten_with_path(fused_grads)[0],
                               jax.tree.leaves(einsum_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=jax.tree_util.keystr(path))


def sown_probs(**overrides):
  """The attention probabilities a forward pass sows (shapes only: nothing is computed)."""
  cfg = tiny_config(**overrides).model
  tokens = jax.ShapeDtypeStruct((2, 7), jnp.int32)
  _, state = jax.eval_shape(functools.partial(model.apply, cfg, mutable=["intermediates"]),
                            model.abstract_params(cfg), tokens)
  return state["intermediates"]["blocks"].get("attn", {}).get("probs")


def test_auto_is_fused_unless_the_centered_ablation_needs_the_probabilities():
  assert sown_probs(attention_impl="auto") is None  # the fused path materialises none
  assert sown_probs(attention_impl="xla") is not None
  assert sown_probs(attention_impl="auto", attention="centered") is not None


def test_probe_suite_reads_the_probabilities_when_training_is_fused():
  c = tiny_config(attention_impl="dot_product", n_layer=3)
  c.probe.update(power_iters=0, hutchinson_probes=1, batch_size=2)
  params = random_params(c.model, jax.random.key(2), std=0.2)
  batch = jax.random.randint(jax.random.key(3), (2, 10), 0, c.model.vocab_size)
  got = suite.suite(c, params, batch, jax.random.key(4))["attention_tv"]
  einsum = tiny_config(attention_impl="xla", n_layer=3).model
  _, state = model.apply(einsum, params, batch[:, :-1], mutable=["intermediates"])
  (probs_LBHTS,) = state["intermediates"]["blocks"]["attn"]["probs"]
  np.testing.assert_allclose(got, attention.prefix_average_tv(probs_LBHTS), rtol=1e-5)
  assert got.shape == (3,) and np.all(got > 0.01)  # random weights: far from the prefix average


@pytest.mark.parametrize("override,key", [
    ("--config.model.attention_impl=flash", "model.attention_impl"),
    ("--config.model.attention_impl=dot_product --config.model.attention=centered", "model.attention_impl"),
])
def test_attention_impl_errors_are_one_line(capsys, override, key):
  code, out, err = run_main(capsys, "info", "--config", f"{GPT2}:124m", *override.split())
  assert code == 2 and out == ""
  assert err.count("\n") == 1 and key in err, err
