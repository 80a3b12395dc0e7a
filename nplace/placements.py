"""Every norm placement as a short declaration, and the Block that reads them.

A sublayer (F = attention or MLP, N a norm, l = 1..L the layer, dt the residual step) is

    h <- N_after( residual(l, L) * N_before(h) + dt * a * N_out(F(in_scale(l, L) * N_in(N_before(h)))) )

where a Placement says which of the norms exist (a missing N is the identity), the two scales,
whether `a` is a learnable ReZero scalar (else 1), the init multipliers and the final norm.
To add a placement: one entry in PLACEMENTS (and its name in config.PLACEMENTS), plus its
formula in tests/reference.py.
"""
import dataclasses
import functools
import math
from typing import Callable

import flax.linen as nn
import jax.numpy as jnp

from nplace.layers import RESIDUAL, Attention, Mlp, Norm, constrain

BEFORE, IN, OUT, AFTER = "before", "in", "out", "after"  # where a norm sits in a sublayer


def _one(l, L):
  return 1.0


@dataclasses.dataclass(frozen=True)
class Sublayer:
  norms: tuple[str, ...] = ()  # BEFORE (on the stream: residual and F see N(h)), IN, OUT, AFTER
  qkv: tuple[str, ...] = ()  # attention only: per-head norms on these projections ("q", "k", "v")


@dataclasses.dataclass(frozen=True)
class Placement:
  formula: str  # one line, for `nplace info --placements`
  paper: str
  attn: Sublayer
  mlp: Sublayer
  residual: Callable = _one  # (l, L) -> scale of the residual path
  in_scale: Callable = _one  # (l, L) -> scale of F's input (after N_in)
  rezero: bool = False  # F's output times a learnable scalar per sublayer, 0 at init
  beta: Callable = lambda L: 1.0  # init multiplier of v, attention out, MLP in (and gate), MLP out
  depth_scaled_init: bool = True  # GPT-2's 1/sqrt(2L) on output projections (init=gpt2)
  final_norm: bool = True  # a norm before the LM head
  post_layers: Callable | None = None  # model cfg -> k: layers l <= k take the `post` sublayers


POST, PRE = Sublayer((AFTER,)), Sublayer((IN,))
PLACEMENTS = {
    "post": Placement("N(h + dt F(h))", "Vaswani et al. 2017, arXiv 1706.03762",
                      POST, POST, final_norm=False),
    "pre": Placement("h + dt F(N(h))", "Xiong et al. 2020, arXiv 2002.04745 (GPT-2)", PRE, PRE),
    "peri": Placement("h + dt N_out(F(N_in(h)))", "Kim et al. 2025, arXiv 2502.02732",
                      Sublayer((IN, OUT)), Sublayer((IN, OUT))),
    "reorder": Placement("h + dt N(F(h))", "OLMo 2, arXiv 2501.00656",
                         Sublayer((OUT,)), Sublayer((OUT,))),
    "deepnorm": Placement("N((2L)^(1/4) h + dt F(h)), v/o/MLP init x (8L)^(-1/4)",
                          "DeepNet, Wang et al. 2022, arXiv 2203.00555", POST, POST,
                          residual=lambda l, L: (2 * L) ** 0.25, beta=lambda L: (8 * L) ** -0.25,
                          depth_scaled_init=False, final_norm=False),
    "mix": Placement("post for l <= floor(f L), pre above (f = mix_post_fraction)",
                     "Mix-LN, Li et al. 2024, arXiv 2412.13795", PRE, PRE,
                     post_layers=lambda m: math.floor(m.mix_post_fraction * m.n_layer)),
    "lns": Placement("h + dt F(N(h) / sqrt(l))", "LayerNorm Scaling, Sun et al. 2025, arXiv 2502.05795",
                     PRE, PRE, in_scale=lambda l, L: l ** -0.5, depth_scaled_init=False),
    "rezero": Placement("h + dt a F(h), a = 0 at init, no norm", "ReZero, Bachlechner et al. 2020, arXiv 2003.04887",
                        Sublayer(), Sublayer(), rezero=True, final_norm=False),
    "hybrid": Placement("attn: h + dt F(h), N on q, k, v; MLP: N(h) + dt F(N(h))",
                        "HybridNorm, Zhuo et al. 2025, arXiv 2503.04598",
                        Sublayer(qkv=("q", "k", "v")), Sublayer((BEFORE,))),
}
OPTIONS = {  # orthogonal to the placement: name -> (formula, paper)
    "model.qk_norm": ("per-head N on q and k", "Dehghani et al. 2023, arXiv 2302.05442"),
    "model.norm=dyt": ("gamma tanh(alpha x) + beta for every N, scalar alpha = 0.5 at init",
                       "DyT, Zhu et al. 2025, arXiv 2503.10622"),
    "model.mix_post_fraction": ("f of mix (default 0.25)", "Mix-LN, Li et al. 2024, arXiv 2412.13795"),
}


def norm_name(branch: str, form: Sublayer, site: str) -> str:
  """`attn_norm` where the sublayer has one norm, `attn_norm_in` ... where it has several."""
  return f"{branch}_norm" if len(form.norms) == 1 else f"{branch}_norm_{site}"


def _sublayer(mdl, h_BTD, l, branch: str, form: Sublayer):
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
  y_BTD = norm[OUT](F(norm[IN](h_BTD) * jnp.asarray(p.in_scale(l, L), h_BTD.dtype)))
  if p.rezero:
    y_BTD = y_BTD * mdl.param(f"{branch}_alpha", nn.with_logical_partitioning(nn.initializers.zeros_init(), ()), ())
  return norm[AFTER](jnp.asarray(p.residual(l, L), h_BTD.dtype) * h_BTD + cfg.dt * y_BTD)


class Block(nn.Module):
  """One layer, l = 1..L (a scanned input): attention then MLP, as the placement declares."""
  cfg: object

  @nn.compact
  def __call__(self, h_BTD, l):
    p = PLACEMENTS[self.cfg.placement]
    h_BTD = constrain(h_BTD, RESIDUAL)
    for branch in ("attn", "mlp"):
      form = getattr(p, branch)
      if p.post_layers is None:
        h_BTD = _sublayer(self, h_BTD, l, branch, form)
      else:  # one stack, a per-layer switch (lax.cond: only the taken form runs)
        post, rest = (functools.partial(_sublayer, branch=branch, form=f) for f in (POST, form))
        h_BTD = nn.cond(l <= p.post_layers(self.cfg), post, rest, self, h_BTD, l)
    h_BTD = self.perturb("h", constrain(h_BTD, RESIDUAL))
    self.sow("intermediates", "h", h_BTD)
    return h_BTD, None
