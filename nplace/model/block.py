"""The one Block: a layer of the decoder, built from its placement's declaration
(nplace/placements.py holds the formula every placement instantiates)."""
import functools

import flax.linen as nn
import jax.numpy as jnp

from nplace.config import ModelConfig
from nplace.model.layers import RESIDUAL, Attention, Mlp, Norm
from nplace.placements import AFTER, BEFORE, IN, OUT, PLACEMENTS, POST, Sublayer, norm_name
from nplace.runtime.sharding import constrain


def _sublayer(mdl, h_BTD, l, dt, position, branch: str, form: Sublayer):
  """One sublayer of the formula above; submodules named so both forms of mix share them."""
  cfg = mdl.cfg
  p, L = PLACEMENTS[cfg.placement], cfg.n_layer
  norm = {site: Norm(cfg, name=norm_name(branch, form, site)) if site in form.norms else (lambda x: x)
          for site in (BEFORE, IN, OUT, AFTER)}
  beta = p.beta(L)
  if branch == "attn":
    qkv = tuple(n for n in "qkv" if n in form.qkv or (cfg.qk_norm and n in "qk"))
    F = Attention(cfg, qkv_norms=qkv, gain=beta, depth_scaled=p.depth_scaled_init, name=branch)
  else:
    F = Mlp(cfg, gain=beta, depth_scaled=p.depth_scaled_init, name=branch)
  h_BTD = norm[BEFORE](h_BTD)
  x_BTD = norm[IN](h_BTD) * jnp.asarray(p.in_scale(l, L), h_BTD.dtype)
  y_BTD = norm[OUT](F(x_BTD, position) if branch == "attn" else F(x_BTD))
  if p.rezero:
    alpha = mdl.param(f"{branch}_alpha", nn.with_logical_partitioning(nn.initializers.zeros_init(), ()), ())
    y_BTD = y_BTD * alpha.astype(y_BTD.dtype)  # a float32 parameter: the branch stays in the compute dtype
  dt = cfg.dt if dt is None else dt.astype(h_BTD.dtype)
  return norm[AFTER](jnp.asarray(p.residual(l, L), h_BTD.dtype) * h_BTD + dt * y_BTD)


class Block(nn.Module):
  """One layer, l = 1..L (a scanned input): attention then MLP, as the placement declares. `dt`,
  when given, is the residual step as an array (batched trials each train their own);
  otherwise cfg.dt. `position`: decoding with the KV cache (see Attention)."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h_BTD, l, dt=None, position=None):
    p = PLACEMENTS[self.cfg.placement]
    h_BTD = constrain(h_BTD, RESIDUAL)
    for branch in ("attn", "mlp"):
      form = getattr(p, branch)
      if p.post_layers is None:
        h_BTD = _sublayer(self, h_BTD, l, dt, position, branch, form)
      else:  # one stack, a per-layer switch (lax.cond: only the taken form runs)
        post, rest = (functools.partial(_sublayer, branch=branch, form=f) for f in (POST, form))
        h_BTD = nn.cond(l <= p.post_layers(self.cfg), post, rest, self, h_BTD, l, dt, position)
    h_BTD = self.perturb("h", constrain(h_BTD, RESIDUAL))
    self.sow("intermediates", "h", h_BTD)
    return h_BTD, None
