"""The model written out in plain jnp, from SCIENCE.md's formulas, for tests to compare against."""
import math

import jax
import jax.numpy as jnp


def norm(p, z, kind, eps):
  if kind == "layernorm":
    z = z - z.mean(-1, keepdims=True)
  y = z / jnp.sqrt((z ** 2).mean(-1, keepdims=True) + eps) * p["scale"]
  return y + p["bias"] if kind == "layernorm" else y


def attention(p, x, n_head, centered=False):
  q, k, v = (jnp.einsum("btd,dhk->bthk", x, p[n]["kernel"]) + p[n]["bias"] for n in "qkv")
  T, K = x.shape[1], q.shape[-1]
  scores = jnp.einsum("bthk,bshk->bhts", q, k) / math.sqrt(K)
  causal = jnp.tril(jnp.ones((T, T), bool))
  probs = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), -1)
  if centered:
    rows = jnp.arange(1, T + 1)[:, None]
    probs = probs - jnp.where(causal, 1.0 / rows, 0.0)
  out = jnp.einsum("bhts,bshk->bthk", probs, v)
  return jnp.einsum("bthk,hkd->btd", out, p["o"]["kernel"]) + p["o"]["bias"]


def gelu_tanh(x):
  return 0.5 * x * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def mlp(p, x, kind):
  up = x @ p["fc_in"]["kernel"] + p["fc_in"]["bias"]
  if kind == "swiglu":
    gate = x @ p["fc_gate"]["kernel"] + p["fc_gate"]["bias"]
    hidden = gate * jax.nn.sigmoid(gate) * up
  else:
    hidden = gelu_tanh(up)
  return hidden @ p["fc_out"]["kernel"] + p["fc_out"]["bias"]


def block(p, h, m, dt=None):
  """One layer; dt=None writes the formula with no residual step at all."""
  scale = (lambda x: x) if dt is None else (lambda x: dt * x)
  branches = {"attn": lambda x: attention(p["attn"], x, m.n_head, m.attention == "centered"),
              "mlp": lambda x: mlp(p["mlp"], x, m.mlp)}
  N = lambda name, x: norm(p[name], x, m.norm, m.norm_eps)
  for name, F in branches.items():
    if m.placement == "post":
      h = N(f"{name}_norm", h + scale(F(h)))
    elif m.placement == "pre":
      h = h + scale(F(N(f"{name}_norm", h)))
    else:
      h = h + scale(N(f"{name}_norm_out", F(N(f"{name}_norm_in", h))))
  return h


def decoder(params, tokens, m):
  T = tokens.shape[1]
  h = params["wte"]["embedding"][tokens] + params["wpe"]["embedding"][:T]
  if m.embed_norm:
    h = norm(params["embed_norm"], h, m.norm, m.norm_eps)
  for l in range(m.n_layer):
    h = block(jax.tree.map(lambda x: x[l], params["blocks"]), h, m, m.dt)
  if m.placement != "post":
    h = norm(params["final_norm"], h, m.norm, m.norm_eps)
  return h @ params["wte"]["embedding"].T
