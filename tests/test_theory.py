"""nplace.probes.theory: the Gram recursion against docs/science.md's table and against a wide model,
kernel maps, branch gains, and the Post-LN factor product."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplace.config import ModelConfig, experiment
from nplace.model import decoder
from nplace.model.layers import cesaro
from nplace.probes import representations, theory
from nplace.probes import taps as taps_lib
from conftest import tiny_config


def test_gram_recursion_reproduces_table():
  """docs/science.md: mean cosine at T = 1024 for an attention-only Post-LN stack."""
  sim = theory.post_gram_recursion(np.eye(1024), 12, attn_gain=1.0)
  np.testing.assert_allclose(sim[[0, 1, 3, 7, 11]], [0.002, 0.009, 0.088, 0.72, 0.95], atol=0.006, rtol=0.05)
  sim = theory.post_gram_recursion(np.eye(1024), 24, attn_gain=0.25)
  np.testing.assert_allclose(sim[[3, 7, 11, 23]], [0.005, 0.032, 0.13, 0.76], atol=0.006, rtol=0.05)


def test_one_average_of_isotropic_tokens():
  """cos(y_i, y_k) = sqrt(min/max) after one uniform causal average (no residual)."""
  T = 9
  C = np.asarray(cesaro(T), np.float64)
  K = theory.normalize(C @ C.T)
  i = np.arange(1, T + 1)
  np.testing.assert_allclose(K, np.sqrt(np.minimum.outer(i, i) / np.maximum.outer(i, i)), rtol=1e-12)


def test_mlp_kernel_maps():
  rho = np.linspace(0.05, 0.95, 19)
  gelu = theory.mlp_kernel(rho, 1.0, "gelu") / theory.mlp_kernel(1.0, 1.0, "gelu")
  swiglu = theory.mlp_kernel(rho, 1.0, "swiglu") / theory.mlp_kernel(1.0, 1.0, "swiglu")
  assert np.all(swiglu <= rho)  # SwiGLU slows collapse everywhere
  # GELU raises correlation only below rho ~ 0.77 (unit pre-activation variance): its
  # mean output lifts small rho, but near 1 its normalised slope exceeds 1 (checked by Monte Carlo).
  assert np.all(gelu[rho < 0.75] >= rho[rho < 0.75]) and np.all(gelu[rho > 0.8] < rho[rho > 0.8])
  z = np.random.default_rng(0).normal(size=(4, 400_000))
  pair = lambda r, a, b: (np.sqrt(2) * z[a], np.sqrt(2) * (r * z[a] + np.sqrt(1 - r ** 2) * z[b]))
  for r in (0.3, 0.8):  # against Monte Carlo, pre-activation variance 2
    u, v = pair(r, 0, 1)
    gelu_uv = np.mean(jax.nn.gelu(u, approximate=True) * jax.nn.gelu(v, approximate=True))
    np.testing.assert_allclose(theory.mlp_kernel(r, 2.0, "gelu"), gelu_uv, rtol=0.02)
    # SwiGLU silu(a) b, the up projection b drawn apart from the gate a: its covariance q rho is a
    # factor the ratios above divide out
    (a_u, a_v), (b_u, b_v) = pair(r, 0, 1), pair(r, 2, 3)
    swiglu_uv = np.mean(jax.nn.silu(a_u) * b_u * jax.nn.silu(a_v) * b_v)
    np.testing.assert_allclose(theory.mlp_kernel(r, 2.0, "swiglu"), swiglu_uv, rtol=0.03)


def test_branch_gains():
  vp = theory.branch_gains(ModelConfig.of(experiment("deep48").model))
  np.testing.assert_allclose(vp["attn"], 1.0)
  np.testing.assert_allclose([vp["mlp_q"], vp["mlp_out"]], [1.0, 1.0])
  gpt2 = theory.branch_gains(ModelConfig.of(experiment("gpt2", "1.5b").model))
  np.testing.assert_allclose(gpt2["attn"], 1600 ** 2 * 0.02 ** 4 / 96)  # ~4e-3: almost no collapse


def test_branch_gains_follow_the_placement_init():
  """DeepNet's beta and dropped depth scaling: the gains match the initialised kernels."""
  cfg = ModelConfig.of(tiny_config(placement="deepnorm", n_layer=8, d_model=64).model)
  p = decoder.init(cfg, jax.random.key(0))["blocks"]
  var = lambda branch, name: np.var(p[branch][name]["kernel"])
  d, F = 64, 256
  gains = theory.branch_gains(cfg)
  np.testing.assert_allclose(gains["attn"], d * var("attn", "v") * d * var("attn", "o"), rtol=0.1)
  np.testing.assert_allclose([gains["mlp_q"], gains["mlp_out"]],
                             [d * var("mlp", "fc_in"), F * var("mlp", "fc_out")], rtol=0.1)


def test_post_backward_factors():
  np.testing.assert_allclose(theory.post_backward_factor(np.array([0.0, 3.0])), [1.0, 0.5])
  f = np.array([0.5, 0.8, 0.9, 0.7, 0.6, 1.0])  # L = 3: sites attn_1, mlp_1, attn_2, ...
  np.testing.assert_allclose(theory.post_backward_product(f), [0.9 * 0.7 * 0.6, 0.6, 1.0])


def test_gram_recursion_with_dt_and_mlp_is_its_dense_steps():
  """post_gram_recursion against its formula with the Cesaro matrix written out: the step dt
  enters squared (the Gram is quadratic in the branch), the MLP after attention."""
  T, dt, gain, q, out = 6, 0.5, 0.8, 1.5, 0.7
  C = np.asarray(cesaro(T), np.float64)
  K, want = np.eye(T), []
  for _ in range(3):
    K = theory.normalize(K + dt ** 2 * gain * C @ K @ C.T)
    K = theory.normalize(K + dt ** 2 * out * theory.mlp_kernel(np.clip(K, -1, 1), q, "gelu"))
    want.append((K.sum() - T) / (T * (T - 1)))
  got = theory.post_gram_recursion(np.eye(T), 3, gain, "gelu", q, out, dt)
  np.testing.assert_allclose(got, want, rtol=1e-6)  # cesaro is float32


def test_peri_rms_bound_and_out_norm_cap():
  """(iii) as written: rms(h_0) + 2 l dt cap, two sublayers a layer; the cap max|g| + rms(b)
  over both output norms of every layer (rms of the bias, not its largest entry)."""
  rms0_BT = jnp.array([[1.0, 2.0]])
  np.testing.assert_allclose(theory.peri_rms_bound(rms0_BT, 3, 0.5, 4.0),
                             [[[1.0 + 4.0 * l, 2.0 + 4.0 * l]] for l in (1, 2, 3)])
  site = lambda scale, bias: {"scale": jnp.array(scale), "bias": jnp.array(bias)}
  params = {"blocks": {"attn_norm_out": site([[1.0, -2.0], [0.5, 0.5]], [[3.0, 0.0], [0.0, 0.0]]),
                       "mlp_norm_out": site([[1.0, 1.0], [1.0, -1.5]], [[0.0, 0.0], [1.0, 1.0]])}}
  # attn layer 1: 2 + rms(3, 0) = 2 + 3/sqrt(2) = 4.12 (max|b| would give 5); the other sites less
  np.testing.assert_allclose(theory.out_norm_cap(params), 2.0 + 3.0 / np.sqrt(2.0), rtol=1e-6)


@pytest.fixture(scope="module")
def wide_stack():
  """A wide attention-only Post-LN stack at variance-preserving init with near-uniform
  attention (q, k shrunk) -> (h_0 per-coordinate Gram [B,T,T], similarity after each layer)."""
  def run(attention):
    cfg = tiny_config(placement="post", norm="rmsnorm", use_bias=False, init="variance_preserving",
                      d_model=256, n_head=4, n_layer=4, vocab_size=1024, attention=attention).model
    rng = np.random.default_rng(0)

    def init(path, x):  # variance-preserving: std 1/sqrt(d) (every fan-in here), embeddings 1, gains 1
      name = jax.tree_util.keystr(path)
      if "scale" in name:
        return jnp.ones(x.shape)
      shrink = 0.1 if "'q'" in name or "'k'" in name else 0.0 if "fc_out" in name else 1.0
      std = 1.0 if "embedding" in name else cfg.d_model ** -0.5
      return jnp.asarray(shrink * std * rng.standard_normal(x.shape), jnp.float32)

    # q, k shrunk: near-uniform attention; fc_out zero: attention only (the MLP's norm is then ~identity).
    params = jax.tree_util.tree_map_with_path(init, decoder.abstract_params(cfg))
    tokens = rng.integers(0, cfg.vocab_size, (4, 16))

    @jax.jit
    def measure(params):
      _, inter = taps_lib.forward(cfg, params, tokens, taps_lib.zero_taps(cfg, tokens))
      h0 = taps_lib.sown(inter["h0"])
      return (jnp.einsum("btd,bsd->bts", h0, h0) / cfg.d_model,
              representations.similarity(taps_lib.hidden_LBTD(inter)), representations.similarity(h0[None]))

    return measure(params)
  return run


def test_wide_post_stack_follows_gram_recursion(wide_stack):
  K0, measured_L, _ = wide_stack("softmax")
  predicted_L = theory.post_gram_recursion(np.asarray(K0, np.float64), 4, attn_gain=1.0).mean(0)
  np.testing.assert_allclose(measured_L, predicted_L, atol=0.05)
  assert predicted_L[-1] > predicted_L[0] + 0.1  # the recursion predicts a real rise


def test_centered_attention_keeps_input_similarity(wide_stack):
  _, measured_L, input_sim = wide_stack("centered")
  np.testing.assert_allclose(measured_L, np.broadcast_to(input_sim, measured_L.shape), atol=0.05)
