"""The whole probe suite as one jit-able function of (params, batch)."""
import dataclasses
import functools

import jax
import jax.numpy as jnp

from nplace.config import MeshConfig, ModelConfig, ProbeConfig
from nplace.probes import attention, gradients, jacobians, representations, theory
from nplace.probes import taps as taps_lib
from nplace.runtime import compiler_fixes, sharding

THEORY_SUFFIX = "_theory"  # `<name>_theory` is a prediction drawn next to probe `<name>`


def run_suite(cfg, params, batch_BT1, key, probe_config) -> dict:
  """Probe name -> per-layer array, on a `[B, T+1]` batch.

  Per layer l = 1..L (block outputs): grad_h, grad_<matrix>, local_sensitivity, similarity,
  similarity_centered, rank_ratio, mean_abs, var_entry, var_data, rms, max_abs, attention_tv,
  attention_entropy.
  Per source layer l = 0..L-1 of J_{l->L}: jacobian_frobenius, jacobian_spectral (on the
  first spectral_batch sequences; absent when power_iters = 0, as it costs O(L^2) passes).
  Per sublayer (2L): <role>_scale, <role>_backward (role norm | norm_in | norm_out); per
  layer for a site on one branch (mlp_norm, q_norm, k_norm, v_norm); no _scale with DyT.
  Length 1: loss, final_norm_*/embed_norm_* factors.
  Theory: rms_theory (Peri-LN bound), grad_h_theory (Post-LN factor product).
  Attention runs the einsum path whatever model.attention_impl says (einsum_attention).
  `cfg` is a ModelConfig, `probe_config` a ProbeConfig (both static under jit).
  """
  cfg = einsum_attention(cfg)
  tokens_BT = batch_BT1[:, :-1]
  taps = taps_lib.zero_taps(cfg, tokens_BT)
  loss, intermediates, g_params, g_taps = gradients.backward(cfg, params, batch_BT1, taps)
  h_LBTD = taps_lib.hidden_LBTD(intermediates)
  k_frob, k_spec, k_local = jax.random.split(_rbg(key), 3)
  results = {
      "loss": loss[None],
      "grad_h": gradients.residual_grad(g_taps),
      **gradients.param_grads(g_params),
      **gradients.norm_factors(params, intermediates, g_taps),
      "jacobian_frobenius": jacobians.frobenius(cfg, params, tokens_BT, taps, k_frob,
                                                probe_config.hutchinson_probes),
      "local_sensitivity": jacobians.local_sensitivity(cfg, params, intermediates, k_local,
                                                       probe_config.hutchinson_probes),
      "similarity": representations.similarity(h_LBTD),
      "similarity_centered": representations.similarity(h_LBTD, centered=True),
      "rank_ratio": representations.rank_ratio(h_LBTD),
      **representations.moments(h_LBTD),
      "attention_tv": attention.prefix_average_tv(taps_lib.sown(intermediates["blocks"]["attn"]["probs"])),
      "attention_entropy": attention.entropy(taps_lib.sown(intermediates["blocks"]["attn"]["probs"])),
  }
  if probe_config.power_iters:
    spectral_BT = tokens_BT[:probe_config.spectral_batch]
    results["jacobian_spectral"] = jacobians.spectral(
        cfg, params, spectral_BT, taps_lib.zero_taps(cfg, spectral_BT), k_spec, probe_config.power_iters)
  return results | _theory(cfg, params, intermediates, results)


def einsum_attention(cfg):
  """`cfg` with attention_impl=xla: the probes read the attention probabilities, and take
  forward-mode derivatives, which the fused kernels (custom VJPs: cuDNN's, splash) lack."""
  return dataclasses.replace(cfg, attention_impl="xla")


def _rbg(key):
  """An RBG key seeded from `key`'s data: the probes need Gaussian vectors, not threefry's
  stream, and threefry sampling costs ~3 s of CPU compile per call site."""
  return jax.random.wrap_key_data(jnp.resize(jax.random.key_data(key).ravel(), 4), impl="rbg")


def _theory(cfg, params, intermediates, results) -> dict:
  """The placement's curves that need this batch's measurements (the rest: summaries)."""
  out = {}
  for curve in theory.curves(cfg):
    value = curve.measured(cfg, params, intermediates, results) if curve.measured else None
    if value is not None:
      out[curve.probe + THEORY_SUFFIX] = value
  return out


@functools.cache
def _jitted(layout):
  """run_suite's jit for one layout (None, or a (mesh, MeshConfig) pair traced under
  sharding.under_layout): jit's own cache does not key on the layout, which is read at trace
  time, so each layout gets its own jit, kept for the process (the compiled suites too)."""
  options = compiler_fixes.forward_mode(layout[0] if layout else None)
  fn = jax.jit(run_suite, static_argnums=(0, 4), compiler_options=options)
  return fn if layout is None else sharding.under_layout(fn, *layout)


def _jitted_and_args(config, mesh):
  jitted = _jitted(None if mesh is None else (mesh, MeshConfig.of(config.mesh)))
  return jitted, ModelConfig.of(config.model), ProbeConfig.of(config.probe)


def suite(config, params, batch_BT1, key, mesh=None) -> dict:
  """run_suite, compiled once per (model config, probe config, layout); with
  `mesh`, laid out over it as the trainer's probe hook runs it (its estimates spread over the
  devices its few sequences leave free)."""
  jitted, cfg, probe_config = _jitted_and_args(config, mesh)
  return jitted(cfg, params, batch_BT1, key, probe_config)


def lower(config, params, batch_BT1, key, mesh=None):
  """`suite`'s lowering (for its compiled memory, compile time or HLO), arguments may be shapes."""
  jitted, cfg, probe_config = _jitted_and_args(config, mesh)
  return jitted.lower(cfg, params, batch_BT1, key, probe_config)
