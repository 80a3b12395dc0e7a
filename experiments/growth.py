"""Hidden-state growth with depth (study A's bound): Pre-LN vs Peri-LN, dt 1 and 0.1.

`experiments/growth.py:VARIANT`, VARIANT one of
  cpu    width 64, depths 12, 24, 48, synthetic language (default)
  paper  GPT-2 124M width (768), depths 12, 24, 48, OpenWebText
Probes run at step 0 and at the last step, so the report fits mean |h| and the variances
against depth at init and after training (linear vs exponential).
"""
from nplace.config import base_config, variant

DEPTHS = (12, 24, 48)
MODELS = (("pre", 1.0), ("pre", 0.1), ("peri", 1.0), ("peri", 0.1))


def _cpu():
  c = base_config()
  c.model.update(vocab_size=512, max_len=64, n_head=4, d_model=64, remat="none")
  c.data.seq_len = 64
  c.train.update(steps=50, batch_size=16, log_every=10, eval_every=50, eval_batches=4,
                 peak_flops=2e11)
  c.optim.update(lr=3e-3, warmup_steps=10)
  c.probe.update(every=50, power_iters=0, hutchinson_probes=2)
  c.checkpoint.every = 50
  return c


def _paper():
  c = base_config()
  c.data.update(source="openwebtext", tokenizer="gpt2")
  c.model.update(dtype="bfloat16", remat="full")
  c.train.update(steps=20_000, batch_size=256, eval_every=1000, eval_batches=20)
  c.optim.update(lr=6e-4, warmup_steps=2000)
  c.probe.update(every=20_000, power_iters=0)
  c.checkpoint.every = 1000
  return c


def get_config(arg: str = "cpu"):
  return variant("growth", arg, {"cpu": _cpu, "paper": _paper})


def get_sweep(arg: str = "cpu") -> list[dict]:
  get_config(arg)
  return [{"model.placement": placement, "model.dt": dt, "model.n_layer": depth}
          for placement, dt in MODELS for depth in DEPTHS]
