"""Gradient probes from one backward pass: residual-stream cotangents, per-matrix parameter
gradients, and the backward factor of every norm site."""
import jax
import jax.numpy as jnp

from nplace import model
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
    return model.cross_entropy(logits, targets_BT), intermediates

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


def _site_factors(norm_params, r_XBT, ct):
  """(s, measured) at one norm site; leading axes X (layers, or none at top level) are kept."""
  g = norm_params["scale"]
  s = jnp.sqrt(jnp.mean(jnp.square(g), -1)) * jnp.mean(1.0 / r_XBT, axis=(-2, -1))
  dz, dy = ct["z"].astype(jnp.float32), ct["y"].astype(jnp.float32)
  tokens = (-3, -2, -1)
  return s, jnp.sqrt(jnp.sum(dz * dz, tokens) / jnp.sum(dy * dy, tokens))


def norm_factors(params, intermediates, g_taps):
  """Backward factor at every norm site: `<site>_scale` = mean_tokens rms(g)/r(z) and
  `<site>_backward` = |dL/dz|_F / |dL/dy|_F (from the VJP).

  In-block sites are grouped by role (`norm`, or `norm_in`/`norm_out` for peri) with
  attention and MLP interleaved, so each array runs over the 2L sublayers in order.
  Top-level norms (`final_norm`, `embed_norm`) give arrays of length 1.
  """
  out = {}
  roles = sorted({site.removeprefix("attn_") for site in g_taps["blocks"] if site.startswith("attn_")})
  for role in roles:
    pairs = [_site_factors(params["blocks"][f"{b}_{role}"],
                           taps_lib.sown(intermediates["blocks"][f"{b}_{role}"]["r"]),
                           g_taps["blocks"][f"{b}_{role}"]) for b in BRANCHES]
    # [L, 2] -> 2L: attn_1, mlp_1, attn_2, ...
    out[f"{role}_scale"] = jnp.stack([p[0] for p in pairs], -1).reshape(-1)
    out[f"{role}_backward"] = jnp.stack([p[1] for p in pairs], -1).reshape(-1)
  for site in ("embed_norm", "final_norm"):
    if site in g_taps:
      s, measured = _site_factors(params[site], taps_lib.sown(intermediates[site]["r"]), g_taps[site])
      out[f"{site}_scale"], out[f"{site}_backward"] = s[None], measured[None]
  return out
