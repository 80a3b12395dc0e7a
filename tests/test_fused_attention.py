"""model.attention_impl: the fused path against the einsum path (values and gradients), the CPU
halves and the TPU splash kernel (interpreted) against XLA's attention, splash chosen for a
TPU slice, which path `auto` takes, the probes of a fused training run, and the config's
one-line errors."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nplace.config import ModelConfig, base_config
from nplace.logs import events
from nplace.model import decoder, fused_attention, layers
from nplace.runtime import chips, sharding
from conftest import tiny_config
from test_commands import GPT2, run_main
from test_compile import needs_libtpu
from test_model import layer, random_params


def attention_value_and_grads(impl):
  """A scalar of the attention output and its gradients in every parameter and the input."""
  cfg = ModelConfig.of(tiny_config(attention_impl=impl).model)
  x_BTD = jax.random.normal(jax.random.key(0), (3, 12, cfg.d_model))
  attn = layers.Attention(cfg)
  params = layer(random_params(cfg, jax.random.key(1)), 0)["attn"]
  scalar = lambda p, x: jnp.sum(jnp.sin(attn.apply({"params": p}, x)))  # every output counts apart
  return jax.jit(jax.value_and_grad(scalar, argnums=(0, 1)))(params, x_BTD)


def test_dot_product_equals_einsum_in_values_and_gradients():
  (fused, fused_grads), (einsum, einsum_grads) = map(attention_value_and_grads, ("dot_product", "xla"))
  np.testing.assert_allclose(fused, einsum, rtol=1e-5)
  for (path, got), want in zip(jax.tree_util.tree_flatten_with_path(fused_grads)[0],
                               jax.tree.leaves(einsum_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=jax.tree_util.keystr(path))


def assert_equals_xla_attention(attend, shape_BTHK, tolerance):
  """sum(sin(attend(q, k, v))) and its q/k/v gradients against jax.nn's causal attention."""
  q, k, v = (jax.random.normal(jax.random.key(i), shape_BTHK) for i in range(3))

  def value_and_grads(attend):
    scalar = lambda q, k, v: jnp.sum(jnp.sin(attend(q, k, v)))
    return jax.jit(jax.value_and_grad(scalar, argnums=(0, 1, 2)))(q, k, v)

  got = value_and_grads(attend)
  want = value_and_grads(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True))
  for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(x, y, rtol=tolerance, atol=tolerance / 10)


@pytest.mark.parametrize("T", [1, 7, 16])
def test_cpu_causal_halves_equal_xla_attention_in_values_and_gradients(T):
  """The CPU path skips the masked quarter of the scores; odd and one-token sequences too."""
  assert_equals_xla_attention(fused_attention.causal_halves, (2, T, 3, 8), 1e-5)


def test_splash_kernel_equals_xla_attention_in_values_and_gradients():
  """The TPU kernel, run by the Pallas interpreter on one CPU device (T = one splash block)."""
  layout = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("data",)), PartitionSpec("data"))
  assert_equals_xla_attention(lambda q, k, v: fused_attention.splash(q, k, v, layout, interpret=True),
                              (2, fused_attention.SPLASH_BLOCK, 2, 16), 1e-4)


@needs_libtpu
def test_compiled_for_a_tpu_slice_the_fused_path_is_the_splash_kernel():
  mesh_config = base_config().mesh
  x = jax.ShapeDtypeStruct((4, fused_attention.SPLASH_BLOCK, 2, 64), jnp.bfloat16)
  for devices, kernel in ((chips.resolve("v5e:2x2").devices(), True), (jax.devices()[:1], False)):
    attend = jax.jit(lambda q, k, v: fused_attention.attend(q, k, v, layers.HEADS))  # jit caches ignore the layout
    with sharding.activation_layout(sharding.make_mesh(mesh_config, devices), mesh_config):
      assert ("tpu_custom_call" in attend.lower(x, x, x).as_text()) == kernel


def sown_probs(**overrides):
  """The attention probabilities a forward pass sows (shapes only: nothing is computed)."""
  cfg = tiny_config(**overrides).model
  tokens = jax.ShapeDtypeStruct((2, 7), jnp.int32)
  _, state = jax.eval_shape(functools.partial(decoder.apply, cfg, mutable=["intermediates"]),
                            decoder.abstract_params(cfg), tokens)
  return state["intermediates"]["blocks"].get("attn", {}).get("probs")


def test_auto_is_fused_unless_the_centered_ablation_needs_the_probabilities():
  assert sown_probs(attention_impl="dot_product") is None  # the fused path materialises none
  assert sown_probs(attention_impl="xla") is not None
  assert sown_probs(attention_impl="auto") is None
  assert sown_probs(attention_impl="auto", attention="centered") is not None


@pytest.mark.slow
def test_a_fused_training_run_still_probes_the_attention(probe_run):
  """conftest's real `nplace train` trains with attention_impl=dot_product (fused) and runs the
  probe suite, which needs the probabilities, at every step."""
  scalars = events.read_scalars(probe_run)
  for index in ("001", "002"):
    steps, values = scalars[f"probe/attention_tv/layer_{index}"]
    assert list(steps) == [0, 1, 2] and np.all((values > 0) & (values < 1)), values


@pytest.mark.parametrize("override,key", [
    ("--config.model.attention_impl=flash", "model.attention_impl"),
    ("--config.model.attention_impl=dot_product --config.model.attention=centered", "model.attention_impl"),
])
def test_attention_impl_errors_are_one_line(capsys, override, key):
  code, out, err = run_main(capsys, "info", "--config", f"{GPT2}:124m", *override.split())
  assert code == 2 and out == ""
  assert err.count("\n") == 1 and key in err, err
