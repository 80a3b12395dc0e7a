"""Invariants the probes rely on, over random weights and inputs (hypothesis, few examples)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nplace.config import ModelConfig
from nplace.model.block import Block
from nplace.probes import taps as taps_lib, theory
from conftest import tiny_config
from nplace.studies.lab.checks import scale_outputs
from test_model import layer
import probe_reference as ref

FEW = settings(max_examples=5, deadline=None)


@pytest.fixture(scope="module", params=["rmsnorm", "layernorm"])
def peri_stack(request):
  """A compiled peri model -> (rms(h_0), rms(h_L), the output norms' rms cap) per token."""
  cfg = tiny_config(placement="peri", norm=request.param, n_layer=3, dt=0.5).model

  @jax.jit
  def run(params, tokens):
    _, inter = taps_lib.forward(cfg, params, tokens, taps_lib.zero_taps(cfg, tokens))
    rms = lambda h: jnp.sqrt(jnp.mean(h * h, -1))
    return rms(taps_lib.sown(inter["h0"])), rms(taps_lib.hidden_LBTD(inter)), theory.out_norm_cap(params)

  return cfg, run


@pytest.mark.slow
@FEW
@given(log_scale=st.floats(-3, 3), seed=st.integers(0, 2 ** 16))
def test_peri_growth_bound_holds(peri_stack, log_scale, seed):
  """rms(h_l) <= rms(h_0) + 2 l dt cap per token (cap = max|g|, + rms(b) for LayerNorm), for
  weights, gains and biases of any scale."""
  cfg, run = peri_stack
  params = ref.random_params(cfg, seed, std=10.0 ** log_scale)
  tokens = np.random.default_rng(seed + 1).integers(0, cfg.vocab_size, (2, 12))
  rms0_BT, rms_LBT, cap = run(params, tokens)
  bound_LBT = theory.peri_rms_bound(rms0_BT, cfg.n_layer, cfg.dt, cap)
  np.testing.assert_array_less(rms_LBT, bound_LBT * (1 + 1e-5))


def block_jacobian(cfg):
  """h [T, d] -> dBlock/dh as a (T d) x (T d) matrix, compiled once."""
  block = Block(ModelConfig.of(cfg))
  f = lambda p, h: block.apply({"params": p}, h[None], None)[0][0]
  return jax.jit(lambda p, h: jax.jacfwd(lambda x: f(p, x))(h).reshape(h.size, h.size))


@pytest.fixture(scope="module")
def jacobian_fns():
  cfgs = {p: tiny_config(placement=p, norm="rmsnorm", norm_eps=1e-12).model for p in ("peri", "pre")}
  return {p: (cfg, block_jacobian(cfg)) for p, cfg in cfgs.items()}


@FEW
@given(c=st.floats(0.05, 20.0), seed=st.integers(0, 2 ** 16))
def test_block_jacobian_scale_invariance(jacobian_fns, c, seed):
  """Scaling output projections by c: Peri's block Jacobian unchanged, Pre's branch Jacobian x c."""
  h = np.random.default_rng(seed).normal(size=(6, 32)).astype(np.float32)
  cfg, jac = jacobian_fns["peri"]
  p = layer(ref.random_params(cfg, seed), 0)
  np.testing.assert_allclose(jac(scale_outputs(p, c), h), jac(p, h), rtol=1e-3, atol=1e-4)
  cfg, jac = jacobian_fns["pre"]
  p = scale_outputs(layer(ref.random_params(cfg, seed), 0), 0.0, ["mlp"])  # attention branch alone
  eye = np.eye(h.size)
  np.testing.assert_allclose(jac(scale_outputs(p, c, ["attn"]), h) - eye, c * (jac(p, h) - eye),
                             rtol=1e-3, atol=1e-4 * c)
