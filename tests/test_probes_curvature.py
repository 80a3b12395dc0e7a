"""Curvature probes against brute force: the dense Hessian (`jax.hessian` of the flattened
params) and numpy's eigh, on quadratics of known spectrum, a tiny MLP and the real decoder
at a tiny shape."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from conftest import tiny_config
from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.probes import curvature


def dense_hessian(loss_fn, params) -> np.ndarray:
  flat, unravel = ravel_pytree(params)
  H = np.asarray(jax.jit(jax.hessian(lambda f: loss_fn(unravel(f))))(flat), np.float64)
  return (H + H.T) / 2  # float32 rounding leaves it a hair off symmetric


def eigenvalues(H) -> np.ndarray:
  return np.linalg.eigh(H)[0]


def converges(eigenvalues_N, iterations) -> bool:
  """Whether power iteration (shifted when the spectrum's negative end dominates) can reach
  1e-4 in `iterations`: the test is not vacuous on a spectrum with no gap."""
  top, second, bottom = eigenvalues_N[-1], eigenvalues_N[-2], eigenvalues_N[0]
  shift = min(bottom, 0.0) if -bottom > top else 0.0
  return ((second - shift) / (top - shift)) ** (2 * (iterations - 1)) < 1e-4


def mlp_loss(params, x_NI, labels_N):
  hidden = jnp.tanh(x_NI @ params["w1"] + params["b1"])
  logits = hidden @ params["w2"]
  return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(labels_N)), labels_N])


@pytest.fixture(scope="module")
def mlp():
  """A tanh MLP 3 -> 5 -> 4 with softmax cross-entropy on 16 random points: 44 parameters."""
  rng = np.random.default_rng(0)
  params = {"w1": rng.normal(size=(3, 5)), "b1": rng.normal(size=5) * 0.1, "w2": rng.normal(size=(5, 4))}
  params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), params)
  loss = functools.partial(mlp_loss, x_NI=jnp.asarray(rng.normal(size=(16, 3)), jnp.float32),
                           labels_N=jnp.asarray(rng.integers(0, 4, 16)))
  return loss, params, dense_hessian(loss, params)


def random_like(params, seed, spread=1.0):
  """exp(spread x normal) per entry: positive, spanning decades at spread 2 (like Adam's P)."""
  flat, unravel = ravel_pytree(params)
  return unravel(jnp.exp(spread * jax.random.normal(jax.random.key(seed), flat.shape)))


def test_hessian_vector_product_is_the_dense_hessian_times_v(mlp):
  loss, params, H = mlp
  v = random_like(params, 1)
  got = ravel_pytree(curvature.hessian_vector_product(loss, params, v))[0]
  np.testing.assert_allclose(got, H @ np.asarray(ravel_pytree(v)[0], np.float64), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("spectrum", [
    (10.0, 4.0, 2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0),  # the largest dominates
    (-12.0, -1.0, 0.0, 1.0, 2.0, 4.0, 10.0, 3.0, 0.5),  # a steeper negative end: the shifted run
])
def test_top_eigenvalue_is_the_largest_of_a_known_spectrum(spectrum):
  """On 0.5 x^T A x over a two-leaf pytree, A = Q diag(spectrum) Q^T for a random rotation Q."""
  like = {"a": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
  flat, unravel = ravel_pytree(like)
  Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(flat.size, flat.size)))
  A = jnp.asarray(Q @ np.diag(spectrum) @ Q.T, jnp.float32)
  matvec = lambda v: unravel(A @ ravel_pytree(v)[0])
  got = jax.jit(lambda: curvature.top_eigenvalue(matvec, like, jax.random.key(0), 30))()
  assert float(got) == pytest.approx(max(spectrum), rel=1e-5)


def test_preconditioned_top_eigenvalue_is_eighs_of_the_scaled_hessian(mlp):
  """P^{-1/2} H P^{-1/2} for P spanning decades; and P = 1 gives the plain Hessian's."""
  loss, params, H = mlp
  P = random_like(params, 2, spread=2.0)
  d = np.asarray(ravel_pytree(P)[0], np.float64)
  want = eigenvalues(H / np.sqrt(np.outer(d, d)))
  assert converges(want, 200)
  got = curvature.preconditioned_top_eigenvalue(loss, params, P, jax.random.key(3), 200)
  assert float(got) == pytest.approx(want[-1], rel=1e-3)
  ones = jax.tree.map(jnp.ones_like, params)
  plain = curvature.preconditioned_top_eigenvalue(loss, params, ones, jax.random.key(3), 200)
  assert converges(eigenvalues(H), 200)
  assert float(plain) == pytest.approx(eigenvalues(H)[-1], rel=1e-3)


@pytest.mark.slow
def test_on_the_tiny_decoder_against_its_dense_hessian():
  """The real loss (2 blocks of width 8, vocabulary 16, 8 tokens, 1,952 parameters) at init:
  its Hessian-vector product, top eigenvalue, and top eigenvalue under a diagonal P."""
  cfg = ModelConfig.of(tiny_config(d_model=8, n_head=2, vocab_size=16, max_len=8).model)
  params = decoder.init(cfg, jax.random.key(0))
  batch_BT1 = jnp.asarray(np.random.default_rng(0).integers(0, 16, (2, 9)))
  loss = functools.partial(decoder.loss, cfg, batch_BT1=batch_BT1)
  H = dense_hessian(loss, params)
  v = random_like(params, 1)
  got = ravel_pytree(curvature.hessian_vector_product(loss, params, v))[0]
  want = H @ np.asarray(ravel_pytree(v)[0], np.float64)
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())

  P = random_like(params, 9, spread=2.0)
  d = np.asarray(ravel_pytree(P)[0], np.float64)
  plain_N, preconditioned_N = eigenvalues(H), eigenvalues(H / np.sqrt(np.outer(d, d)))
  assert converges(plain_N, 100) and converges(preconditioned_N, 100)

  @jax.jit
  def both(params, P):
    hvp = functools.partial(curvature.hessian_vector_product, loss, params)
    return (curvature.top_eigenvalue(hvp, params, jax.random.key(1), 100),
            curvature.preconditioned_top_eigenvalue(loss, params, P, jax.random.key(1), 100))
  plain, preconditioned = both(params, P)
  assert float(plain) == pytest.approx(plain_N[-1], rel=1e-3)
  assert float(preconditioned) == pytest.approx(preconditioned_N[-1], rel=1e-3)


def test_adam_stability_threshold_is_38_at_b1_0_9_and_gradient_descents_2_at_0():
  assert curvature.adam_stability_threshold(0.9) == pytest.approx(38.0)
  assert curvature.adam_stability_threshold(0.0) == 2.0
