"""Prints a config's size and cost from shapes alone (parameters, FLOPs per token, train-state
bytes; nothing is allocated), or with --keys every config key with its value in this config and
its one-line doc, or with --placements every placement and option (parameters at the config's
sizes, formula, paper)."""
import json

from absl import flags

from nplace.commands.flags import Command
from nplace.config import keys
from nplace.errors import UsageError
from nplace.model.size import model_info, placements_info


def _define(fv):
  flags.DEFINE_bool("json", False, "print JSON", flag_values=fv)
  flags.DEFINE_bool("placements", False, "list every placement and option (params at --config's sizes)",
                    flag_values=fv)
  flags.DEFINE_bool("keys", False, "list every config key: its value in --config and its doc", flag_values=fv)


COMMAND = Command("nplace info --config FILE[:ARG] [--keys | --placements] [--json] [--config.KEY=VALUE ...]",
                  __doc__, _define)


def main(argv):
  fv, _ = COMMAND.parse(argv)
  if fv.keys and fv.placements:
    raise UsageError("--keys and --placements: give one")
  if fv.keys:
    rows = keys(fv.config)
    if fv.json:
      print(json.dumps([{"key": key, "value": value, "doc": doc} for key, value, doc in rows]))
      return
    width = max(len(key) for key, _, _ in rows)
    values = [str(value) for _, value, _ in rows]  # as --config.KEY=VALUE takes it
    value_width = min(max(map(len, values)), 24)
    print("\n".join(f"{key:{width}}  {value:{value_width}}  {doc}" for (key, _, doc), value in zip(rows, values)))
    return
  info = placements_info(fv.config) if fv.placements else model_info(fv.config)
  if fv.json:
    print(json.dumps(info))
  elif fv.placements:
    print(f"{'placement':10s} {'params':>13s}  formula; paper")
    print("\n".join(f"{r['name']:10s} {r['params']:13,d}  {r['formula']}; {r['paper']}" for r in info["placements"]))
    print("\n".join(f"option {r['name']}: {r['formula']}; {r['paper']}" for r in info["options"]))
  else:
    print("\n".join(f"{k:16s} {v:,}" if isinstance(v, int) else f"{k:16s} {v}" for k, v in info.items()))
