"""The model's probing interface: zero perturbation taps, a forward pass that returns the
sown intermediates, and placing or picking a tangent at one residual-stream layer.

Residual-stream layer l (0..L) is h0 (the embedding output, top-level tap `h0`) for l = 0
and block l's output (slice l-1 of the scanned tap `blocks/h`) for l >= 1.
"""
import jax
import jax.numpy as jnp

from nplace.model import decoder


def zero_taps(cfg, tokens_BT):
  """Zero-valued `perturbations` for this batch shape; their gradients are the cotangents."""
  shapes = jax.eval_shape(
      lambda key: decoder.Decoder(cfg).init(key, tokens_BT)["perturbations"],
      jax.random.key(0))
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def forward(cfg, params, tokens_BT, taps):
  """(logits, intermediates) with the taps added at their points."""
  logits, state = decoder.apply(cfg, params, tokens_BT, extra_variables={"perturbations": taps},
                              mutable=["intermediates"])
  return logits, state["intermediates"]


def sown(tree):
  """A sown value: linen stores a tuple of everything sown under a name; we sow once."""
  (value,) = tree
  return value


def hidden_LBTD(intermediates):
  """Block outputs h_1..h_L, stacked."""
  return sown(intermediates["blocks"]["h"])


def place(taps, l, v_BTD):
  """Tangent taps: v at residual-stream layer l, zero elsewhere (l may be traced)."""
  zeros = jax.tree.map(jnp.zeros_like, taps)
  L = taps["blocks"]["h"].shape[0]
  at_l_L = (jnp.arange(1, L + 1) == l).astype(v_BTD.dtype)
  return {**zeros, "h0": jnp.where(l == 0, v_BTD, 0),
          "blocks": {**zeros["blocks"], "h": at_l_L[:, None, None, None] * v_BTD}}


def pick(ct_taps, l):
  """The cotangent at residual-stream layer l (l may be traced)."""
  return jnp.where(l == 0, ct_taps["h0"], ct_taps["blocks"]["h"][jnp.maximum(l - 1, 0)])
