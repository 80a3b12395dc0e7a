"""Gradient probes against per-layer jax.grad of the plain-jnp reference, and the norm
backward factor against the explicit RMSNorm Jacobian."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplace.probes import gradients
from nplace.probes import taps as taps_lib
from conftest import tiny_config
import probe_reference as ref


@pytest.fixture(scope="module", params=("post", "peri"))
def probed(request):
  """A 2-layer model with every parameter random: (cfg, params, probe backward outputs,
  reference (|dL/dh_l| for l = 1..L, dL/dparams)), all from one compiled function."""
  cfg = tiny_config(placement=request.param, norm="rmsnorm", n_layer=2, dt=0.5,
                    embed_norm=request.param == "peri").model
  params = ref.random_params(cfg, 0, std=0.2)
  batch = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab_size, (2, 10)))
  tokens, targets = batch[:, :-1], batch[:, 1:]
  taps = taps_lib.zero_taps(cfg, tokens)

  def both(params):
    hs = ref.hidden(params, tokens, cfg)
    g_h = [jnp.linalg.norm(jax.grad(ref.tail_loss, argnums=1)(params, hs[l], l, targets, cfg))
           for l in range(1, cfg.n_layer + 1)]
    reference = (jnp.stack(g_h) / jnp.sqrt(tokens.size), jax.grad(ref.tail_loss)(params, hs[0], 0, targets, cfg))
    return gradients.backward(cfg, params, batch, taps), reference

  return (cfg, params, *jax.jit(both)(params))


# Not slow: `probed` is every test's here (it was marked when, first in the file, it was charged
# the fixture's compile); without it nothing in the fast lane reads `residual_grad`.
def test_residual_grad_matches_per_layer_grad(probed):
  _, _, (_, _, _, g_taps), (want, _) = probed
  np.testing.assert_allclose(gradients.residual_grad(g_taps), want, rtol=2e-4)


def test_param_grads_match_reference(probed):
  cfg, _, (_, _, g_params, _), (_, g_ref) = probed
  got = gradients.param_grads(g_params)
  assert set(got) == {f"grad_{n}" for n in ("q", "k", "v", "o", "mlp_in", "mlp_out")}
  for name, (branch, module) in gradients.MATRICES.items():
    if f"grad_{name}" in got:
      kernel = g_ref["blocks"][branch][module]["kernel"]
      want = [np.linalg.norm(kernel[l]) for l in range(cfg.n_layer)]
      np.testing.assert_allclose(got[f"grad_{name}"], want, rtol=2e-4, err_msg=name)


def explicit_factors(g_D, z_XD, dy_XD, eps):
  """(mean rms(g)/r, |dz|/|dy|) with dz = J^T dy, J = diag(g) (1/r) (I - z z^T / (d r^2))."""
  d = z_XD.shape[-1]
  z, dy = z_XD.reshape(-1, d), dy_XD.reshape(-1, d)
  r = np.sqrt((z ** 2).mean(-1) + eps)
  J = (np.diag(g_D)[None] / r[:, None, None]) @ (np.eye(d)[None] - z[:, :, None] * z[:, None, :] / (d * r[:, None, None] ** 2))
  dz = np.einsum("nij,ni->nj", J, dy)
  return np.sqrt((g_D ** 2).mean()) * np.mean(1 / r), np.linalg.norm(dz) / np.linalg.norm(dy)


def test_norm_factors_match_explicit_jacobian(probed):
  """At the sites whose input z is the sown residual stream: peri's attention input norms
  (z = h_{l-1}) and the final norm (z = h_L)."""
  cfg, params, (_, intermediates, _, g_taps), _ = probed
  if cfg.placement != "peri":
    pytest.skip("in Post-LN no norm's input is the sown residual stream")
  factors = gradients.norm_factors(params, intermediates, g_taps)
  hs = [taps_lib.sown(intermediates["h0"]), *taps_lib.hidden_LBTD(intermediates)]
  for l in range(cfg.n_layer):  # attention sites are 0, 2, ...
    s, measured = explicit_factors(np.asarray(params["blocks"]["attn_norm_in"]["scale"][l]), np.asarray(hs[l]),
                                   np.asarray(g_taps["blocks"]["attn_norm_in"]["y"][l]), cfg.norm_eps)
    np.testing.assert_allclose(factors["norm_in_scale"][2 * l], s, rtol=1e-5)
    np.testing.assert_allclose(factors["norm_in_backward"][2 * l], measured, rtol=1e-4)
  s, measured = explicit_factors(np.asarray(params["final_norm"]["scale"]), np.asarray(hs[-1]),
                                 np.asarray(g_taps["final_norm"]["y"]), cfg.norm_eps)
  np.testing.assert_allclose(factors["final_norm_scale"], [s], rtol=1e-5)
  np.testing.assert_allclose(factors["final_norm_backward"], [measured], rtol=1e-4)
  assert factors["norm_in_scale"].shape == (2 * cfg.n_layer,)


def test_norm_factor_names_follow_placement(probed):
  cfg, params, (_, intermediates, _, g_taps), _ = probed
  names = set(gradients.norm_factors(params, intermediates, g_taps))
  roles = ("norm_in", "norm_out") if cfg.placement == "peri" else ("norm",)
  want = {f"{r}_{k}" for r in roles for k in ("scale", "backward")}
  want |= {f"final_norm_{k}" for k in ("scale", "backward")} if cfg.placement != "post" else set()
  want |= {f"embed_norm_{k}" for k in ("scale", "backward")} if cfg.embed_norm else set()
  assert names == want

