"""The decoder against its formulas written out in plain jnp (tests/reference.py)."""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.model.block import Block
from nplace.placements import PLACEMENTS
from nplace.probes import gradients
from nplace.probes import taps as taps_lib
from nplace.studies.lab.checks import scale_outputs
import reference

CLASSIC = ("post", "pre", "peri")


def random_params(cfg, key, std=0.3):
  """Every parameter, biases and gains included, drawn at random so no term hides at zero."""
  shapes = decoder.abstract_params(cfg)
  leaves, tree = jax.tree.flatten(shapes)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(tree, [std * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])


def layer(params, l):
  return jax.tree.map(lambda x: x[l], params["blocks"])


def block_out(cfg, p_layer, h, l=1):
  return Block(ModelConfig.of(cfg)).apply({"params": p_layer}, h, jnp.asarray(l))[0]


NEW = [  # the other placements and the options, one combination each; random_params draws ReZero's
    # alphas too, so they are neither 0 (at init each block is the identity) nor 1 (as if ignored).
    ("reorder", "rmsnorm", "swiglu", False), ("hybrid", "rmsnorm", "gelu", False),
    ("peri", "dyt", "swiglu", True), ("post", "rmsnorm", "gelu", True), ("lns", "layernorm", "gelu", False),
    ("deepnorm", "layernorm", "swiglu", False), ("rezero", "layernorm", "gelu", False),
    ("mix", "rmsnorm", "gelu", False)]
SLOW = pytest.mark.slow


# NEW is fast (~0.5 s a case): without it no placement but the classic three has its formula
# checked in the fast lane. The classic combinations are slow.
@pytest.mark.parametrize("placement,norm,mlp,dt,qk_norm", [
    pytest.param(p, n, f, dt, False, marks=SLOW)
    for p, n, f in itertools.product(CLASSIC, ("layernorm", "rmsnorm"), ("gelu", "swiglu")) for dt in (0.1,)] + [
    pytest.param(p, "layernorm", "gelu", 1.0, False, marks=SLOW) for p in CLASSIC] + [
    (p, n, f, 0.1, qk) for p, n, f, qk in NEW])
def test_block_equals_formula(make_config, placement, norm, mlp, dt, qk_norm):
  # Layer l = 2 of L = 3: lns scales by l and deepnorm by L, so each shows if it reads the other;
  # mix's floor(0.5 L) = 1 puts layer 2 in pre (ceil would put it in post).
  cfg = make_config(placement=placement, norm=norm, mlp=mlp, dt=dt, qk_norm=qk_norm, n_layer=3,
                    mix_post_fraction=0.5).model
  params = random_params(cfg, jax.random.key(0))
  h = jax.random.normal(jax.random.key(1), (2, 7, cfg.d_model))
  l = 2
  got = block_out(cfg, layer(params, l - 1), h, l)
  want = reference.block(layer(params, l - 1), h, cfg, dt=None if dt == 1.0 else dt, l=l)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("placement", CLASSIC)
def test_centered_attention_block_equals_formula(make_config, placement):
  cfg = make_config(placement=placement, attention="centered").model
  params = random_params(cfg, jax.random.key(2))
  h = jax.random.normal(jax.random.key(3), (2, 9, cfg.d_model))
  np.testing.assert_allclose(block_out(cfg, layer(params, 1), h),
                             reference.block(layer(params, 1), h, cfg, cfg.dt), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("placement,embed_norm,remat,embed_scale", [
    ("post", False, "full", 1.0), ("lns", False, "dots", 1.0), ("peri", True, "none", 1.0),
    ("peri", False, "dots_no_batch", 8.0)])
@pytest.mark.slow
def test_decoder_equals_formula(make_config, placement, embed_norm, remat, embed_scale):
  """Scanned, rematerialised stack == the layers applied one by one. lns is pre with its input
  scaled by 1/sqrt(l): the scan must hand each layer its own l."""
  cfg = make_config(placement=placement, embed_norm=embed_norm, remat=remat, n_layer=3, dt=0.5,
                    embed_scale=embed_scale).model
  params = random_params(cfg, jax.random.key(4), std=0.2)
  tokens = jax.random.randint(jax.random.key(5), (2, 11), 0, cfg.vocab_size)
  np.testing.assert_allclose(decoder.apply(cfg, params, tokens), reference.decoder(params, tokens, cfg),
                             rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_unrolled_layers_keep_the_parameters_and_the_bits(make_config):
  """model.scan_unroll changes how the layer loop is compiled, not what it computes: the same
  parameter tree (a checkpoint loads either way), the same loss and gradients to the bit, and the
  same probe taps and sown intermediates (the probes perturb and sow inside the scan). Mix's
  per-layer lax.cond (layer 1 post, 2 and 3 pre) under remat, unrolled 2 of 3: a remainder
  iteration. Run op by op: inside one jit of the whole step XLA compiles straight-line layers
  otherwise than a loop body (fusion, FMA contraction), which moves last bits (BUILD_NOTES)."""
  scanned, unrolled = (ModelConfig.of(make_config(placement="mix", n_layer=3, mix_post_fraction=0.5, remat="full",
                                                  scan_unroll=n).model) for n in (1, 2))
  key = jax.random.key(18)
  params = random_params(scanned, key, std=0.2)
  batch = jax.random.randint(jax.random.key(19), (2, 13), 0, scanned.vocab_size)
  taps = taps_lib.zero_taps(scanned, batch[:, :-1])
  got, want = ((decoder.init(cfg, key), jax.value_and_grad(functools.partial(decoder.loss, cfg))(params, batch),
                gradients.backward(cfg, params, batch, taps)) for cfg in (unrolled, scanned))
  jax.tree.map(np.testing.assert_array_equal, got, want)


@pytest.mark.slow
@pytest.mark.parametrize("placement,qk_norm,dtype", [("pre", False, "float32"), ("hybrid", True, "bfloat16")])
def test_fused_qkv_projection_keeps_the_parameters_and_the_function(make_config, placement, qk_norm, dtype):
  """model.qkv_projection=fused computes q, k and v in one product over the stacked kernels: the
  same parameter tree (a checkpoint loads either way), the same loss and gradients (HybridNorm:
  norms on q, k and v after the product) and greedy continuation (its KV cache), with one dot
  where there were three."""
  separate, fused = (ModelConfig.of(make_config(placement=placement, qk_norm=qk_norm, n_layer=2, dtype=dtype,
                                                qkv_projection=p).model) for p in ("separate", "fused"))
  key = jax.random.key(20)
  params = random_params(separate, key, std=0.2)
  batch = jax.random.randint(jax.random.key(21), (2, 13), 0, separate.vocab_size)
  jax.tree.map(np.testing.assert_array_equal, decoder.init(fused, key), decoder.init(separate, key))
  got, want = (jax.value_and_grad(functools.partial(decoder.loss, cfg))(params, batch) for cfg in (fused, separate))
  tolerance = 1e-5 if dtype == "float32" else 2e-2
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance), got, want)
  if dtype == "float32":
    np.testing.assert_array_equal(*(decoder.generate(cfg, params, batch, prompt=5) for cfg in (fused, separate)))
  dots = lambda cfg: str(jax.make_jaxpr(functools.partial(decoder.apply, cfg))(params, batch)).count("dot_general")
  assert dots(separate) - dots(fused) == 2


# The keys that change how the loss is computed, not what: together on, against none of them.
SPEED_LEVERS = {"loss_chunks": 3, "head_loss": "one_hot", "qkv_projection": "fused", "scan_unroll": 2,
                "attention_impl": "xla"}
REMATS = ("full", "dots", "dots_no_batch")


@pytest.mark.slow
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_levers_keep_the_loss_and_gradients_of_every_placement(make_config, placement):
  """The speed and memory levers (a remat policy, taken in turn, and SPEED_LEVERS) leave the loss
  and every gradient as float32 computes them without; bfloat16 compute stays near them (its loss
  within 0.003 nats, its gradients within 3% in norm; measured at most 0.0009 and 0.7%). ReZero's
  learnable scalar must keep its branch in bfloat16 (a float32 branch broke the layer scan)."""
  plain = make_config(placement=placement, mix_post_fraction=0.5).model  # mix: layer 1 post, layer 2 pre
  params = random_params(plain, jax.random.key(22), std=0.2)
  batch = jax.random.randint(jax.random.key(23), (2, 13), 0, plain.vocab_size)
  levers = dict(SPEED_LEVERS, remat=REMATS[list(PLACEMENTS).index(placement) % len(REMATS)])
  want, levered, bf16 = (jax.jit(jax.value_and_grad(functools.partial(decoder.loss, ModelConfig.of(cfg))))(
      params, batch) for cfg in (plain, make_config(placement=placement, mix_post_fraction=0.5, **levers).model,
                                  make_config(placement=placement, mix_post_fraction=0.5, dtype="bfloat16").model))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), levered, want)
  assert abs(bf16[0] - want[0]) < 3e-3, (bf16[0], want[0])
  flat = lambda grads: jnp.concatenate([g.ravel() for g in jax.tree.leaves(grads)])
  assert jnp.linalg.norm(flat(bf16[1]) - flat(want[1])) < 0.03 * jnp.linalg.norm(flat(want[1]))


@pytest.mark.parametrize("chunks,multiple,dtype,head_loss", [
    (2, 1, "float32", "gather"), (6, 128, "float32", "gather"), (1, 64, "float32", "gather"),
    (3, 128, "bfloat16", "gather"), (1, 64, "float32", "one_hot"), (3, 128, "bfloat16", "one_hot")])
@pytest.mark.slow
def test_chunked_loss_and_padded_head_equal_the_plain_loss(make_config, chunks, multiple, dtype, head_loss):
  """loss_chunks, head_vocab_multiple and head_loss only change how the head and loss are
  computed: the value and every gradient stay those of the whole, unpadded head. The one-hot
  loss's backward has no scatter (the gather's has)."""
  cfg = make_config(placement="peri", n_layer=2, dtype=dtype, loss_chunks=1, head_vocab_multiple=1).model
  params = random_params(cfg, jax.random.key(6), std=0.2)
  batch = jax.random.randint(jax.random.key(7), (3, 13), 0, cfg.vocab_size)
  value_and_grad = lambda: jax.value_and_grad(functools.partial(decoder.loss, ModelConfig.of(cfg)))
  scatters = lambda: str(jax.make_jaxpr(value_and_grad())(params, batch)).count("scatter-add")
  plain, plain_scatters = value_and_grad()(params, batch), scatters()
  cfg.update(loss_chunks=chunks, head_vocab_multiple=multiple, head_loss=head_loss)
  scheduled = value_and_grad()(params, batch)
  assert (scatters() < plain_scatters) == (head_loss == "one_hot")  # the embedding's backward keeps its own
  tolerance = 1e-5 if dtype == "float32" else 2e-3
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance), scheduled, plain)
  if dtype == "float32":  # both equal the mean negative log-likelihood of the formula's logits
    logits = reference.decoder(params, batch[:, :-1], cfg)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch[:, 1:, None], -1).mean()
    np.testing.assert_allclose(scheduled[0], nll, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("placement", CLASSIC)
def test_causal(make_config, placement):
  cfg = make_config(placement=placement).model
  params = random_params(cfg, jax.random.key(6))
  tokens = jax.random.randint(jax.random.key(7), (1, 12), 0, cfg.vocab_size)
  t = 6
  changed = tokens.at[0, t].set((tokens[0, t] + 1) % cfg.vocab_size)
  a, b = decoder.apply(cfg, params, tokens), decoder.apply(cfg, params, changed)
  np.testing.assert_array_equal(a[:, :t], b[:, :t])
  assert not np.allclose(a[:, t:], b[:, t:])


@pytest.mark.slow
def test_dt_one_is_unscaled_and_dt_scales_branch(make_config):
  cfg1 = make_config(placement="pre", dt=1.0).model
  params = random_params(cfg1, jax.random.key(8))
  h = jax.random.normal(jax.random.key(9), (2, 5, cfg1.d_model))
  p0 = layer(params, 0)
  np.testing.assert_allclose(block_out(cfg1, p0, h), reference.block(p0, h, cfg1, dt=None), rtol=1e-6, atol=1e-6)
  # With the MLP branch off, a pre block is h + dt * attention(N(h)): the step is linear in dt.
  p0 = jax.tree.map(jnp.zeros_like, p0) | {k: v for k, v in p0.items() if k != "mlp"}
  cfg2 = make_config(placement="pre", dt=0.25).model
  np.testing.assert_allclose(block_out(cfg2, p0, h) - h, 0.25 * (block_out(cfg1, p0, h) - h), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm", ("layernorm", "rmsnorm"))
def test_peri_block_invariant_to_output_scale(make_config, norm):
  cfg = make_config(placement="peri", norm=norm, norm_eps=1e-12).model
  p = layer(random_params(cfg, jax.random.key(10)), 0)
  h = jax.random.normal(jax.random.key(11), (2, 8, cfg.d_model))
  for c in (0.05, 7.0):
    np.testing.assert_allclose(block_out(cfg, scale_outputs(p, c), h), block_out(cfg, p, h), rtol=1e-4, atol=1e-5)


def test_pre_block_branch_scales_with_output_scale(make_config):
  cfg = make_config(placement="pre").model
  p = layer(random_params(cfg, jax.random.key(12)), 0)
  h = jax.random.normal(jax.random.key(13), (2, 8, cfg.d_model))
  # Zeroing the MLP's output projection leaves h1 = h + attn(N(h)), the input of the MLP branch.
  h1 = block_out(cfg, scale_outputs(p, 0.0, ["mlp"]), h)
  branch = block_out(cfg, p, h) - h1
  np.testing.assert_allclose(block_out(cfg, scale_outputs(p, 7.0, ["mlp"]), h) - h1, 7.0 * branch, rtol=1e-4, atol=1e-5)
  assert np.abs(branch).mean() > 0.1


@pytest.mark.slow
def test_init_schemes_set_weight_scale(make_config):
  key = jax.random.key(14)
  gpt2 = decoder.init(make_config(init="gpt2", n_layer=8, d_model=64).model, key)
  np.testing.assert_allclose(np.std(gpt2["blocks"]["attn"]["q"]["kernel"]), 0.02, rtol=0.05)
  np.testing.assert_allclose(np.std(gpt2["blocks"]["mlp"]["fc_out"]["kernel"]), 0.02 / 4, rtol=0.05)
  vp = decoder.init(make_config(init="variance_preserving", n_layer=8, d_model=64).model, key)
  np.testing.assert_allclose(np.std(vp["blocks"]["mlp"]["fc_out"]["kernel"]), 256 ** -0.5, rtol=0.05)
  np.testing.assert_allclose(np.std(vp["wte"]["embedding"]), 1.0, rtol=0.05)
  normal = decoder.init(make_config(init="normal", init_std=0.1, n_layer=8, d_model=64).model, key)
  np.testing.assert_allclose(np.std(normal["blocks"]["attn"]["o"]["kernel"]), 0.1, rtol=0.05)


def test_every_param_has_logical_axes(make_config):
  cfg = make_config(placement="peri", embed_norm=True).model
  specs, shapes = decoder.logical_specs(cfg), decoder.abstract_params(cfg)
  for spec, shape in zip(jax.tree.leaves(specs, is_leaf=lambda x: x is not None and not isinstance(x, dict)),
                         jax.tree.leaves(shapes)):
    assert len(spec) == len(shape.shape) and all(spec), (spec, shape.shape)
  assert tuple(specs["blocks"]["attn"]["q"]["kernel"]) == ("layers", "embed", "heads", "kv")


@pytest.mark.slow
def test_mix_is_one_stack_switching_post_to_pre(make_config):
  """mix keeps pre's parameter tree (probes, checkpoints, sharding unchanged); its layers
  l <= floor(f L) compute post's formula, the rest pre's, with the same weights."""
  cfg = make_config(placement="mix", n_layer=4, mix_post_fraction=0.5).model
  shapes = lambda c: jax.tree.map(lambda x: x.shape, decoder.abstract_params(c))
  assert shapes(cfg) == shapes(make_config(placement="pre", n_layer=4).model)
  p = layer(random_params(cfg, jax.random.key(15)), 0)
  h = jax.random.normal(jax.random.key(16), (2, 6, cfg.d_model))
  for l in (2, 3):  # either side of floor(0.5 * 4) = 2
    np.testing.assert_allclose(block_out(cfg, p, h, l), reference.block(p, h, cfg, cfg.dt, l),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_placement_inits(make_config):
  """DeepNet's beta on v, o, MLP in/out (GPT-2's depth scaling replaced); LNS drops the
  depth scaling; ReZero's scalars start at 0 (each block is the identity); DyT's alpha at 0.5."""
  L, d, key = 8, 64, jax.random.key(17)
  std = lambda p, *path: np.std(functools.reduce(lambda t, k: t[k], path, p["blocks"]))
  deep = decoder.init(make_config(placement="deepnorm", n_layer=L, d_model=d).model, key)
  beta = (8 * L) ** -0.25
  np.testing.assert_allclose(std(deep, "attn", "q", "kernel"), 0.02, rtol=0.05)
  for path in (("attn", "v"), ("attn", "o"), ("mlp", "fc_in"), ("mlp", "fc_out")):
    np.testing.assert_allclose(std(deep, *path, "kernel"), 0.02 * beta, rtol=0.05)
  lns = decoder.init(make_config(placement="lns", n_layer=L, d_model=d).model, key)
  np.testing.assert_allclose(std(lns, "mlp", "fc_out", "kernel"), 0.02, rtol=0.05)
  rezero = make_config(placement="rezero", n_layer=L, d_model=d).model
  params = decoder.init(rezero, key)
  assert "final_norm" not in params and not any("norm" in k for k in params["blocks"])
  h = jax.random.normal(key, (2, 5, d))
  np.testing.assert_array_equal(block_out(rezero, layer(params, 0), h), h)
  dyt = decoder.init(make_config(placement="peri", norm="dyt").model, key)
  np.testing.assert_array_equal(dyt["blocks"]["attn_norm_in"]["alpha"], 0.5)
