"""A model's scorecard (`nplace lab`): the probe suite and the lab's own measurements on the
model made `depth` blocks deep and `width` wide, probed at init on a random batch, and the
loss's curvature on the data's first validation rows at init and after a short Adam warmup on
the config's own training batches; turned into the checks of nplace/studies/lab/checks.py.
"""
import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nplace.config import ModelConfig, ProbeConfig, validate
from nplace.data import loader
from nplace.model import decoder
from nplace.probes import curvature, inputs, jacobians, representations, suite
from nplace.probes import taps as taps_lib
from nplace.runtime import compiler_fixes
from nplace.studies.lab import checks as lab_checks
from nplace.train import state as train_state, steps

BASELINES = ("post", "pre", "peri")  # the placements every scorecard shows beside its own


def lab_config(base, depth: int, width: int, model_overrides=()):
  """`base` at depth x width with `model_overrides` ((key, value) pairs under model.)."""
  c = base.copy_and_resolve_references()
  c.model.update(n_layer=depth, d_model=width)
  c.model.update(dict(model_overrides))
  validate(c)
  return c


def _measure(cfg, params, batch_BT1, key, local_key, probe_config):
  """The probe suite, rms(h_0), and |J_l - I| per block with the output projections as
  initialised and multiplied by SCALE (both at the same inputs h_{l-1} and probe vectors)."""
  results = suite.run_suite(cfg, params, batch_BT1, key, probe_config)
  tokens_BT = batch_BT1[:, :-1]
  _, intermediates = taps_lib.forward(cfg, params, tokens_BT, taps_lib.zero_taps(cfg, tokens_BT))
  both = jax.tree.map(lambda a, b: jnp.stack([a, b]), params,
                      lab_checks.scale_outputs(params, lab_checks.SCALE))
  local_2L = jax.vmap(lambda p: jacobians.local_sensitivity(
      cfg, p, intermediates, local_key, probe_config.hutchinson_probes))(both)
  rms_h0 = representations.moments(taps_lib.sown(intermediates["h0"]))["rms"]
  return results, rms_h0, local_2L


@functools.cache
def _measure_jit():  # built on first use: the options read the default backend
  return jax.jit(_measure, static_argnums=(0, 5), compiler_options=compiler_fixes.forward_mode())


def adam_warmup(config, params):
  """(theta_K, Adam's preconditioner P = sqrt(v_hat_K) + eps) after K = WARMUP_STEPS steps of
  the config's own train step (its AdamW, clipping and weight decay) at the constant rate LR_REF
  from `params`, on the first K batches its training run reads."""
  c = config.copy_and_resolve_references()
  c.optim.update(lr=lab_checks.LR_REF, warmup_steps=0, min_lr_ratio=1.0)  # the schedule, flat at LR_REF
  c.train.steps = lab_checks.WARMUP_STEPS
  rows = loader.make_iterator(c.data, "train", c.train.batch_size, seed=c.seed, shuffle=True,
                              process_index=0, process_count=1)
  batches_XBT1 = np.stack([next(rows) for _ in range(lab_checks.WARMUP_STEPS)])
  step = steps.make_train_step(c)

  @jax.jit
  def warm(state, batches_XBT1):
    return jax.lax.scan(lambda s, batch_BT1: (step(s, batch_BT1)[0], None), state, batches_XBT1)[0]
  state = warm(train_state.start_from(c, params), batches_XBT1)
  adam = optax.tree.get(state["opt_state"], "ScaleByAdamState")
  v_hat = optax.tree.bias_correction(adam.nu, c.optim.b2, adam.count)
  return state["params"], jax.tree.map(lambda v: jnp.sqrt(v) + c.optim.eps, v_hat)


@functools.partial(jax.jit, static_argnums=0)
def _sharpness(cfg, params_0, params_K, precond, batch_BT1, key):
  """The top eigenvalue of the loss's Hessian on `batch_BT1` at params_0, and of P^{-1} H at
  params_K, P = `precond`; POWER_ITERATIONS products each from the same start."""
  loss = functools.partial(decoder.loss, cfg, batch_BT1=batch_BT1)
  n = lab_checks.POWER_ITERATIONS
  plain = curvature.top_eigenvalue(lambda v: curvature.hessian_vector_product(loss, params_0, v),
                                   params_0, key, n)
  return plain, curvature.preconditioned_top_eigenvalue(loss, params_K, precond, key, n)


def measure(config) -> dict:
  """One model's scorecard: suite results (lists) and the checks drawn from them."""
  cfg = ModelConfig.of(config.model)
  params = decoder.init(cfg, jax.random.key(config.seed))
  batch_BT1, key = inputs.probe_batch(config, held_out=False), inputs.probe_key(config)
  results, rms_h0, local_2L = _measure_jit()(
      cfg, params, batch_BT1, key, jax.random.key(config.seed, impl="rbg"), ProbeConfig.of(config.probe))
  # the curvature on the data's own first validation rows (the probes' batch of a trained model):
  # on random tokens, ones the training data never holds curve down through the embedding rows
  # the warmup left with a near-zero second moment, and that direction swamps the power iteration
  plain, preconditioned = _sharpness(cfg, params, *adam_warmup(config, params),
                                     inputs.probe_batch(config, held_out=True), key)
  results = {name: np.asarray(v, np.float64).tolist() for name, v in results.items()}
  sharpness = {"init": float(plain), "preconditioned": float(preconditioned)}
  card = lab_checks.checks(results, float(rms_h0), local_2L[0], local_2L[1], sharpness)
  return {"placement": config.model.placement, "checks": card,
          "block_jacobian": np.asarray(local_2L, np.float64).tolist(), "probes": results}


def measure_all(configs: dict) -> dict:
  """Name -> measure(config), compiled through the persistent cache."""
  persistent_cache()
  return {name: measure(config) for name, config in configs.items()}


def _number(x: float) -> str:
  return f"{x:.3g}"


ROWS = (  # scorecard row label -> cell of one card
    (f"lambda_P after {lab_checks.WARMUP_STEPS} Adam steps", lambda c: _number(c["preconditioned_sharpness"])),
    ("lambda_H at init, 2/lambda_H", lambda c: f"{_number(c['sharpness_init'])}, {c['gd_max_lr']:.2g}"),
    ("log10 prod (1+|J_l-I|)", lambda c: f"{c['backward_stability']:.3f}"),
    ("rms(h_0) -> rms(h_L)", lambda c: f"{_number(c['rms_h0'])} -> {_number(c['rms_top'])}"),
    ("growth: better fit", lambda c: c["growth"]["better"]),
    ("  linear: slope/layer, R²", lambda c: f"{_number(c['growth']['slope'])}, {c['growth']['r2_linear']:.3f}"),
    ("  exp: rate/layer, R²", lambda c: f"{_number(c['growth']['rate'])}, {c['growth']['r2_exponential']:.3f}"),
    (f"|J_l-I| ratio at c={lab_checks.SCALE:g}", lambda c: _number(c["scale_ratio"])),
    ("top similarity", lambda c: f"{c['top_similarity']:.3f}" + (" clones" if c["clones"] else "")),
    ("norm backward product", lambda c: " ".join(f"{role}:{_number(p)}" for role, p in
                                                 c["backward_products"].items()) or "-"),
    ("grad ratio h_1/h_L", lambda c: _number(c["grad_ratio"])),
    ("|J_{0->L}|_F/sqrt(Td)", lambda c: _number(c["jacobian_0L"])),
)


def scorecard(cards: dict) -> str:
  """The cards side by side (one column per model)."""
  names = list(cards)
  rows = [(label, *(cell(cards[n]["checks"]) for n in names)) for label, cell in ROWS]
  width = [max(len(str(r[i])) for r in [("", *names), *rows]) for i in range(len(names) + 1)]
  return "\n".join("  ".join(str(cell).ljust(w) for cell, w in zip(row, width)).rstrip()
                   for row in [("", *names), *rows])


def persistent_cache():
  """Compiled measurements kept across runs, so the baselines compile once per model:
  $JAX_COMPILATION_CACHE_DIR when set, else ~/.cache/nplace/jax."""
  if not jax.config.jax_compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", str(pathlib.Path("~/.cache/nplace/jax").expanduser()))

