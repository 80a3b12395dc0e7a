"""Study B: does a deep Post-Norm stack collapse to the frequency loss, and why?

`experiments/collapse.py:VARIANT`, VARIANT one of
  cpu    48 layers of width 64 (deep48's shape) on the synthetic language (default)
  paper  48 layers of width 1024 on C4 (tfds c4/en, GPT-2 tokenizer)
The grid: Post-LN (the subject), Pre-LN and Peri-LN (controls), Post-LN with centered
attention (the ablation: the prefix average removed) and Post-LN at GPT-2's scaled init
(whose small branch gain should not collapse at init), all RMSNorm. Probes run every
`probe.every` steps, so the report can draw similarity, norm backward factors and
per-layer gradients over training.
"""
from nplace.config import base_config, variant

TRIALS = (  # (placement, attention, init)
    ("post", "softmax", "variance_preserving"),
    ("pre", "softmax", "variance_preserving"),
    ("peri", "softmax", "variance_preserving"),
    ("post", "centered", "variance_preserving"),
    ("post", "softmax", "gpt2"),
)


def _cpu():
  c = base_config()
  c.model.update(vocab_size=512, max_len=64, n_layer=48, n_head=4, d_model=64, norm="rmsnorm",
                 use_bias=False, remat="none")
  c.data.seq_len = 64
  c.train.update(steps=200, batch_size=16, log_every=10, eval_every=50, eval_batches=4,
                 peak_flops=2e11)
  c.optim.update(lr=1e-3, warmup_steps=30)
  c.probe.update(every=25, power_iters=0, hutchinson_probes=2)
  c.checkpoint.every = 100
  return c


def _paper():
  c = base_config()
  c.model.update(n_layer=48, n_head=16, d_model=1024, norm="rmsnorm", use_bias=False,
                 dtype="bfloat16", remat="full")
  c.data.update(source="tfds:c4/en:train", tokenizer="gpt2")
  c.train.update(steps=20_000, batch_size=256, eval_every=500, eval_batches=20)
  c.optim.update(lr=6e-4, warmup_steps=2000)
  c.probe.update(every=500, power_iters=0)
  c.checkpoint.every = 1000
  return c


def get_config(arg: str = "cpu"):
  return variant("collapse", arg, {"cpu": _cpu, "paper": _paper})


def get_sweep(arg: str = "cpu") -> list[dict]:
  get_config(arg)  # validates arg
  return [{"model.placement": placement, "model.attention": attention, "model.init": init}
          for placement, attention, init in TRIALS]
