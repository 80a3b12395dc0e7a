"""Size and cost of a configuration, computed from shapes alone (nothing allocated)."""
import dataclasses
import math

import jax
import optax

from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.placements import OPTIONS, PLACEMENTS


def _size(tree) -> int:
  return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


def _bytes(tree) -> int:
  return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def model_info(config) -> dict:
  """`params`, `flops_per_token` (6N + 12 L T d; N without the position table, which
  does no multiply) and `state_bytes` (params + AdamW moments, as held in training)."""
  m = ModelConfig.of(config.model)
  params = decoder.abstract_params(m)
  n_params = _size(params)
  matmul_params = n_params - _size(params["wpe"])
  T = config.data.seq_len
  opt_state = jax.eval_shape(optax.adamw(1e-3).init, params)
  return {
      "params": n_params,
      "flops_per_token": 6 * matmul_params + 12 * m.n_layer * T * m.d_model,
      "state_bytes": _bytes(params) + _bytes(opt_state),
      "placement": m.placement,
      "n_layer": m.n_layer,
      "d_model": m.d_model,
      "seq_len": T,
  }


def placements_info(config) -> dict:
  """Every placement (its parameter count at `config`'s sizes, formula, paper) and option."""
  m, rows = ModelConfig.of(config.model), []
  for name, p in PLACEMENTS.items():
    params = decoder.abstract_params(dataclasses.replace(m, placement=name))
    rows.append({"name": name, "params": _size(params), "formula": p.formula, "paper": p.paper})
  return {"placements": rows,
          "options": [{"name": name, "formula": f, "paper": paper} for name, (f, paper) in OPTIONS.items()]}
