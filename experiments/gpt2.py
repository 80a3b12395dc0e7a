"""GPT-2 shapes for study A: `experiments/gpt2.py:SIZE[,PLACEMENT]`, e.g. `124m,peri`.

SIZE is 124m | 350m | 774m | 1.5b (vocab 50257, context 1024, LayerNorm with bias).
PLACEMENT is a placement (default pre, as GPT-2) or peri_no_embed_norm: `peri` carries the
embedding norm and `peri_no_embed_norm` is the block alone (experiments/__init__.py: MODELS).
"""
from nplace.config import base_config
from nplace.experiments import MODELS

SIZES = {  # n_layer, n_head, d_model
    "124m": (12, 12, 768),
    "350m": (24, 16, 1024),
    "774m": (36, 20, 1280),
    "1.5b": (48, 25, 1600),
}
_KV = {"heads": "kv", "act_heads": "act_kv"}


def get_config(arg: str = "124m"):
  size, *rest = arg.split(",")
  if size not in SIZES or len(rest) > 1 or (rest and rest[0] not in MODELS):
    raise ValueError(f"gpt2 variant {arg!r}: expected SIZE[,PLACEMENT] with SIZE in "
                     f"{', '.join(SIZES)} and PLACEMENT in {', '.join(MODELS)}")
  c = base_config()
  c.model.n_layer, c.model.n_head, c.model.d_model = SIZES[size]
  # Pod scale: parameters and optimizer state sharded over every chip (FSDP), not replicated.
  c.mesh.data, c.mesh.fsdp = 1, -1
  if c.model.n_head % 2:  # 25 heads split over no tensor axis: shard each head's 64 dims instead
    c.mesh.rules = tuple((_KV.get(logical, logical), axes) for logical, axes in c.mesh.rules)
  if rest:
    c.model.update(MODELS[rest[0]])
  return c
