"""What a verdict is: one claim's reading (reproduced, not reproduced; or reproduced,
contradicted, inconclusive; or not testable) with the effects it was read from."""
import dataclasses

from nplace.protocol import Claim

REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE = "reproduced", "not reproduced", "not testable at this tier"
CONTRADICTED, INCONCLUSIVE = "contradicted", "inconclusive"
ROUNDING = 1e-9  # how far past its bound a three-way statistic must lie: alike seeds land on it to the last bit


def reading(held: bool, against: bool) -> str:
  """Reproduced where the test clears the claim's margin its way (and not the other), contradicted
  where it clears it the other way, inconclusive where it does neither."""
  return REPRODUCED if held and not against else CONTRADICTED if against else INCONCLUSIVE


@dataclasses.dataclass(frozen=True)
class Effect:
  """What a claim is judged on in one model shape; by default `worse` minus `better` (so
  positive supports the claim). `low`/`high` NaN: no interval."""
  shape: str
  mean: float
  low: float
  high: float
  seeds: int
  what: str = "worse − better, nats"


def effect_what(metric: str) -> str:
  """What a compared metric's effect is: worse − better in nats; for max_stable_lr, compared as
  -log10 of the rate, how many decades higher `better` still learns than `worse`."""
  return "better − worse, decades of rate" if metric == "max_stable_lr" else Effect.what


@dataclasses.dataclass(frozen=True)
class Verdict:
  claim: Claim
  verdict: str
  effects: tuple[Effect, ...]  # per shape; () for divergence counts
  counts: tuple[int, int, int, int] | None  # failed runs of better, its runs, of worse, its runs: counted claims
  would_change: str


def partly_run(verdict: Verdict, missing: dict) -> Verdict:
  """A grid run in part (`missing`: where -> trials not yet filed) is not testable yet; the
  verdict says what its finished part shows."""
  if not missing:
    return verdict
  return dataclasses.replace(verdict, verdict=NOT_TESTABLE, would_change=f"the grid's remaining trials: "
                             f"{not_filed(missing)}; on the finished ones: {verdict.verdict}")


def not_filed(missing: dict) -> str:
  """`depth 12, width 32 (50 trials), ...`: where each of a grid's unfiled trials belongs."""
  return ", ".join(f"{where} ({n} trials)" for where, n in missing.items())
