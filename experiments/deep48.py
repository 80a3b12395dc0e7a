"""Study B on a CPU: 48 narrow Post-LN layers, RMSNorm, variance-preserving init.

`experiments/deep48.py[:PLACEMENT]` swaps the placement (default post).
"""
from nplace.config import base_config
from nplace.placements import PLACEMENTS


def get_config(arg: str = "post"):
  if arg not in PLACEMENTS:
    raise ValueError(f"deep48 variant {arg!r}: expected one of {', '.join(PLACEMENTS)}")
  c = base_config()
  c.model.update(vocab_size=512, max_len=64, n_layer=48, n_head=4, d_model=64,
                 norm="rmsnorm", use_bias=False, init="variance_preserving", placement=arg,
                 remat="none")  # activations are small; remat none is ~1.14x faster on a CPU
  c.data.seq_len = 64
  c.train.batch_size = 16
  return c
