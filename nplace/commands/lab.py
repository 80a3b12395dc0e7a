"""The placement lab. `nplace lab --all`: what the filed grids measured, each configuration's
maximum stable learning rate by size (the scale ladder's arms at every width on Tiny Shakespeare,
the placements grid's configurations at depth 12 x 32 on the synthetic language), read from
--results (default results/); with --width N, the ladder's fitted line at that width with its
interval, labelled an extrapolation outside the widths it was fitted over. (Rule version 4, the
range test that predicted these rates, showed no skill on the placements grid: it is no longer
printed.)

`nplace lab PLACEMENT`: the placement's scorecard at init next to post, pre and peri, each a
measurement, none a prediction: the top eigenvalue of Adam's preconditioned Hessian after a short
warmup, the Hessian's sharpness at init, the product of the block Jacobians' norm bounds, and at
init hidden-state growth, the block Jacobians' scale invariance, token similarity, the norms'
backward factors, the gradient ratio and the end-to-end Jacobian. (The maximum stable rate rule
version 3 predicted from the preconditioned sharpness showed no skill, right for 0 of 10
configurations: it is no longer printed.) The model is --config (default
experiments/placements.py: study A's CPU model) made --depth blocks deep and --width wide, probed
at init on a random batch, warmed up on the config's own training batches, its curvature taken on
the data's validation rows."""
import json

from absl import flags

from nplace.commands.flags import Command, names_config
from nplace.config import experiment_path
from nplace.errors import UsageError
from nplace.logs.progress import stage
from nplace.placements import PLACEMENTS
from nplace.runtime import workdirs
from nplace.studies.lab import checks, measure, measured

DEFAULT_CONFIG = "experiments/placements.py"


def _define(fv):
  flags.DEFINE_integer("depth", 48, "blocks of the lab model", lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("width", 64, "d_model of the lab model", lower_bound=1, flag_values=fv)
  flags.DEFINE_string("json", None, "write every number here", flag_values=fv)
  flags.DEFINE_bool("all", False, "each configuration's measured maximum stable rate by size (with --width N: the "
                    "scale ladder's fit at N)", flag_values=fv)
  flags.DEFINE_string("results", "results", "--all: the results directory the grids are filed in", flag_values=fv)


COMMAND = Command("nplace lab --all [--results DIR] [--width N] [--json OUT] | "
                  "nplace lab PLACEMENT [--depth 48] [--width 64] [--json OUT] [--config FILE[:ARG]] "
                  "[--config.KEY=VALUE ...]", __doc__, _define, args=True, output_files=("json",),
                  config_default="the lab's model")


def _with_default_config(argv):
  """argv with `--config` first unless it names a config: the lab's model, overridable with
  --config.model.x=y like any other."""
  return argv if names_config(argv) else [f"--config={experiment_path(DEFAULT_CONFIG)}", *argv]


def _measure_each(configs: dict, depth: int, width: int) -> dict:
  """measure_all a configuration at a time, each announced before it: a card is two compiles and
  a warmup (the three of `nplace lab peri` at depth 48 took 110 s without a word)."""
  cards = {}
  for k, (name, config) in enumerate(configs.items(), 1):
    stage(f"[{k}/{len(configs)}] measuring {name} at {depth} x {width}: probes at init, "
          f"{checks.WARMUP_STEPS} Adam steps, sharpness...")
    cards |= measure.measure_all({name: config})
  return cards


LAB_SETS = {"model.placement": "PLACEMENT", "model.n_layer": "--depth", "model.d_model": "--width"}


def main(argv):
  full = _with_default_config(argv)
  fv, args = COMMAND.parse(full)
  if len(args) > 1:
    raise UsageError(f"unexpected argument {args[1]!r}")
  placement = args[0] if args else None
  overrides = [a for a in argv if a.startswith("--config.")]
  if fv.all:
    if placement is not None:
      raise UsageError("--all takes no PLACEMENT: it reads what the filed grids measured")
    if fv["depth"].present:
      raise UsageError("--depth: --all reads the filed grids at their own depth")
    if names_config(argv) or overrides:
      raise UsageError(f"{(overrides or ['--config'])[0]}: --all reads the filed grids, which trained their own")
    text, out = measured.report(fv.results, fv.width if fv["width"].present else None)
    print(text)
  else:
    if placement not in PLACEMENTS:
      raise UsageError(f"placement {placement!r}: expected one of {', '.join(PLACEMENTS)}"
                       if placement else "name a PLACEMENT or --all")
    if fv["results"].present:
      raise UsageError("--results: only --all reads the filed grids")
    for override in overrides:
      if (key := override.removeprefix("--config.").partition("=")[0]) in LAB_SETS:
        raise UsageError(f"{override}: the lab sets {key} ({LAB_SETS[key]})")
    configs = {n: measure.lab_config(fv.config, fv.depth, fv.width, [("placement", n)])
               for n in dict.fromkeys((placement, *measure.BASELINES))}
    cards = _measure_each(configs, fv.depth, fv.width)
    print(measure.scorecard(cards))
    out = {"depth": fv.depth, "width": fv.width, "cards": cards}
  if fv.json:
    workdirs.write_atomic(workdirs.resolve(fv.json), json.dumps(out, indent=1) + "\n")
    stage(f"wrote {fv.json}")
