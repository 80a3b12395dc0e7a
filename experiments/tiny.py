"""A model that trains in minutes on a laptop CPU: `experiments/tiny.py[:PLACEMENT]`."""
from nplace.config import PLACEMENTS, base_config


def get_config(arg: str = "pre"):
  if arg not in PLACEMENTS:
    raise ValueError(f"tiny variant {arg!r}: expected one of {', '.join(PLACEMENTS)}")
  c = base_config()
  c.model.update(vocab_size=512, max_len=128, n_layer=4, n_head=4, d_model=128, placement=arg)
  c.data.seq_len = 128
  c.train.batch_size = 16
  return c
