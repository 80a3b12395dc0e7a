"""A model that trains in minutes on a laptop CPU: `experiments/tiny.py[:VARIANT]`.

VARIANT is a placement (default pre) or peri_no_embed_norm. `peri` is Peri-LN with the
embedding norm (`model.embed_norm=True`); `peri_no_embed_norm` is the block alone, the
ablation "Peri-LN, no embedding norm" (experiments/__init__.py: MODELS).
"""
from nplace.config import base_config
from nplace.experiments import MODELS


def get_config(arg: str = "pre"):
  if arg not in MODELS:
    raise ValueError(f"tiny variant {arg!r}: expected one of {', '.join(MODELS)}")
  c = base_config()
  # remat off: activations are small, and recomputing them costs a CPU ~30% per step.
  c.model.update(vocab_size=512, max_len=128, n_layer=4, n_head=4, d_model=128, remat="none",
                 **MODELS[arg])
  c.data.seq_len = 128
  c.train.update(steps=300, batch_size=16, log_every=10, eval_every=100, eval_batches=4,
                 peak_flops=2e11)  # peak: measured f32 matmul rate of a 2-core CI machine
  c.optim.update(lr=2e-3, warmup_steps=30)
  c.checkpoint.every = 100
  return c
