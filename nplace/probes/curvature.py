"""Curvature of the loss: Hessian-vector products and the top eigenvalue of the Hessian, plain
or under a diagonal preconditioner, by power iteration on parameter pytrees.

The Hessian is never formed: each product is forward-over-reverse (`jax.jvp` of `jax.grad`),
at about the cost of two gradients, so a model of any size costs `iterations` such products
(twice as many when its Hessian curves down more steeply than up).
"""
import jax
import jax.flatten_util
import jax.numpy as jnp
import optax


def hessian_vector_product(loss_fn, params, v):
  """H v, H the Hessian of the scalar `loss_fn` at `params` (v a pytree like params)."""
  return jax.jvp(jax.grad(loss_fn), (params,), (v,))[1]


def _unit(v):
  """v over its global L2 norm (over every leaf of the pytree)."""
  return optax.tree.scale(1 / optax.tree.norm(v), v)


def top_eigenvalue(matvec, like, key, iterations: int):
  """The largest eigenvalue of the symmetric linear map `matvec` on pytrees shaped like `like`:
  power iteration v <- A v / |A v| (|.| the global L2 norm over the pytree) from a Gaussian
  start drawn with `key`, `iterations` products, read as the Rayleigh quotient v.Av of the last
  iterate. Power iteration finds the eigenvalue largest in magnitude; when that one is negative
  (a loss's Hessian can curve down more steeply than up), it starts again, for as many
  products, on A - lambda I, whose dominant eigenvalue is A's largest shifted, and reads v.Av of
  that run's last iterate. The quotient's relative error falls as the ratio of the iterated
  map's two largest eigenvalues to the power 2 (iterations - 1)."""
  flat, unravel = jax.flatten_util.ravel_pytree(like)
  # one draw for the whole pytree: a draw per leaf compiles a random generator per leaf (seconds each)
  start = _unit(unravel(jax.random.normal(key, flat.shape, flat.dtype)))

  def step(carry):  # one product a step, so the compiled loop holds one copy of `matvec`
    i, v, shift, _ = carry
    Av = matvec(v)
    rayleigh = optax.tree.vdot(v, Av)
    restart = (i == iterations - 1) & (rayleigh < 0)
    v = optax.tree.where(restart, start, _unit(optax.tree.sub(Av, optax.tree.scale(shift, v))))
    return i + 1, v, jnp.where(restart, rayleigh, shift), rayleigh

  def running(carry):
    i, _, shift, _ = carry
    return (i < iterations) | ((shift < 0) & (i < 2 * iterations))
  zero = jnp.zeros((), flat.dtype)
  return jax.lax.while_loop(running, step, (0, start, zero, zero))[3]


def preconditioned_top_eigenvalue(loss_fn, params, precond, key, iterations: int):
  """The top eigenvalue of P^{-1} H (H the Hessian of `loss_fn` at `params`, P the positive
  diagonal `precond`, a pytree like params), computed on its symmetric form P^{-1/2} H P^{-1/2}
  (the same spectrum), where power iteration's Rayleigh quotient applies."""
  inv_sqrt = jax.tree.map(jax.lax.rsqrt, precond)

  def matvec(u):
    return optax.tree.mul(inv_sqrt, hessian_vector_product(loss_fn, params, optax.tree.mul(inv_sqrt, u)))
  return top_eigenvalue(matvec, params, key, iterations)


def adam_stability_threshold(b1: float) -> float:
  """(2 + 2 b1) / (1 - b1): Adam with momentum b1 and step size eta is stable on a quadratic
  while the preconditioned sharpness stays below this over eta. Cohen et al. 2022, "Adaptive
  Gradient Methods at the Edge of Stability" (arXiv 2207.14484): "For Adam with step size eta
  and beta_1 = 0.9, this stability threshold is 38/eta" (abstract), the threshold of gradient
  descent with an exponential-moving-average momentum b1 on the preconditioned quadratic, of
  which 38 is the value at b1 = 0.9. At b1 = 0 it is gradient descent's 2."""
  return (2 + 2 * b1) / (1 - b1)
