"""One path from a study's filed trials to what a protocol judges: `measures_for` builds the
measuring class that the protocol's declared `kind` names (nplace/protocol.py). The results
page and `nplace lab --rank` both measure through it, so they agree on every trial, the grid's
unfiled ones included."""
from nplace.protocol import (COLLAPSE_MECHANISMS, COMPARISON, FIXED_RATES, GROWTH_PER_SEED, LAB, LR_SWEEP,
                             SCALE_LADDER, STABILITY_SWEEP)
from nplace.studies import collapse, depth_growth, ladder, lr_sensitivity, ranking, results


def measures_for(protocol, study, module, arg: str, horizon: float = 1.0, ranked=None):
  """`protocol`'s measures of `study` (results.Study, with the trials it reuses) as they stood at
  `horizon` (a fraction of the run), its grid `module`'s variant ARG naming the trials not yet
  filed. A lab protocol ranks the lab's scores (STUDY/lab.json) against the measures of
  `ranked`, the study protocol whose sweep it predicts, and against the baselines its claims
  name (the grid module's LAB_BASELINES, on each arm): None where the lab has not scored it."""
  if protocol.kind == LAB:
    scored = ranking.scores_of(study)
    if scored is None:
      return None
    scores, predicted = scored
    arms = results.arms(module, ranked)
    baselines = {name: {arm: module.LAB_BASELINES[name](overrides) for arm, overrides in arms.items()}
                 for name in dict.fromkeys(c.baseline for c in protocol.claims if c.baseline)}
    return ranking.Ranking(protocol, measures_for(ranked, study, module, arg, horizon), scores, predicted, baselines)
  arms = results.arms(module, protocol)
  if protocol.kind in (LR_SWEEP, STABILITY_SWEEP, COMPARISON, FIXED_RATES):
    return lr_sensitivity.Measures(protocol, arms, study.trials, horizon, module.get_sweep(arg))
  if protocol.kind == GROWTH_PER_SEED:
    return depth_growth.SeedMeasures(protocol, arms, study.trials, horizon, module.get_sweep(arg))
  if protocol.kind == SCALE_LADDER:
    expected = module.get_sweep(arg)
    return ladder.Ladder(protocol, arms, study.trials, expected, ladder.log_params(module.get_config(arg), expected, arms))
  if protocol.kind == COLLAPSE_MECHANISMS:
    return collapse.Measures(protocol, arms, study.trials)
  raise ValueError(f"{protocol.name} protocol v{protocol.version}: kind {protocol.kind!r} has no measures")
