"""Size and cost of a configuration, computed from shapes alone (nothing allocated)."""
import json
import math

import jax
import optax
from absl import flags

from nplace import model
from nplace.placements import OPTIONS, PLACEMENTS


def _size(tree) -> int:
  return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


def _bytes(tree) -> int:
  return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def model_info(config) -> dict:
  """`params`, `flops_per_token` (6N + 12 L T d; N without the position table, which
  does no multiply) and `state_bytes` (params + AdamW moments, as held in training)."""
  m = config.model
  params = model.abstract_params(m)
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
  rows = []
  for name, p in PLACEMENTS.items():
    c = config.copy_and_resolve_references()
    c.model.placement = name
    rows.append({"name": name, "params": _size(model.abstract_params(c.model)), "formula": p.formula,
                 "paper": p.paper})
  return {"placements": rows,
          "options": [{"name": name, "formula": f, "paper": paper} for name, (f, paper) in OPTIONS.items()]}


def _define(fv):
  flags.DEFINE_bool("json", False, "print JSON", flag_values=fv)
  flags.DEFINE_bool("placements", False, "list every placement and option (params at --config's sizes)",
                    flag_values=fv)


def main(argv):
  """`nplace info --config CFG [--placements] [--json]`."""
  from nplace.cli import parse_flags
  fv = parse_flags(argv, _define)
  info = placements_info(fv.config) if fv.placements else model_info(fv.config)
  if fv.json:
    print(json.dumps(info))
  elif fv.placements:
    print(f"{'placement':10s} {'params':>13s}  formula; paper")
    print("\n".join(f"{r['name']:10s} {r['params']:13,d}  {r['formula']}; {r['paper']}" for r in info["placements"]))
    print("\n".join(f"option {r['name']}: {r['formula']}; {r['paper']}" for r in info["options"]))
  else:
    print("\n".join(f"{k:16s} {v:,}" if isinstance(v, int) else f"{k:16s} {v}" for k, v in info.items()))
