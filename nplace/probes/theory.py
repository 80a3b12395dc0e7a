"""Predictions the probes are checked against (docs/science.md; the derived ones are tested).

(i)   the prefix-averaging Gram recursion: per-layer mean cosine similarity of a Post-LN
      stack at init, attention as the Cesaro average C, MLPs through their kernel maps;
(ii)  the branch gains an init scheme and width imply;
(iii) the Peri-LN growth bound rms(h_L) <= rms(h_0) + 2 L dt max|g|;
(iv)  the Post-LN backward factors 1/sqrt(1 + a^2) and their product down the stack.

Host-side numpy except (iii) and (iv), which also take traced arrays (the probe suite
evaluates them under jit). CURVES names the curves a placement declares
(nplace/placements.py, `theory`) and how each is drawn next to its probe.
"""
import dataclasses
import functools
from typing import Callable

import jax.numpy as jnp
import numpy as np

from nplace.model.layers import weight_std
from nplace.placements import PLACEMENTS
from nplace.probes import taps as taps_lib

_RHO_GRID = np.linspace(-1.0, 1.0, 401)


def normalize(K_XTT):
  """Unit diagonal: covariance -> cosine (what a norm with unit gain does to the Gram)."""
  d_XT = np.sqrt(np.diagonal(K_XTT, axis1=-2, axis2=-1))
  return K_XTT / (d_XT[..., :, None] * d_XT[..., None, :])


def mean_offdiag(K_XTT):
  """Mean off-diagonal cosine of a Gram matrix."""
  K = normalize(K_XTT)
  T = K.shape[-1]
  return (K.sum((-2, -1)) - T) / (T * (T - 1))


def _prefix_average(K, axis):
  """C applied along one axis of K (C K for axis -2, K C^T for -1) in O(T^2): running means."""
  i = np.arange(1, K.shape[axis] + 1, dtype=K.dtype)
  return np.cumsum(K, axis) / (i[:, None] if axis == -2 else i)


def _gelu_tanh(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _silu(x):
  return x / (1 + np.exp(-x))


@functools.lru_cache(maxsize=None)
def _kernel_table(mlp: str, q: float) -> np.ndarray:
  """E[phi(u) phi(v)] on _RHO_GRID, (u, v) Gaussian with variance q and correlation rho
  (Gauss-Hermite quadrature); SwiGLU's hidden unit is silu(a) * b, a and b independent."""
  z, w = np.polynomial.hermite_e.hermegauss(80)
  w = w / w.sum()
  rho = _RHO_GRID[:, None, None]
  u = np.sqrt(q) * z[None, :, None]
  v = np.sqrt(q) * (rho * z[None, :, None] + np.sqrt(1 - rho ** 2) * z[None, None, :])
  phi = _silu if mlp == "swiglu" else _gelu_tanh
  table = np.einsum("gij,i,j->g", phi(u) * phi(v), w, w)
  return table * q * _RHO_GRID if mlp == "swiglu" else table


def mlp_kernel(rho, q: float = 1.0, mlp: str = "gelu"):
  """Covariance of two MLP hidden units whose pre-activations have variance q and
  correlation rho: the MLP's map on the Gram matrix (up to the output gain)."""
  return np.interp(rho, _RHO_GRID, _kernel_table(mlp, float(q)))


def branch_gains(cfg) -> dict:
  """Variance gains of the branches at init for unit-variance input (ii):
  `attn` = d s_v^2 * d s_o^2 (the value-output path, before averaging); `mlp_q` = d s_in^2,
  the MLP pre-activation variance; `mlp_out` = F s_out^2, times the hidden covariance.
  The placement's init multipliers (DeepNet's beta, no depth scaling) and model.attn_out_scale apply."""
  d, F = cfg.d_model, cfg.d_ff or 4 * cfg.d_model
  p = PLACEMENTS[cfg.placement]
  b2, out = p.beta(cfg.n_layer) ** 2, p.depth_scaled_init
  std_o = cfg.attn_out_scale * weight_std(cfg, d, output=out)
  return {
      "attn": b2 * d * weight_std(cfg, d) ** 2 * b2 * d * std_o ** 2,
      "mlp_q": b2 * d * weight_std(cfg, d) ** 2,
      "mlp_out": b2 * F * weight_std(cfg, F, output=out) ** 2,
  }


def post_gram_recursion(K0_XTT, n_layer: int, attn_gain: float, mlp: str | None = None,
                        mlp_q: float = 1.0, mlp_out: float = 1.0, dt: float = 1.0):
  """Mean cosine similarity after each of n_layer Post-LN blocks, infinite width (i):
  K <- normalize(K + dt^2 s2 C K C^T), then (if mlp) K <- normalize(K + dt^2 mlp_out k(K)).
  K0 is the input's per-coordinate covariance [..., T, T]; returns [..., n_layer]."""
  K = np.asarray(K0_XTT, np.float64)
  out = []
  for _ in range(n_layer):
    K = normalize(K + dt ** 2 * attn_gain * _prefix_average(_prefix_average(K, -2), -1))
    if mlp is not None:
      K = normalize(K + dt ** 2 * mlp_out * mlp_kernel(np.clip(K, -1, 1), mlp_q, mlp))
    out.append(mean_offdiag(K))
  return np.stack(out, -1)


@functools.lru_cache(maxsize=32)
def post_similarity_at_init(cfg, T: int) -> np.ndarray:
  """(i) for a Post-LN model config at init with i.i.d. isotropic input tokens (K0 = I);
  attention taken as uniform (the prefix average). cfg must be hashable (frozen)."""
  gains = branch_gains(cfg)
  return post_gram_recursion(np.eye(T), cfg.n_layer, gains["attn"], cfg.mlp, gains["mlp_q"],
                             gains["mlp_out"], cfg.dt)


def peri_rms_bound(rms_h0, n_layer: int, dt: float, g_max):
  """(iii) rms(h_l) <= rms(h_0) + 2 l dt max|g| for l = 1..n_layer (RMSNorm, no bias):
  each sublayer adds dt N_out(.), whose rms is at most max|g_out|. Layers lead: [L, *rms_h0.shape]."""
  l = jnp.arange(1, n_layer + 1).reshape((-1,) + (1,) * jnp.ndim(rms_h0))
  return rms_h0 + 2 * dt * g_max * l


def post_backward_factor(a2):
  """(iv) one Post-LN site's rms(g)/r with unit-rms residual, unit gain and an
  uncorrelated branch of variance a2: r = sqrt(1 + a2)."""
  return 1 / jnp.sqrt(1 + a2)


def post_backward_product(factors_2L):
  """(iv) product of the 2L sublayer factors above each block output h_1..h_L (1 at h_L):
  the attenuation the residual gradient picks up from the norms alone."""
  above_2L = jnp.cumprod(jnp.asarray(factors_2L)[::-1])[::-1]  # above_2L[j] = prod_{i >= j}
  return jnp.concatenate([above_2L[2::2], jnp.ones(1, above_2L.dtype)])


def out_norm_cap(params):
  """The largest rms an output norm can give a token: max|g| for RMSNorm; for LayerNorm
  max over sites of max|g| + rms(b), since the centred, scaled input has rms <= 1 and rms
  is a norm (triangle inequality). So the Peri-LN bound holds for both norms."""
  caps = []
  for branch in ("attn", "mlp"):
    site = params["blocks"][f"{branch}_norm_out"]
    cap_L = jnp.max(jnp.abs(site["scale"]), -1)
    if "bias" in site:
      cap_L = cap_L + jnp.sqrt(jnp.mean(jnp.square(site["bias"]), -1))
    caps.append(cap_L)
  return jnp.max(jnp.stack(caps))


def _rms_bound(cfg, params, intermediates, results):
  """(iii) on this batch: rms(h_0) measured, the output norms' cap from the parameters."""
  h0 = taps_lib.sown(intermediates["h0"]).astype(jnp.float32)
  return peri_rms_bound(jnp.sqrt(jnp.mean(h0 * h0)), cfg.n_layer, cfg.dt, out_norm_cap(params))


def _backward_product(cfg, params, intermediates, results):
  """(iv) from the measured top gradient and the measured sites' factors (DyT has none)."""
  if "norm_scale" not in results:
    return None
  return results["grad_h"][-1] * post_backward_product(results["norm_scale"])


def _gram_similarity(cfg, seq_len):
  """(i) at init; the recursion's unit diagonal is a norm's doing, so not for DyT."""
  return None if cfg.norm == "dyt" else post_similarity_at_init(cfg, seq_len)


@dataclasses.dataclass(frozen=True)
class Curve:
  """A theory curve drawn next to probe `probe` in its images: computed in the probe suite from
  the measurements (`measured(cfg, params, intermediates, results)`, traced) or on the host
  from the config alone (`at_init(cfg, seq_len)`, a prediction for step 0). Either may return
  None where the curve does not apply to this model."""
  probe: str
  label: Callable  # cfg -> legend text, saying what the curve assumes
  measured: Callable | None = None
  at_init: Callable | None = None


CURVES = {
    "rms_bound": Curve("rms", lambda cfg: "bound rms(h_0) + 2l dt max|g|"
                       + ("" if cfg.norm == "rmsnorm" else " + rms(b)"), measured=_rms_bound),
    "backward_product": Curve("grad_h", lambda cfg: "|dL/dh_L| x norm factors above", measured=_backward_product),
    "gram_similarity": Curve("similarity", lambda cfg: "init theory: i.i.d. tokens, uniform attention",
                             at_init=_gram_similarity),
}


def curves(cfg) -> list[Curve]:
  """The curves cfg's placement declares."""
  return [CURVES[name] for name in PLACEMENTS[cfg.placement].theory]
