"""The placement lab. `nplace lab --all`: what the filed grids measured, each configuration's
maximum stable learning rate by size (the scale ladder's arms at every width on Tiny Shakespeare,
the placements grid's configurations at depth 12 x 32 on the synthetic language), read from
--results (default results/); with --width N, the ladder's fitted line at that width with its
interval, labelled an extrapolation outside the widths it was fitted over. (Rule version 4, the
range test that predicted these rates, showed no skill on the placements grid: it is no longer
printed.)

`nplace lab PLACEMENT`: the placement's scorecard at init next to post, pre and peri: rule
version 3's maximum stable learning rate predicted from Adam's preconditioned sharpness after a
short warmup (the score is -log10 of it), the Hessian's sharpness at init, the product of the
block Jacobians' norm bounds, and at init hidden-state growth, the block Jacobians' scale
invariance, token similarity, the norms' backward factors, the gradient ratio and the
end-to-end Jacobian. The model is --config (default experiments/placements.py: study A's CPU
stress grid) made --depth blocks deep and --width wide, probed at init on a random batch, warmed
up on the config's own training batches, its curvature taken on the data's validation rows.

`nplace lab --rank RESULTS/STUDY` (a committed learning-rate sweep, e.g. results/stability_v1_cpu):
every configuration scored by the rule version its lab protocol judges (version 4's range test
per configuration; version 3 at each trained depth, width and seed's init), ranked against what
the grid measured (Spearman's rho with a bootstrap interval), written to STUDY/lab.json for
`nplace report --results`. `nplace lab --rank SWEEP_DIR` (protocol 0): the sweep's
configurations scored on the --depth x --width model against their failure rate."""
import json
import pathlib

from absl import flags

from nplace.commands.flags import Command, names_config
from nplace.config import experiment_path
from nplace.errors import UsageError
from nplace.logs.progress import stage
from nplace.placements import PLACEMENTS
from nplace.studies import results
from nplace.studies.lab import checks, measure, measured, rank

DEFAULT_CONFIG = "experiments/placements.py"


def _define(fv):
  flags.DEFINE_integer("depth", 48, "blocks of the lab model", flag_values=fv)
  flags.DEFINE_integer("width", 64, "d_model of the lab model", flag_values=fv)
  flags.DEFINE_string("json", None, "write every number here", flag_values=fv)
  flags.DEFINE_string("rank", None, "sweep directory: rank its configurations by the lab's "
                      "score and by their measured outcomes", flag_values=fv)
  flags.DEFINE_bool("all", False, "each configuration's measured maximum stable rate by size (with --width N: the "
                    "scale ladder's fit at N)", flag_values=fv)
  flags.DEFINE_string("results", "results", "--all: the results directory the grids are filed in", flag_values=fv)


COMMAND = Command("nplace lab --all [--results DIR] [--width N] [--json OUT] | "
                  "nplace lab PLACEMENT [--depth 48] [--width 64] [--json OUT] [--config FILE[:ARG]] "
                  "[--config.KEY=VALUE ...] | nplace lab --rank RESULTS/STUDY [--json OUT] | "
                  "nplace lab --rank SWEEP_DIR [--depth 48] [--width 64] [--json OUT]", __doc__, _define, args=True,
                  output_files=("json",), config_default="the lab's model; with --all, the placements grid")


def _with_default_config(argv):
  """argv with `--config` first unless it names a config: the lab's model, overridable with
  --config.model.x=y like any other."""
  return argv if names_config(argv) else [f"--config={experiment_path(DEFAULT_CONFIG)}", *argv]


def _shape_flags(fv) -> list[str]:
  return [f"--{name}" for name in ("depth", "width") if fv[name].present]


def _measure_each(configs: dict, depth: int, width: int) -> dict:
  """measure_all a configuration at a time, each announced before it: a card is two compiles and
  a warmup (the three of `nplace lab peri` at depth 48 took 110 s without a word)."""
  cards = {}
  for k, (name, config) in enumerate(configs.items(), 1):
    stage(f"[{k}/{len(configs)}] measuring {name} at {depth} x {width}: probes at init, "
          f"{checks.WARMUP_STEPS} Adam steps, sharpness...")
    cards |= measure.measure_all({name: config})
  return cards


def main(argv):
  full = _with_default_config(argv)
  fv, args = COMMAND.parse(full)
  if len(args) > 1:
    raise UsageError(f"unexpected argument {args[1]!r}")
  placement = args[0] if args else None
  if fv.all:
    if placement is not None or fv.rank:
      raise UsageError("--all takes no PLACEMENT and no --rank: it reads what the filed grids measured")
    if fv["depth"].present:
      raise UsageError("--depth: --all reads the filed grids at their own depth")
    text, out = measured.report(fv.results, fv.width if fv["width"].present else None)
    print(text)
  elif fv.rank:
    if placement is not None:
      raise UsageError(f"--rank takes no PLACEMENT (got {placement!r}): it scores the sweep's own")
    if (pathlib.Path(fv.rank) / results.GRID).is_file():
      given = _shape_flags(fv) + [a.split("=")[0] for a in argv if a.startswith("--config")]
      if given:
        raise UsageError(f"{given[0]}: a results study is scored with its own grid's config, "
                         "at each configuration's trained depth and width")
      out = rank.rank_sensitivity(fv.rank)
    else:
      out = rank.rank(fv.config, fv.rank, fv.depth, fv.width)
  else:
    if placement not in PLACEMENTS:
      raise UsageError(f"placement {placement!r}: expected one of {', '.join(PLACEMENTS)}"
                       if placement else "name a PLACEMENT, --all or --rank SWEEP_DIR")
    configs = {n: measure.lab_config(fv.config, fv.depth, fv.width, [("placement", n)])
               for n in dict.fromkeys((placement, *measure.BASELINES))}
    cards = _measure_each(configs, fv.depth, fv.width)
    print(measure.scorecard(cards))
    out = {"depth": fv.depth, "width": fv.width, "rule": checks.SHARPNESS_RULE, "cards": cards}
  if fv.json:
    pathlib.Path(fv.json).write_text(json.dumps(out, indent=1) + "\n")
    stage(f"wrote {fv.json}")
