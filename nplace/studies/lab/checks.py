"""The lab's theory checks as pure functions of probe results: the entries of a model's scorecard.

Each check reads numbers measured on one model (`nplace.probes.suite` at init, and the loss's
curvature, `nplace.probes.curvature`, at init and after a short Adam warmup: measure.py);
`checks` turns them into the scorecard's entries, each a measurement: the top eigenvalue
lambda_P of Adam's preconditioned Hessian P^{-1} H after WARMUP_STEPS steps of the config's AdamW
at the constant rate LR_REF, P = sqrt(v_hat) + eps its preconditioner, H the loss's Hessian on
the data's first validation rows (the curvature Adam sees once its preconditioner has formed:
Cohen et al. 2022's adaptive edge of stability); gradient descent's 2 / lambda_H at init; the
product of the block Jacobians' norm bounds (Kan et al.'s backward stability); hidden-state
growth, scale invariance, token similarity and the norms' backward factors. No rule turns them
into a predicted learning rate: the ones that did (versions 1-4) showed no skill against the
grids (results/archive/).
"""
import math

import jax
import numpy as np

from nplace.probes import curvature
from nplace.studies import fits

# Adam's second moment averages over ~20 steps (1 / (1 - b2) at the grids' b2 = 0.95): by 25 its
# preconditioner has formed, and the warmup stays a small part of the lab's time.
WARMUP_STEPS = 25
# The warmup's rate, constant (no schedule): the curvature must not depend on the rate a grid
# trains at. 1e-3 is the lowest rate of study A's CPU grids, one every arm trains at.
LR_REF = 1e-3
# Hessian-vector products per top eigenvalue: the error of the Rayleigh quotient falls as
# (lambda_2 / lambda_1)^38, 2% at a gap of 0.9; 40 products a model keep `nplace lab` fast.
POWER_ITERATIONS = 20
SCALE = 10.0  # the output projections' multiplier c of the scale-invariance check (reported)
CLONES = 0.9  # top-layer mean cosine at or above which the tokens count as clones (reported)
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


def gd_max_lr(sharpness: float) -> float:
  """Gradient descent's edge of stability over `sharpness`, 2 / sharpness: the largest rate at
  which plain gradient descent on the quadratic model stays stable. 0, no stable rate, when the
  sharpness is not finite and positive (no upward curvature found)."""
  return curvature.adam_stability_threshold(0.0) / sharpness if 0 < sharpness < math.inf else 0.0


def backward_stability(block_jacobian_L) -> float:
  """log10 prod_l (1 + |J_l - I|): the product over depth of the per-block Jacobian norm bounds
  |J_l| <= 1 + |J_l - I| (Kan et al.'s backward stability), with no activation-growth term."""
  return float(np.sum(np.log10(1 + np.asarray(block_jacobian_L, np.float64))))


def checks(results: dict, rms_h0: float, base_L, scaled_L, sharpness: dict) -> dict:
  """The scorecard of one model from its suite results, rms(h_0), |J_l - I| at c = 1 and
  SCALE, and `sharpness`: the top Hessian eigenvalue at init (`init`) and the preconditioned
  one after the warmup (`preconditioned`)."""
  grad_L, rms_L = np.asarray(results["grad_h"]), np.asarray(results["rms"])
  top = float(results["similarity"][-1])
  return {
      "preconditioned_sharpness": sharpness["preconditioned"],
      "sharpness_init": sharpness["init"], "gd_max_lr": gd_max_lr(sharpness["init"]),
      "backward_stability": backward_stability(base_L),
      "rms_h0": float(rms_h0), "rms_top": float(rms_L[-1]), "growth": growth(rms_L),
      "scale_ratio": scale_ratio(base_L, scaled_L),
      "top_similarity": top, "clones": top >= CLONES,
      "backward_products": backward_products(results),
      "grad_ratio": float(grad_L[0] / grad_L[-1]),
      "jacobian_0L": float(results["jacobian_frobenius"][0]),
  }
