"""The model written out in plain jnp, from docs/science.md's formulas, for tests to compare against."""
import math

import jax
import jax.numpy as jnp


def norm(p, z, kind, eps):
  if kind == "dyt":
    return p["scale"] * jnp.tanh(p["alpha"] * z) + p["bias"]
  if kind == "layernorm":
    z = z - z.mean(-1, keepdims=True)
  y = z / jnp.sqrt((z ** 2).mean(-1, keepdims=True) + eps) * p["scale"]
  return y + p["bias"] if kind == "layernorm" else y


def attention(p, x, n_head, centered=False, normed=(), N=None):
  """`normed`: the projections (of q, k, v) that N(p, x) normalises per head."""
  q, k, v = (jnp.einsum("btd,dhk->bthk", x, p[n]["kernel"]) + p[n]["bias"] for n in "qkv")
  q, k, v = (N(p[f"{n}_norm"], x) if n in normed else x for n, x in zip("qkv", (q, k, v)))
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


def block(p, h, m, dt=None, l=1):
  """Layer l (1..L); dt=None writes the formula with no residual step at all."""
  s = (lambda x: x) if dt is None else (lambda x: dt * x)
  L, kind = m.n_layer, m.placement
  if kind == "mix":  # Mix-LN: the first floor(f L) layers Post-LN, the rest Pre-LN
    kind = "post" if l <= math.floor(m.mix_post_fraction * L) else "pre"
  N = lambda q, x: norm(q, x, m.norm, m.norm_eps)
  qkv = ("q", "k", "v") if kind == "hybrid" else ("q", "k") if m.qk_norm else ()
  branches = {"attn": lambda x: attention(p["attn"], x, m.n_head, m.attention == "centered", qkv, N),
              "mlp": lambda x: mlp(p["mlp"], x, m.mlp)}
  for name, F in branches.items():
    n = lambda x, site="": N(p[f"{name}_norm{site}"], x)
    if kind == "post":
      h = n(h + s(F(h)))
    elif kind == "pre":
      h = h + s(F(n(h)))
    elif kind == "peri":
      h = h + s(n(F(n(h, "_in")), "_out"))
    elif kind == "reorder":
      h = h + s(n(F(h)))
    elif kind == "deepnorm":
      h = n((2 * L) ** 0.25 * h + s(F(h)))
    elif kind == "lns":
      h = h + s(F(n(h) / math.sqrt(l)))
    elif kind == "rezero":
      h = h + s(p[f"{name}_alpha"] * F(h))
    elif name == "attn":  # hybrid: no norm around attention (q, k, v are normed inside)
      h = h + s(F(h))
    else:  # hybrid's MLP: the stream is normed, residual included
      h = n(h)
      h = h + s(F(h))
  return h


def embed(params, tokens, m):
  """The stream entering block 1: token (times embed_scale) + position, normed with embed_norm."""
  h = params["wte"]["embedding"][tokens] * m.embed_scale + params["wpe"]["embedding"][:tokens.shape[1]]
  return norm(params["embed_norm"], h, m.norm, m.norm_eps) if m.embed_norm else h


def head(params, h, m):
  """Logits from the last layer's stream: the final norm, then the tied LM head."""
  if m.placement not in ("post", "deepnorm", "rezero"):  # these end on a norm, or have none
    h = norm(params["final_norm"], h, m.norm, m.norm_eps)
  return h @ params["wte"]["embedding"].T


def decoder(params, tokens, m):
  h = embed(params, tokens, m)
  for l in range(m.n_layer):
    h = block(jax.tree.map(lambda x: x[l], params["blocks"]), h, m, m.dt, l + 1)
  return head(params, h, m)
