"""model.dtype=bfloat16 is mixed precision: bfloat16 compute; float32 parameters, optimizer
state, norm statistics, logits and loss. A bfloat16 run tracks the float32 one, and the probe
suite runs in bfloat16."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.placements import PLACEMENTS
from nplace.train import state as train_state, steps
from nplace.data import synthetic
from nplace.probes import suite
from conftest import tiny_config

STEPS, BATCH, WINDOW = 30, 8, 13
TRACKING_NATS = 0.005  # largest |loss_bf16 - loss_f32| allowed at any step (measured: 6e-4; 2e-4 before the LM head ran in bf16)


def config(dtype):
  c = tiny_config(dtype=dtype)
  c.train.steps = STEPS
  c.optim.update(lr=3e-3, warmup_steps=5)
  return c


@pytest.fixture(scope="module")
def runs():
  """dtype -> (loss per step, final state): the same tiny run on the synthetic language
  (order 2, 61 tokens), from the same init, in float32 and in bfloat16."""
  tokens = np.concatenate(list(synthetic.build(61, 2, seed=0).generate(STEPS * BATCH * WINDOW, seed=1)))
  batches = tokens.astype(np.int32).reshape(STEPS, BATCH, WINDOW)
  params = jax.jit(functools.partial(decoder.init, config("float32").model))(jax.random.key(0))
  out = {}
  for dtype in ("float32", "bfloat16"):
    state = train_state.start_from(config(dtype), params)
    step = jax.jit(steps.make_train_step(config(dtype)))
    losses = []
    for batch in batches:
      state, metrics = step(state, batch)
      losses.append(float(metrics["loss"]))
    out[dtype] = np.array(losses), state
  return out


@pytest.mark.slow
def test_bfloat16_run_tracks_the_float32_run(runs):
  (f32, _), (bf16, _) = runs["float32"], runs["bfloat16"]
  assert f32[:3].mean() - f32[-3:].mean() > 0.3  # it learns: not two flat lines compared
  assert np.max(np.abs(bf16 - f32)) < TRACKING_NATS, np.abs(bf16 - f32)


@pytest.mark.slow
def test_bfloat16_state_stays_float32(runs):
  _, state = runs["bfloat16"]
  dtypes = {x.dtype for x in jax.tree.leaves(state) if jnp.issubdtype(x.dtype, jnp.floating)}
  assert dtypes == {jnp.dtype(jnp.float32)}


def equations(jaxpr):
  """Every equation of a jaxpr, those of its scans, conds, remats and custom rules included."""
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's
        if hasattr(sub, "eqns"):
          yield from equations(sub)


# What softmax, log-softmax and the norm statistics are made of; gelu's tanh, a score's scale are not.
SENSITIVE = ("exp", "log", "sqrt", "rsqrt", "reduce_max", "reduce_sum")


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_bfloat16_computes_in_bfloat16_with_float32_norm_statistics_softmax_and_loss(placement):
  """Every placement, by the head's two losses, chunked or not: the residual stream in bfloat16,
  the norm statistics, attention probabilities and logits float32, and every exponential,
  logarithm, square root and sum of the forward loss taken in float32."""
  cfg = tiny_config(dtype="bfloat16", placement=placement, attention_impl="xla").model  # xla: sows the probabilities
  apply = functools.partial(decoder.apply, cfg, mutable=["intermediates"])
  logits, sown = jax.eval_shape(apply, decoder.abstract_params(cfg), jax.ShapeDtypeStruct((1, 5), jnp.int32))
  assert sown["intermediates"]["blocks"]["h"][0].dtype == jnp.bfloat16  # the residual stream
  assert sown["intermediates"]["blocks"]["attn"]["probs"][0].dtype == jnp.float32
  norms = {jax.tree_util.keystr(path): r.dtype for path, r in jax.tree_util.tree_leaves_with_path(sown)
           if path[-2].key == "r"}
  assert set(norms.values()) <= {jnp.dtype(jnp.float32)} and bool(norms) == (placement != "rezero"), norms
  assert logits.dtype == jnp.float32
  for head in ({}, {"head_loss": "one_hot", "loss_chunks": 3}):
    c = ModelConfig.of(tiny_config(dtype="bfloat16", placement=placement, **head).model)
    jaxpr = jax.make_jaxpr(functools.partial(decoder.loss, c))(decoder.abstract_params(c),
                                                               jax.ShapeDtypeStruct((2, 13), jnp.int32))
    low = {(e.primitive.name, str(e.invars[0].aval.dtype)) for e in equations(jaxpr.jaxpr)
           if e.primitive.name in SENSITIVE and e.invars[0].aval.dtype != jnp.float32}
    assert not low, (head, low)
    assert jaxpr.out_avals[0].dtype == jnp.float32


@pytest.mark.slow
def test_probe_suite_runs_in_bfloat16(runs):
  c = config("bfloat16")
  c.probe.update(power_iters=0, hutchinson_probes=1, batch_size=2)  # spectral: compiled in bf16 by test_fit
  _, state = runs["bfloat16"]
  batch = jnp.asarray(np.arange(2 * WINDOW).reshape(2, WINDOW) % 61, jnp.int32)
  results = suite.suite(c, state["params"], batch, jax.random.key(0))
  assert {"attention_tv", "grad_h", "jacobian_frobenius", "norm_backward"} <= set(results)
  for name, value in results.items():
    assert np.all(np.isfinite(np.asarray(value, np.float32))), name


def test_matmul_precision_reaches_every_product_of_the_step_and_generation():
  """model.matmul_precision=high: every dot_general of the loss's forward, its backward (the
  transposes) and remat's recomputation, and of the KV-cached decoding, carries it, whatever the
  process-wide default (the tests set highest); "default" leaves that default."""
  def precisions(matmul_precision, fn):
    cfg = ModelConfig.of(tiny_config(matmul_precision=matmul_precision, remat="full").model)
    params = decoder.abstract_params(cfg)
    jaxpr = jax.make_jaxpr(functools.partial(fn, cfg))(params, jax.ShapeDtypeStruct((2, 13), jnp.int32))
    return [e.params["precision"] for e in equations(jaxpr.jaxpr) if e.primitive.name == "dot_general"]
  grad = lambda cfg, params, batch: jax.grad(decoder.loss, argnums=1)(cfg, params, batch)
  generate = lambda cfg, params, tokens: decoder.generate(cfg, params, tokens, prompt=6)
  high, highest = (jax.lax.Precision.HIGH,) * 2, (jax.lax.Precision.HIGHEST,) * 2
  for fn in (grad, generate):
    found = precisions("high", fn)
    assert len(found) > 10 and set(found) == {high}, set(found)
    assert set(precisions("default", fn)) == {highest}
