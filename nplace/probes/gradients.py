"""Gradient probes from one backward pass: residual-stream cotangents, per-matrix parameter
gradients, and the backward factor of every norm site."""
import jax
import jax.numpy as jnp

from nplace.model import decoder
from nplace.probes import taps as taps_lib

MATRICES = {  # probe name -> (branch, module) of a block's kernel
    "q": ("attn", "q"), "k": ("attn", "k"), "v": ("attn", "v"), "o": ("attn", "o"),
    "mlp_in": ("mlp", "fc_in"), "mlp_gate": ("mlp", "fc_gate"), "mlp_out": ("mlp", "fc_out"),
}
BRANCHES = ("attn", "mlp")


def backward(cfg, params, batch_BT1, taps):
  """(loss, intermediates, param grads, tap cotangents): the training loss, one pass."""
  tokens_BT, targets_BT = batch_BT1[:, :-1], batch_BT1[:, 1:]

  def loss_fn(params, taps):
    logits, intermediates = taps_lib.forward(cfg, params, tokens_BT, taps)
    return decoder.cross_entropy(logits, targets_BT), intermediates

  (loss, intermediates), (g_params, g_taps) = jax.value_and_grad(
      loss_fn, argnums=(0, 1), has_aux=True)(params, taps)
  return loss, intermediates, g_params, g_taps


def _norm_L(x_L___):
  """Frobenius norm over everything but the leading (layer) axis."""
  return jnp.sqrt(jnp.sum(jnp.square(x_L___.reshape(x_L___.shape[0], -1)), -1))


def residual_grad(g_taps):
  """|dL/dh_l|_F / sqrt(N) for the block outputs l = 1..L."""
  ct_LBTD = g_taps["blocks"]["h"]
  n_tokens = ct_LBTD.shape[1] * ct_LBTD.shape[2]
  return _norm_L(ct_LBTD) / jnp.sqrt(n_tokens)


def param_grads(g_params):
  """Frobenius norm of each block matrix's gradient, per layer: grad_q, ..., grad_mlp_out."""
  blocks = g_params["blocks"]
  return {f"grad_{name}": _norm_L(blocks[branch][module]["kernel"])
          for name, (branch, module) in MATRICES.items() if module in blocks[branch]}


def _site_factors(norm_params, inter, ct) -> dict:
  """{"backward": measured, "scale": s} at one norm site, one value per leading axis of its
  gain (the layers, or none at top level). s = mean_tokens rms(g)/r needs the sown r: DyT has
  none, so its sites give `backward` only."""
  lead = norm_params["scale"].shape[:-1]
  flat = lambda x: x.astype(jnp.float32).reshape(*lead, -1)
  dz, dy = flat(ct["z"]), flat(ct["y"])
  out = {"backward": jnp.sqrt(jnp.sum(dz * dz, -1) / jnp.sum(dy * dy, -1))}
  if "r" in inter:
    rms_g = jnp.sqrt(jnp.mean(jnp.square(norm_params["scale"]), -1))
    out["scale"] = rms_g * jnp.mean(1.0 / flat(taps_lib.sown(inter["r"])), -1)
  return out


def _sites(taps, path=()):
  """Paths of the norm sites (the modules holding a `z`, `y` tap pair) in a taps tree."""
  if "z" in taps:
    return [path]
  return [site for k, v in taps.items() if isinstance(v, dict) for site in _sites(v, path + (k,))]


def _factors(params, intermediates, g_taps, path):
  def at(tree):
    for key in path:
      tree = tree.get(key, {})  # a DyT site sows no intermediates
    return tree
  return _site_factors(at(params), at(intermediates), at(g_taps))


def norm_factors(params, intermediates, g_taps):
  """Backward factor at every norm site: `<site>_scale` = mean_tokens rms(g)/r(z) and
  `<site>_backward` = |dL/dz|_F / |dL/dy|_F (from the VJP). DyT has no r: only `_backward`.

  Block sites on both branches are grouped by role (`norm`, or `norm_in`/`norm_out` for peri)
  with attention and MLP interleaved, so each array runs over the 2L sublayers in order. A
  site on one branch only (hybrid's `mlp_norm`, the per-head `q_norm`/`k_norm`/`v_norm`) is
  named by itself, one value per layer. Top-level norms (`final_norm`, `embed_norm`) give
  arrays of length 1.
  """
  out = {}
  sites = {path[-1]: ("blocks", *path) for path in _sites(g_taps["blocks"])}
  roles = sorted({s.removeprefix("attn_") for s in sites if s.startswith("attn_")} &
                 {s.removeprefix("mlp_") for s in sites if s.startswith("mlp_")})
  for role in roles:
    attn, mlp = (_factors(params, intermediates, g_taps, sites.pop(f"{b}_{role}")) for b in BRANCHES)
    # [L, 2] -> 2L: attn_1, mlp_1, attn_2, ...
    out |= {f"{role}_{what}": jnp.stack([attn[what], mlp[what]], -1).reshape(-1) for what in attn}
  for name, path in sites.items():
    out |= {f"{name}_{what}": v for what, v in _factors(params, intermediates, g_taps, path).items()}
  for site in ("embed_norm", "final_norm"):
    if site in g_taps:
      out |= {f"{site}_{what}": v[None] for what, v in _factors(params, intermediates, g_taps, (site,)).items()}
  return out
