"""The placement lab. `nplace lab PLACEMENT`: the placement's scorecard next to post, pre and
peri: the maximum stable learning rate predicted from Adam's preconditioned sharpness after a
short warmup (the score is -log10 of it), the Hessian's sharpness at init, the product of the
block Jacobians' norm bounds, and at init hidden-state growth, the block Jacobians' scale
invariance, token similarity, the norms' backward factors, the gradient ratio and the
end-to-end Jacobian. The model is --config (default experiments/placements.py: study A's CPU
stress grid) made --depth blocks deep and --width wide, probed at init on a random batch, warmed
up on the config's own training batches, its curvature taken on the data's validation rows.

`nplace lab --rank RESULTS/STUDY` (a committed learning-rate sweep, e.g. results/stability_v1_cpu):
every configuration and seed scored at its trained depth, width and init, ranked against its
LR sensitivity (Spearman's rho with a bootstrap interval over seeds), written to
STUDY/lab.json for `nplace report --results`. `nplace lab --rank SWEEP_DIR` (protocol 0): the
sweep's configurations scored on the --depth x --width model against their failure rate."""
import json
import pathlib

from absl import flags

from nplace.commands.flags import Command
from nplace.config import experiment_path
from nplace.errors import UsageError
from nplace.placements import PLACEMENTS
from nplace.studies import results
from nplace.studies.lab import checks, measure, rank

DEFAULT_CONFIG = "experiments/placements.py"


def _define(fv):
  flags.DEFINE_integer("depth", 48, "blocks of the lab model", flag_values=fv)
  flags.DEFINE_integer("width", 64, "d_model of the lab model", flag_values=fv)
  flags.DEFINE_string("json", None, "write every number here", flag_values=fv)
  flags.DEFINE_string("rank", None, "sweep directory: rank its configurations by the lab's "
                      "score and by their measured outcomes", flag_values=fv)


COMMAND = Command("nplace lab PLACEMENT [--depth 48] [--width 64] [--json OUT] [--config FILE[:ARG]] "
                  "[--config.KEY=VALUE ...] | nplace lab --rank RESULTS/STUDY [--json OUT] | "
                  "nplace lab --rank SWEEP_DIR [--depth 48] [--width 64] [--json OUT]", __doc__, _define, args=True,
                  output_files=("json",))


def _with_default_config(argv):
  """argv with `--config DEFAULT_CONFIG` first unless it names a config: the lab's model,
  overridable with --config.model.x=y like any other."""
  named = any(a == "--config" or a.startswith("--config=") for a in argv)
  return argv if named else [f"--config={experiment_path(DEFAULT_CONFIG)}", *argv]


def main(argv):
  fv, args = COMMAND.parse(_with_default_config(argv))
  if len(args) > 1:
    raise UsageError(f"unexpected argument {args[1]!r}")
  placement = args[0] if args else None
  if fv.rank:
    if placement is not None:
      raise UsageError(f"--rank takes no PLACEMENT (got {placement!r}): it scores the sweep's own")
    if (pathlib.Path(fv.rank) / results.GRID).is_file():
      given = ([f"--{name}" for name in ("depth", "width") if fv[name].present]
               + [a.split("=")[0] for a in argv if a.startswith("--config")])
      if given:
        raise UsageError(f"{given[0]}: a results study is scored with its own grid's config, "
                         "at each configuration's trained depth and width")
      out = rank.rank_sensitivity(fv.rank)
    else:
      out = rank.rank(fv.config, fv.rank, fv.depth, fv.width)
  else:
    if placement not in PLACEMENTS:
      raise UsageError(f"placement {placement!r}: expected one of {', '.join(PLACEMENTS)}"
                       if placement else "name a PLACEMENT or --rank SWEEP_DIR")
    configs = {n: measure.lab_config(fv.config, fv.depth, fv.width, [("placement", n)])
               for n in dict.fromkeys((placement, *measure.BASELINES))}
    cards = measure.measure_all(configs)
    print(measure.scorecard(cards))
    out = {"depth": fv.depth, "width": fv.width, "rule": checks.RULE, "cards": cards}
  if fv.json:
    pathlib.Path(fv.json).write_text(json.dumps(out, indent=1) + "\n")
