"""One path from a study's filed trials to what a protocol judges: `measures_for` builds the
measuring class that the protocol's declared `kind` names (nplace/protocol.py). The results
page and `nplace lab --all` both measure through it, so they agree on every trial, the grid's
unfiled ones included."""
from nplace.protocol import COLLAPSE_MECHANISMS, COMPARISON, FIXED_RATES, GROWTH_PER_SEED, SCALE_LADDER, STABILITY_SWEEP
from nplace.studies import collapse, depth_growth, ladder, lr_sensitivity, results


def measures_for(protocol, study, found, arg: str, horizon: float = 1.0):
  """`protocol`'s measures of `study` (results.Study, with the trials it reuses) as they stood at
  `horizon` (a fraction of the run), its grid's (`found`, a protocol.Grid) variant ARG naming the
  trials not yet filed."""
  arms = results.arms(found, protocol)
  if protocol.kind in (STABILITY_SWEEP, COMPARISON, FIXED_RATES):
    return lr_sensitivity.Measures(protocol, arms, study.trials, horizon, found.sweep(arg))
  if protocol.kind == GROWTH_PER_SEED:
    return depth_growth.SeedMeasures(protocol, arms, study.trials, horizon, found.sweep(arg))
  if protocol.kind == SCALE_LADDER:
    expected = found.sweep(arg)
    return ladder.Ladder(protocol, arms, study.trials, expected, ladder.log_params(found.config(arg), expected, arms))
  if protocol.kind == COLLAPSE_MECHANISMS:
    return collapse.Measures(protocol, arms, study.trials)
  raise ValueError(f"{protocol.name} protocol v{protocol.version}: kind {protocol.kind!r} has no measures")
