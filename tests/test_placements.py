"""Every placement trains and is probed. (Each block against its formula: test_model.py;
parameter counts: test_size.py.)"""
import functools

import jax
import numpy as np
import pytest

from nplace.config import ModelConfig, ProbeConfig, experiment, validate
from nplace.model import decoder
from nplace.probes import suite
from nplace.train import state as train_state, steps

# Compiled without LLVM's optimisations: these tiny programs run in microseconds either way,
# and compiling them takes half the time.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
CASES = {  # placement -> (options, the norm sites the probes must report a backward factor for);
  # pre and peri (LayerNorm) are trained and probed by test_train.py and conftest's probe_run
    "post": ({"norm": "dyt"}, {"norm"}),  # DyT: no `_scale` anywhere (and no post theory curve)
    "reorder": ({"qk_norm": True}, {"norm", "q_norm", "k_norm", "final_norm"}),
    "deepnorm": ({}, {"norm"}),
    "mix": ({"mix_post_fraction": 0.5}, {"norm", "final_norm"}),
    "lns": ({}, {"norm", "final_norm"}),
    "rezero": ({}, set()),
    "hybrid": ({"norm": "dyt"}, {"q_norm", "k_norm", "v_norm", "mlp_norm", "final_norm"}),
}


def compiled(fn, *args):
  return jax.jit(fn).lower(*args).compile(FAST_COMPILE)


@pytest.mark.slow
@pytest.mark.parametrize("placement", CASES)
def test_trains_and_is_probed(placement):
  """The tiny preset, shrunk: 2 AdamW steps on one batch lower its loss; the probe suite then
  gives every probe, finite, with the placement's norm sites."""
  options, sites = CASES[placement]
  c = experiment("tiny", placement)
  c.model.update(n_layer=2, d_model=32, **options)
  c.data.seq_len = 12
  c.optim.update(lr=3e-3, warmup_steps=0)
  c.probe.update(batch_size=2, hutchinson_probes=1, power_iters=0)
  validate(c)
  batch_BT1 = jax.random.randint(jax.random.key(0), (4, 13), 0, c.model.vocab_size)
  state = train_state.start_from(c, decoder.init(ModelConfig.of(c.model), jax.random.key(1)))
  step = compiled(steps.make_train_step(c), state, batch_BT1)
  losses = []
  for _ in range(3):  # the third step's loss is after two updates
    state, metrics = step(state, batch_BT1)
    losses.append(float(metrics["loss"]))
  assert losses[2] < losses[0], losses
  probe = functools.partial(suite.run_suite, ModelConfig.of(c.model), probe_config=ProbeConfig.of(c.probe))
  results = compiled(probe, state["params"], batch_BT1[:2], jax.random.key(2))(
      state["params"], batch_BT1[:2], jax.random.key(2))
  for name, value in results.items():
    assert np.all(np.isfinite(value)), name
  assert {n.removesuffix("_backward") for n in results if n.endswith("_backward")} == sites
  has_scale = {n.removesuffix("_scale") for n in results if n.endswith("_scale")}
  assert has_scale == (set() if c.model.norm == "dyt" else sites)
  assert len(results["similarity"]) == len(results["local_sensitivity"]) == 2
