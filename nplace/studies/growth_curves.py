"""Growth protocol 3's per-seed statistics over depth. Its claims are judged three-way
(nplace/studies/three_way.py calls `decide` on the `Curves` a claim reads, and on the curves its
nulls and alternative draw).

- `exponential_rate` (Pre-LN's growth above init y(D), the value at the horizon minus at init):
  per seed, the least-squares fit of y = a + b (e^{rD} - 1) / r, which is a + b D at r = 0 and
  continuous there, with r profiled over RATE_GRID; r̂ is the rate of the best fit. An affine
  curve, whatever its intercept, is fitted best at r = 0: "exponential" is a model comparison
  a straight line cannot win. Reproduced when the Welch interval of r̂ over the seeds lies above
  the protocol's `min_rate`, contradicted when it lies below, inconclusive otherwise.
- `level_powers`, a description: per seed, the exponent p of the top layer's level (mean |h|;
  entry-wise variance) at the horizon, a D^p by least squares in log-log.

Nulls and alternative: curves of the shape a claim denies, or states at `power_at`, with the
noise the seeds show around their own fits (relative deviations from each seed's best fit),
drawn normal at the pooled spread.
"""
import dataclasses
import math

import numpy as np

from nplace.protocol import GROWTH_METRICS
from nplace.studies import intervals
from nplace.studies.verdict import NOT_TESTABLE, ROUNDING, Effect, Verdict, reading

METRICS = RATE, = GROWTH_METRICS
RATE_GRID = np.round(np.linspace(-0.1, 0.3, 801), 6)  # per layer, in steps of 0.0005; holds 0 exactly


def exponential_basis(depths, rates) -> np.ndarray:
  """(e^{rD} - 1) / r for each rate (rows) and depth (columns); D where r = 0."""
  d, r = np.asarray(depths, float)[None, :], np.asarray(rates, float)[:, None]
  safe = np.where(r == 0, 1.0, r)
  return np.where(r == 0, d, np.expm1(safe * d) / safe)


def fitted_rates(depths, growth_SN) -> np.ndarray:
  """Per seed (rows of growth_SN, one column per depth), the rate r̂ of RATE_GRID whose rising fit
  (b > 0) of a + b (e^{rD} - 1) / r leaves the least squared residual; RATE_GRID's lowest where
  no fit rises (a falling curve is no growth)."""
  basis = exponential_basis(depths, RATE_GRID)
  basis = basis - basis.mean(1, keepdims=True)
  y = np.asarray(growth_SN, float)
  y = y - y.mean(1, keepdims=True)
  projection = y @ basis.T  # seed x rate: b's sign, and the least squares' drop in residual
  explained = np.where(projection > 0, projection ** 2 / np.sum(basis ** 2, 1), -np.inf)
  return RATE_GRID[np.argmax(explained, 1)]


def shallow_rate(depths, growth_SN) -> float:
  """The seeds' mean r̂ over all but the deepest depth: the depths double, so the deepest point
  alone can carry a bend, and a rate must show without it too."""
  return float(np.mean(fitted_rates(depths[:-1], np.asarray(growth_SN, float)[:, :-1])))


def best_fits(depths, growth_SN, rates_S) -> np.ndarray:
  """Each seed's fitted curve a + b (e^{r̂D} - 1) / r̂ at its own rate."""
  y = np.asarray(growth_SN, float)
  out = np.empty_like(y)
  for s, rate in enumerate(rates_S):
    design = np.stack([np.ones(len(depths)), exponential_basis(depths, [rate])[0]], 1)
    out[s] = design @ np.linalg.lstsq(design, y[s], rcond=None)[0]
  return out


def level_powers(depths, level_SN) -> np.ndarray:
  """Per seed, the least-squares exponent p of level ~ a D^p (log-log); NaN for a level <= 0."""
  x = np.log(np.asarray(depths, float))
  weights = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
  level = np.asarray(level_SN, float)
  with np.errstate(invalid="ignore", divide="ignore"):
    logs = np.where(level > 0, np.log(np.where(level > 0, level, 1.0)), np.nan)
  return logs @ weights


@dataclasses.dataclass(frozen=True)
class Curves:
  """One arm's per-seed growth above init over the depths."""
  depths: tuple
  values_SN: np.ndarray  # seed x depth
  margin: float = math.nan  # the claim's `min_rate`: the null at the margin

  def rates(self) -> np.ndarray:
    return fitted_rates(self.depths, self.values_SN)

  def noise(self) -> float:
    """The pooled spread of the seeds around their own fits (3 parameters a seed), in units of
    the seeds' mean growth's range over the depths: a ratio to the fit would blow up where the
    growth crosses zero."""
    seeds, depths = self.values_SN.shape
    fits = best_fits(self.depths, self.values_SN, self.rates())
    spread = np.ptp(self.values_SN.mean(0))
    return float(np.sqrt(np.sum((self.values_SN - fits) ** 2) / (seeds * (depths - 3))) / spread)

  def nulls(self, claim) -> list:
    """Affine curves (the seeds' mean affine fit) and curves at the `min_rate` margin."""
    return [lambda claim, rng: self._bent(0.0, rng), lambda claim, rng: self._bent(self.margin, rng)]

  def alternative(self, claim, rng) -> "Curves":
    return self._bent(claim.power_at, rng)

  def _bent(self, rate: float, rng) -> "Curves":
    """Curves a + b (e^{rD} - 1) / r through the seeds' mean affine fit at the shallowest and the
    deepest depth, plus N(0, the data's noise times the curve's range) per seed and depth."""
    d = np.asarray(self.depths, float)
    slope, intercept = np.polyfit(d, self.values_SN.mean(0), 1)
    ends = intercept + slope * d[[0, -1]]
    shape = exponential_basis(d, [rate])[0]
    curve = ends[0] + (ends[1] - ends[0]) * (shape - shape[0]) / (shape[-1] - shape[0])
    noise = rng.normal(0, self.noise() * abs(ends[1] - ends[0]), self.values_SN.shape)
    return dataclasses.replace(self, values_SN=curve + noise)


def decide(claim, protocol, data: Curves) -> Verdict:
  """The claim's three-way verdict from the Welch interval of its per-seed rate r̂."""
  if not np.all(np.isfinite(data.values_SN)):
    return Verdict(claim, NOT_TESTABLE, (), None, "a finite value at every depth and seed")
  values = data.rates()
  mean, low, high = intervals.mean_interval(values, protocol, np.random.default_rng(protocol.bootstrap_seed))
  bound = protocol.threshold("min_rate")
  effect = Effect("as configured", mean, low, high, len(values), "rate r̂ of a + b(e^{rD} − 1)/r, per layer")
  # an r̂ at the grid's edge is censored: the true rate may lie beyond it
  held = (low > bound + ROUNDING and not np.any(values <= RATE_GRID[0])
          and shallow_rate(data.depths, data.values_SN) > bound)
  against = high < bound - ROUNDING and not np.any(values >= RATE_GRID[-1])
  return Verdict(claim, reading(held, against), (effect,), None, f"{protocol.interval:.0%} Welch t-interval over "
                                                                  f"{len(values)} seeds against {bound:g}")
