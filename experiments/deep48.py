"""Study B on a CPU: 48 narrow Post-LN layers, RMSNorm, variance-preserving init.

`experiments/deep48.py[:VARIANT]` swaps the placement (default post); `peri` carries the
embedding norm and `peri_no_embed_norm` is the block alone (experiments/__init__.py: MODELS).
"""
from nplace.config import base_config
from nplace.experiments import MODELS


def get_config(arg: str = "post"):
  if arg not in MODELS:
    raise ValueError(f"deep48 variant {arg!r}: expected one of {', '.join(MODELS)}")
  c = base_config()
  # remat none: activations are small, and it is ~1.14x faster on a CPU
  c.model.update(vocab_size=512, max_len=64, n_layer=48, n_head=4, d_model=64,
                 norm="rmsnorm", use_bias=False, init="variance_preserving", remat="none",
                 **MODELS[arg])
  c.data.seq_len = 64
  c.train.batch_size = 16
  return c
