"""A scale ladder's measures and verdicts (protocol kind SCALE_LADDER; experiments/ladder.py declares
the rules): each seed's edge, the log10 of its maximum stable rate, per arm and model width; the
comparisons at every width; the trends against log10 parameters; the fit that predicts the next
width. nplace/studies/three_way.py judges the claims on the samples built here (`Separation`,
`Trend`), and on the samples their nulls and alternatives draw, so the page's false-positive
rates and powers come from the code that gives the verdicts.

- An edge is measured on the grid: stable at rate r and at no higher rate of the width's sweep.
  Stable at the sweep's top it is a floor (`FLOOR`: the edge may be higher), stable at none a
  ceiling one step below the bottom (`CEILING`).
- Separation (`ABOVE`): at each width where both arms ran, `better` is above `worse` when every
  seed of it is above every seed of the other by more than `min_lr_gap`, a bound counting where
  it lies on the claim's side; below in the mirror case (every seed of `worse` above every seed
  of `better` by more than the margin, a bound counting where it lies on that side). Reproduced
  when above at every width, contradicted when below at one.
- Trends (`GAP_WITHIN`, `SLOPE_BELOW`, `DISTANCE_BELOW`): the least-squares slope of a per-width
  mean against log10 parameters, its interval from draws that resample each series' seeds at each
  width (spread by sqrt(n / (n - 1))) and move each (series, width) by one offset shared by its
  seeds, triangular over +-1 grid step: a grid at an unknown phase puts an edge measured at m
  anywhere in (m - step, m + step). Seeds that agree make every width's error the grid's alone, so
  a single step between two widths can come from a shallow line: narrower offsets (uniform over
  half a step) called a slope of -0.1 "below -0.1" in 13% of such draws.

Nulls and alternatives: for a separation, the two arms' edges pooled and reassigned at each width
(no effect), and both arms drawn at the measured spread with `better` one `power_at` higher; for a
trend, every series' true edges on a line (the subject's of the boundary slope, or of
`power_at`), anywhere within a grid step of its measured centre, each seed off it by a measured
deviation, measured on its sweeps with their bounds.
"""
import dataclasses
import math

import numpy as np

from nplace.model import size
from nplace.protocol import LADDER_METRICS
from nplace.studies import grid, lr_sensitivity, results
from nplace.studies.verdict import CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE, REPRODUCED, Effect, Verdict, reading

METRICS = ABOVE, GAP_WITHIN, SLOPE_BELOW, DISTANCE_BELOW = LADDER_METRICS
WIDTH = "model.d_model"
MEASURED, FLOOR, CEILING = "measured", "floor", "ceiling"


@dataclasses.dataclass(frozen=True)
class Edge:
  """One seed's edge: log10 of its maximum stable rate, or the bound it is counted at."""
  value: float
  bound: str = MEASURED  # FLOOR: stable at the sweep's top; CEILING: stable at none

  def low(self) -> float:
    return -math.inf if self.bound == CEILING else self.value

  def high(self) -> float:
    return math.inf if self.bound == FLOOR else self.value


def measured(true, sweep: tuple, step: float) -> list[Edge]:
  """True edges (log10) as a sweep measures them: the grid point at or below each; above the
  sweep's top a floor at the top, below its lowest rate a ceiling one step under it."""
  low, top = sweep
  found = []
  for value in np.floor(np.asarray(true, float) / step + 1e-9) * step:
    found.append(Edge(top, FLOOR) if value >= top - 1e-9 else Edge(low - step, CEILING) if value < low - 1e-9
                 else Edge(float(value)))
  return found


# -- separation at every width ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Separation:
  """Per width, each seed's edge of `better` and of `worse`, and each arm's sweep there (its
  lowest and top rate, log10)."""
  by_width: dict  # width -> (better edges, worse edges)
  sweeps: dict  # width -> (better's (low, top), worse's (low, top))
  margin: float
  step: float

  def nulls(self, claim) -> list:
    return [self._pooled]

  def _pooled(self, claim, rng) -> "Separation":
    out = {}
    for width, (better, worse) in self.by_width.items():
      pooled = [(better + worse)[i] for i in rng.permutation(len(better) + len(worse))]
      out[width] = (pooled[:len(better)], pooled[len(better):])
    return dataclasses.replace(self, by_width=out)

  def alternative(self, claim, rng) -> "Separation":
    """Both arms' true edges around `worse`'s mean with the seeds' pooled deviations from their
    own arm's mean, `better`'s `power_at` decades higher, each arm anywhere in its grid step (a
    uniform offset: the truth a measured rate stands for), measured on its own sweep."""
    out = {}
    for width, (better, worse) in self.by_width.items():
      b, w = (np.array([e.value for e in arm]) for arm in (better, worse))
      deviations = np.concatenate([b - b.mean(), w - w.mean()])
      b_sweep, w_sweep = self.sweeps[width]
      true_b = w.mean() + claim.power_at + rng.uniform(0, self.step) + rng.choice(deviations, len(b))
      true_w = w.mean() + rng.uniform(0, self.step) + rng.choice(deviations, len(w))
      out[width] = (measured(true_b, b_sweep, self.step), measured(true_w, w_sweep, self.step))
    return dataclasses.replace(self, by_width=out)


def _decide_separation(claim, data: Separation) -> Verdict:
  effects, above, below, notes = [], [], [], []
  for width, (better, worse) in data.by_width.items():
    above.append(min(e.low() for e in better) - max(e.high() for e in worse) > data.margin)
    below.append(min(e.low() for e in worse) - max(e.high() for e in better) > data.margin)
    mean = float(np.mean([e.value for e in better]) - np.mean([e.value for e in worse]))
    effects.append(Effect(f"width {width}", mean, math.nan, math.nan, min(len(better), len(worse)),
                          "better − worse, decades"))
    notes.append(f"width {width}: {'above' if above[-1] else 'below' if below[-1] else 'overlapping'}")
  return Verdict(claim, reading(all(above), any(below)), tuple(effects), None,
                 f"every seed of one arm above every seed of the other by more than {data.margin:g} decades "
                 "(a bound counting on its side only): " + "; ".join(notes))


# -- trends against size ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Series:
  """One arm's per-seed values (log10 rates) at each width, entering the trend with `weight`;
  series of one `group` are resampled with the same seeds (a seed's edge and its tuned rate)."""
  weight: float
  group: str
  by_width: dict  # width -> np.ndarray of per-seed values
  sweeps: dict  # width -> the arm's (lowest, top) rate there: where a draw's values are measured
  bounded: bool = False  # some value is a bound (stable at the sweep's top or at none)


@dataclasses.dataclass(frozen=True)
class Trend:
  """A per-width mean (the weighted sum of its series' seed means) against log10 parameters;
  the first series is the subject the nulls and alternative move."""
  series: tuple
  x: dict  # width -> log10 parameters
  step: float
  draws: int
  seed: int
  interval: float
  margin: float = math.nan  # slope_margin
  hold: float = math.nan  # hold_band

  @property
  def widths(self) -> tuple:
    return tuple(sorted(self.x))

  def means(self) -> np.ndarray:
    return np.array([sum(s.weight * s.by_width[w].mean() for s in self.series) for w in self.widths])

  def slope(self) -> float:
    return float(_slopes(np.array([self.x[w] for w in self.widths]), self.means()[:, None])[0])

  def drawn(self) -> np.ndarray:
    """The per-width means of `draws` draws (width x draw): each series' seeds resampled (a
    group's together), each (series, width) moved by one offset (`_offsets`)."""
    rng = np.random.default_rng(self.seed)
    y_WD = np.zeros((len(self.widths), self.draws))
    for i, w in enumerate(self.widths):
      picks = {}
      for s in self.series:
        values = s.by_width[w]
        if s.group not in picks:
          picks[s.group] = rng.integers(0, len(values), (self.draws, len(values)))
        y_WD[i] += s.weight * (_resampled_means(values, picks[s.group]) + _offsets(rng, self.step, self.draws))
    return y_WD

  def slope_interval(self) -> tuple[float, float]:
    """The percentile interval of the slope over the draws."""
    return _percentiles(_slopes(np.array([self.x[w] for w in self.widths]), self.drawn()), self.interval)

  def at(self, x: float) -> tuple[float, float, float]:
    """The line at log10 parameters `x`, and the percentile interval of the draws' lines there."""
    x_W = np.array([self.x[w] for w in self.widths])
    y_WD = self.drawn()
    lines = y_WD.mean(0) + _slopes(x_W, y_WD) * (x - x_W.mean())
    return (float(self.means().mean() + self.slope() * (x - x_W.mean())), *_percentiles(lines, self.interval))

  def nulls(self, claim) -> list:
    """Lines at the slopes that bound what the claim states: it must hold at none of them."""
    boundaries = (-self.hold, self.hold) if claim.metric == GAP_WITHIN else (-self.margin,)
    return [lambda claim, rng, slope=slope: self.at_slope(slope, rng) for slope in boundaries]

  def alternative(self, claim, rng) -> "Trend":
    return self.at_slope(claim.power_at, rng)

  def at_slope(self, slope: float, rng) -> "Trend":
    """Every series' true edges on a line (the subject's chosen so the trend's slope is `slope`,
    the others' their own least-squares lines) through its measured centre, lifted anywhere within
    a grid step (a uniform offset: the truth a measured rate stands for), each seed off the line by
    a deviation drawn from its series' measured ones; all measured on their sweeps."""
    x = np.array([self.x[w] for w in self.widths])
    own = [_slopes(x, np.array([s.by_width[w].mean() for w in self.widths])[:, None])[0] for s in self.series]
    subject = (slope - sum(s.weight * b for s, b in zip(self.series[1:], own[1:]))) / self.series[0].weight
    out = []
    for k, s in enumerate(self.series):
      centre = np.mean([s.by_width[w].mean() for w in self.widths])
      line = centre + (subject if k == 0 else own[k]) * (x - x.mean()) + rng.uniform(0, self.step)
      deviations = np.concatenate([v - v.mean() for v in s.by_width.values()])
      by_width, bounded = {}, False
      for i, w in enumerate(self.widths):
        found = measured(line[i] + rng.choice(deviations, len(s.by_width[w])), s.sweeps[w], self.step)
        by_width[w] = np.array([e.value for e in found])
        bounded |= any(e.bound != MEASURED for e in found)
      out.append(dataclasses.replace(s, by_width=by_width, bounded=bounded))
    return dataclasses.replace(self, series=tuple(out))


def _offsets(rng, step: float, draws: int) -> np.ndarray:
  """Where an edge measured at grid point m may truly lie, as an offset from m: a grid at an
  unknown phase puts it anywhere in (m - step, m + step), triangular (two uniform half-steps)."""
  return rng.uniform(-step / 2, step / 2, draws) + rng.uniform(-step / 2, step / 2, draws)


def _resampled_means(values_S, picks_DS) -> np.ndarray:
  """The means of resampled seeds, spread by sqrt(n / (n - 1)) about the seeds' mean: a bootstrap
  of n seeds has (n - 1) / n of the mean's variance (2/3 at 3 seeds), which narrows the interval."""
  mean, n = values_S.mean(), len(values_S)
  return mean + (values_S[picks_DS].mean(1) - mean) * math.sqrt(n / max(n - 1, 1))


def _percentiles(values, interval: float) -> tuple[float, float]:
  tail = (1 - interval) / 2 * 100
  low, high = np.percentile(values, [tail, 100 - tail])
  return float(low), float(high)


def _slopes(x_W, y_WD) -> np.ndarray:
  """Least-squares slope of each column of y against x."""
  dx = x_W - x_W.mean()
  return dx @ (y_WD - y_WD.mean(0)) / np.sum(dx ** 2)


def _decide_trend(claim, data: Trend) -> Verdict:
  slope = data.slope()
  low, high = data.slope_interval()
  effect = Effect(f"widths {', '.join(map(str, data.widths))}", slope, low, high,
                  min(len(v) for s in data.series for v in s.by_width.values()),
                  "slope, decades of rate per decade of parameters")
  if claim.metric == GAP_WITHIN:
    verdict = (REPRODUCED if -data.hold < low and high < data.hold else
               CONTRADICTED if low >= data.hold or high <= -data.hold else INCONCLUSIVE)
    how = f"inside ±{data.hold:g} holds; wholly outside it {'widens' if slope > 0 else 'narrows'}"
  else:
    verdict = reading(high < -data.margin, low > -data.margin)
    how = f"against {-data.margin:g}"
  if any(s.bounded for s in data.series) and verdict != INCONCLUSIVE:
    verdict, how = INCONCLUSIVE, how + "; a seed stable at its sweep's top or at none leaves it at most inconclusive"
  return Verdict(claim, verdict, (effect,), None,
                 f"{data.interval:.0%} interval of the slope from {data.draws} draws (seeds resampled, each "
                 f"width's edge anywhere within a grid step), {how}")


def decide(claim, protocol, data) -> Verdict:
  if isinstance(data, str):
    return Verdict(claim, NOT_TESTABLE, (), None, data)
  return _decide_separation(claim, data) if isinstance(data, Separation) else _decide_trend(claim, data)


# -- the measures ----------------------------------------------------------------------------

def log_params(config, sweep, arms: dict) -> dict:
  """width -> log10 of the parameter count of the first arm (the ladder's Pre-LN) at that width."""
  first = next(iter(arms))
  found = {}
  for overrides in sweep:
    width = int(overrides[WIDTH])
    if width not in found and results.arm_of(arms, overrides) == first:
      found[width] = math.log10(size.model_info(grid.apply(config, overrides, f"width {width}"))["params"])
  return found


class Ladder:
  """A ladder grid's trials grouped by arm, width, seed and rate under `protocol` (outcomes as
  lr_sensitivity.Measures classifies them), with each width's log10 parameter count."""

  def __init__(self, protocol, arms: dict, trials, expected, log_params: dict):
    self.protocol, self.log_params = protocol, log_params
    self.sweep = lr_sensitivity.Measures(protocol, arms, trials, 1.0, expected)
    self.missing, self.arms, self.seeds = self.sweep.missing, self.sweep.arms, self.sweep.seeds
    self.declared = {}  # (arm, width) -> the log10 rates its sweep declares
    self.heads = {}  # width -> the heads its models have
    for overrides in expected or [p.trial.overrides for p in self.sweep.points]:
      arm = results.arm_of(arms, overrides)
      self.heads.setdefault(int(overrides[WIDTH]), int(overrides.get("model.n_head", 0)))
      if arm is not None:
        rates = self.declared.setdefault((arm, int(overrides[WIDTH])), set())
        rates.add(round(math.log10(overrides[lr_sensitivity.LR]), 9))
    self.declared = {key: tuple(sorted(rates)) for key, rates in self.declared.items()}
    every = sorted({r for rates in self.declared.values() for r in rates})
    self.step = round(min(np.diff(every)), 9) if len(every) > 1 else 0.5
    self.widths = sorted({w for _, w in self.declared})

  def _points(self, arm, width):
    return [p for p in self.sweep.points if p.arm == arm and int(p.trial.overrides[WIDTH]) == width]

  def ran(self, arm, width) -> bool:
    return (arm, width) in self.declared

  def _by_seed(self, arm, width) -> list[list[tuple[float, object]]] | None:
    """Each seed's (log10 rate, point) at every rate the width declares, in rate order; None until
    every seed has run at every one."""
    rates = self.declared.get((arm, width))
    points = self._points(arm, width)
    seeds = sorted({p.seed for p in points}, key=str)
    if not rates or len(seeds) < self.protocol.seeds:
      return None
    found = [sorted(((round(math.log10(p.lr), 9), p) for p in points if p.seed == seed), key=lambda rp: rp[0])
             for seed in seeds]
    return None if any([r for r, _ in mine] != list(rates) for mine in found) else found

  def edges(self, arm, width) -> list[Edge] | None:
    """Each seed's edge at the width; None until every seed has run at every declared rate."""
    by_seed = self._by_seed(arm, width)
    if by_seed is None:
      return None
    rates, found = self.declared[(arm, width)], []
    for mine in by_seed:
      stable = [r for r, p in mine if not p.failed and not p.blew_up]
      if not stable:
        found.append(Edge(rates[0] - self.step, CEILING))
      else:
        found.append(Edge(max(stable), FLOOR if max(stable) == rates[-1] else MEASURED))
    return found

  def tuned(self, arm, width) -> list[float] | None:
    """Each seed's tuned rate (log10): its lowest final validation loss, a diverged run at ln V;
    None until complete."""
    by_seed = self._by_seed(arm, width)
    if by_seed is None:
      return None
    cap = math.log(by_seed[0][0][1].trial.vocab_size)
    return [mine[int(np.argmin([x if math.isfinite(x) else cap
                                for x in (self.sweep.final_loss(p) for _, p in mine)]))][0] for mine in by_seed]

  def _both(self, claim) -> tuple:
    """The widths the claim reads: its declared ones, else every width where all its arms ran."""
    return tuple(w for w in (claim.widths or self.widths) if all(self.ran(a, w) for a in claim.arms))

  def sample(self, claim, protocol):
    """The data `claim` is judged on, or a string saying what is missing."""
    widths = self._both(claim)
    if not widths:
      return "a width at which all its arms ran"
    if claim.metric == ABOVE:
      by_width = {}
      for w in widths:
        better, worse = self.edges(claim.better, w), self.edges(claim.worse, w)
        if better is None or worse is None:
          return f"every seed of both arms at every rate of width {w}"
        by_width[w] = (better, worse)
      sweeps = {w: (self.sweep_of(claim.better, w), self.sweep_of(claim.worse, w)) for w in widths}
      return Separation(by_width, sweeps, protocol.threshold("min_lr_gap"), self.step)
    if len(widths) < 2:
      return "two widths at least, for a slope"
    if claim.metric == DISTANCE_BELOW:
      for w in widths:
        tuned, edges = self.tuned(claim.arm, w), self.edges(claim.arm, w)
        if tuned is not None and min(tuned) == self.declared[(claim.arm, w)][0]:
          return f"a tuned rate above the lowest rate of width {w}'s sweep in every seed (not bracketed)"
        if tuned is not None and edges is not None and any(t > e.value for t, e in zip(tuned, edges)):
          return f"a tuned rate at or below the edge in every seed of width {w} (one is above: it blew up there)"
      series = [(1.0, "seed", self.edges, claim.arm), (-1.0, "seed", self.tuned, claim.arm)]
    elif claim.metric == SLOPE_BELOW:
      series = [(1.0, claim.arm, self.edges, claim.arm)]
    else:
      series = [(1.0, claim.better, self.edges, claim.better), (-1.0, claim.worse, self.edges, claim.worse)]
    return self._trend(series, widths)

  def sweep_of(self, arm, width) -> tuple[float, float]:
    """The arm's lowest and top rate (log10) at the width."""
    rates = self.declared[(arm, width)]
    return rates[0], rates[-1]

  def _trend(self, series, widths) -> "Trend | str":
    """A trend of (weight, resampling group, per-seed values of (arm, width), arm) series."""
    built = []
    for weight, group, values_of, arm in series:
      by_width, bounded = {}, False
      for w in widths:
        values = values_of(arm, w)
        if values is None:
          return f"every seed of {arm} at every rate of width {w}"
        by_width[w] = np.array([v.value if isinstance(v, Edge) else v for v in values], float)
        bounded |= any(isinstance(v, Edge) and v.bound != MEASURED for v in values)
      built.append(Series(weight, group, by_width, {w: self.sweep_of(arm, w) for w in widths}, bounded))
    p = self.protocol
    return Trend(tuple(built), {w: self.log_params[w] for w in widths}, self.step, p.bootstrap_resamples,
                 p.bootstrap_seed, p.interval, p.threshold("slope_margin"), p.threshold("hold_band"))

  def gap_trend(self, better, worse) -> "Trend | str":
    """The gap between two arms' edges over the widths both ran at (described where no claim reads it)."""
    widths = tuple(w for w in self.widths if self.ran(better, w) and self.ran(worse, w))
    return self._trend([(1.0, better, self.edges, better), (-1.0, worse, self.edges, worse)], widths)

  # -- described, not judged ---------------------------------------------------------------

  def line(self, arm, widths) -> "Trend | str":
    """The arm's edges over `widths` as a trend (the fit that predicts)."""
    if not all(self.ran(arm, w) for w in widths):
      return f"{arm} at every width of {widths}"
    return self._trend([(1.0, arm, self.edges, arm)], widths)

  def predict(self, arm, widths, at: float) -> tuple[float, float, float] | None:
    """The arm's line over `widths` at log10 parameters `at`: (value, the draws' interval)."""
    trend = self.line(arm, widths)
    return None if isinstance(trend, str) else trend.at(at)

  def share(self, width, pre, peri, pre_embed) -> tuple[float, float, float] | None:
    """The embedding norm's share of Peri-LN's lead at the width, (edge(pre_embed) - edge(pre)) /
    (edge(peri) - edge(pre)) over the seeds' means, with the draws' interval; None without a lead."""
    found = [self.edges(a, width) if self.ran(a, width) else None for a in (pre, peri, pre_embed)]
    if None in found:
      return None
    values = [np.array([e.value for e in edges], float) for edges in found]
    lead = values[1].mean() - values[0].mean()
    if lead <= 0:
      return None
    rng = np.random.default_rng(self.protocol.bootstrap_seed)
    draws = self.protocol.bootstrap_resamples
    means = [_resampled_means(v, rng.integers(0, len(v), (draws, len(v)))) + _offsets(rng, self.step, draws)
             for v in values]
    with np.errstate(divide="ignore", invalid="ignore"):
      shares = (means[2] - means[0]) / (means[1] - means[0])
    return (float((values[2].mean() - values[0].mean()) / lead),
            *_percentiles(shares[np.isfinite(shares)], self.protocol.interval))


def median_edge(edges: list[Edge]) -> Edge:
  """The middle seed's edge (bounds ordered past every measured value)."""
  key = {CEILING: -math.inf, FLOOR: math.inf}
  ordered = sorted(edges, key=lambda e: (key.get(e.bound, e.value), e.value))
  return ordered[len(ordered) // 2]


RIGHT, WRONG, NOT_MEASURED = "right", "wrong", "not measured"


def scored(predicted: float, median: Edge, tolerance: float, step: float) -> str:
  """A prediction scored at the grid rate nearest it (so a prediction off the grid and a grid
  rate are right over as many grid rates): right when the median seed's edge is a rate of the
  sweep within `tolerance` decades of it; wrong when it is, or when a bound puts every edge it
  allows beyond the tolerance; not measured when a bound leaves both possible."""
  nearest = math.floor(predicted / step + 0.5) * step
  if median.bound == MEASURED:
    return RIGHT if abs(median.value - nearest) <= tolerance + 1e-9 else WRONG
  if median.bound == FLOOR:  # the edge is at or above the top
    return WRONG if median.value > nearest + tolerance + 1e-9 else NOT_MEASURED
  return WRONG if median.value + step <= nearest - tolerance + 1e-9 else NOT_MEASURED  # below the lowest rate
