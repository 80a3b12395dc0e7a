"""Every norm placement as a short declaration: data only (no jax, no nplace imports), on the
package's bottom floor, so that config validation reads the names here and the one Block
(nplace/model/block.py) reads the rest, both importing down.

A sublayer (F = attention or MLP, N a norm, l = 1..L the layer, dt the residual step) is

    h <- N_after( residual(l, L) * N_before(h) + dt * a * N_out(F(in_scale(l, L) * N_in(N_before(h)))) )

where a Placement says which of the norms exist (a missing N is the identity), the two scales,
whether `a` is a learnable ReZero scalar (else 1), the init multipliers, the final norm and
which theory curves its probes are drawn against. To add a placement: one entry in PLACEMENTS,
plus its formula in tests/reference.py.
"""
import dataclasses
import math
from typing import Callable

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
  theory: tuple[str, ...] = ()  # curves drawn next to its probes (nplace/probes/theory.py, CURVES)


POST, PRE = Sublayer((AFTER,)), Sublayer((IN,))
PLACEMENTS = {
    "post": Placement("N(h + dt F(h))", "Vaswani et al. 2017, arXiv 1706.03762",
                      POST, POST, final_norm=False, theory=("backward_product", "gram_similarity")),
    "pre": Placement("h + dt F(N(h))", "Xiong et al. 2020, arXiv 2002.04745 (GPT-2)", PRE, PRE),
    "peri": Placement("h + dt N_out(F(N_in(h)))", "Kim et al. 2025, arXiv 2502.02732",
                      Sublayer((IN, OUT)), Sublayer((IN, OUT)), theory=("rms_bound",)),
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

