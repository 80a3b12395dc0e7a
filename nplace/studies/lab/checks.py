"""The lab's theory checks as pure functions of probe results, and the stability rule.

Each check reads numbers the probe suite measured (`nplace.probes.suite`) on one model at
init; `checks` turns them into the scorecard's entries and `score` into one number that
ranks placements. The rule: the score is how many orders of magnitude the model is off
balance, summed over five checks,

  |log10 grad(h_1)/grad(h_L)| + |log10 |J_{0->L}|| + |log10 rms(h_L)/rms(h_0)|
  + |log10 (|J_l - I| with the output projections x c) / |J_l - I|| - log10(1 - top similarity),

lower = more stable, and a placement is predicted to train stably when it is below 1.
"""
import math

import jax
import numpy as np

from nplace.studies import fits

RULE_VERSION = 2
RULE_HISTORY = (  # (version, commit, what changed): a rule changed after results is a new version
    (1, "e4f52bc", "the five terms; a block that is the identity at init (ReZero) made the scale check "
                   "NaN, and so its score"),
    (2, "16a65bc", "such a block counts as scale-invariant (ratio 1); made minutes before the placement "
                   "grid's results (results/v0/), so those do not test it blind: the LR-sensitivity "
                   "ranking is its first test fixed beforehand"),
)
SCALE = 10.0  # the output projections' multiplier c of the scale-invariance check
CLONES = 0.9  # top-layer mean cosine at or above which the tokens count as clones
STABLE_BELOW = 1.0  # score below which a placement is predicted to train stably
RULE = (
    "score = |log10 grad(h_1)/grad(h_L)| + |log10 |J_{0->L}|| + |log10 rms(h_L)/rms(h_0)| "
    f"+ |log10 block-Jacobian ratio at c={SCALE:g}| + -log10(1 - top similarity): how many "
    "orders of magnitude the model at init is off balance (gradients, end-to-end sensitivity, "
    "activation growth, sensitivity to its own weight scale, token clones); "
    f"predicted stable when score < {STABLE_BELOW:g}, and a higher score ranks as less stable")
_OUTPUT_PROJECTIONS = (("attn", "o"), ("mlp", "fc_out"))  # the branches' last linear maps


def scale_outputs(params, c: float, branches=("attn", "mlp")):
  """params with the output projection (kernel and bias) of every sublayer in `branches`
  multiplied by c, so each such branch F becomes c F, wherever the blocks sit."""
  pairs = [pair for pair in _OUTPUT_PROJECTIONS if pair[0] in branches]

  def scaled(path, leaf):
    names = tuple(getattr(k, "key", None) for k in path)
    hit = any(names[i:i + 2] == pair for pair in pairs for i in range(len(names) - 1))
    return leaf * c if hit else leaf
  return jax.tree_util.tree_map_with_path(scaled, params)


def growth(rms_L) -> dict:
  """rms(h_l) over l = 1..L fitted by a line and by an exponential (R² on the values):
  the slope per layer, the rate per layer (e^rate per layer), both R², the better fit."""
  rms_L = np.asarray(rms_L, np.float64)
  layers = np.arange(1, len(rms_L) + 1)
  slope, r2_lin = fits.linear_fit(layers, rms_L)
  rate, r2_exp = fits.exponential_fit(layers, rms_L)
  return {"slope": slope, "r2_linear": r2_lin, "rate": rate, "r2_exponential": r2_exp,
          "better": fits.better(r2_lin, r2_exp)}


def scale_ratio(base_L, scaled_L) -> float:
  """Geometric mean over blocks of |J_l - I| with outputs scaled by c over |J_l - I| as
  initialised: 1 for a scale-invariant block, c for a branch linear in its output scale.
  A block that is the identity at any scale (ReZero at init: 0 and 0) counts as invariant."""
  base_L, scaled_L = np.asarray(base_L, np.float64), np.asarray(scaled_L, np.float64)
  identity = (base_L == 0) & (scaled_L == 0)
  ratio_L = np.where(identity, 1.0, scaled_L / np.where(identity, 1.0, base_L))
  return float(np.exp(np.mean(np.log(ratio_L))))


def backward_products(results: dict) -> dict:
  """Role -> product of the measured norm backward factors |dL/dz| / |dL/dy| over its 2L
  in-block sites (`norm`, `norm_in`, `norm_out`, ... whatever the placement has)."""
  return {name.removesuffix("_backward"): float(np.prod(np.asarray(values, np.float64)))
          for name, values in results.items()
          if name.endswith("_backward") and len(values) > 1}


def checks(results: dict, rms_h0: float, base_L, scaled_L) -> dict:
  """The scorecard of one model from its suite results, rms(h_0) and |J_l - I| at c = 1, SCALE."""
  grad_L, rms_L = np.asarray(results["grad_h"]), np.asarray(results["rms"])
  top = float(results["similarity"][-1])
  return {
      "rms_h0": float(rms_h0), "rms_top": float(rms_L[-1]), "growth": growth(rms_L),
      "scale_ratio": scale_ratio(base_L, scaled_L),
      "top_similarity": top, "clones": top >= CLONES,
      "backward_products": backward_products(results),
      "grad_ratio": float(grad_L[0] / grad_L[-1]),
      "jacobian_0L": float(results["jacobian_frobenius"][0]),
  }


def _orders(x: float) -> float:
  """|log10 x|: orders of magnitude away from 1; inf for 0, a negative or a non-finite x."""
  return abs(math.log10(x)) if 0 < x < math.inf else math.inf


def terms(card: dict) -> dict:
  """The score's terms, each in orders of magnitude (0 = balanced)."""
  return {
      "gradients": _orders(card["grad_ratio"]),
      "jacobian": _orders(card["jacobian_0L"]),
      "growth": _orders(card["rms_top"] / card["rms_h0"]),
      "scale": _orders(card["scale_ratio"]),
      "clones": _orders(max(1.0 - card["top_similarity"], 1e-6)),
  }


def score(card: dict) -> float:
  """RULE's score (inf when a measurement is not finite: a model broken at init)."""
  return float(sum(terms(card).values()))


def prediction(card: dict) -> str:
  """One line: the verdict and the score's largest term."""
  parts, s = terms(card), score(card)
  worst = max(parts, key=parts.get)
  verdict = "stable" if s < STABLE_BELOW else "unstable"
  return f"{verdict} (score {s:.2f}; largest term: {worst} {parts[worst]:.2f})"
