"""The scale ladder: study A's stability claims over model size, on real text (Tiny Shakespeare,
bytes), with a blind prediction of the next size. Judged by `PROTOCOL` (ladder, version 1),
declared before any of its runs.

`experiments/ladder.py:VARIANT`, VARIANT one of
  cpu   depth 12 at widths 32, 64, 128 and 256, head size 16 (2 to 16 heads): the four arms (Pre-LN,
        Peri-LN with its embedding norm, Pre-LN + embedding norm, Pre-LN + QK-norm), weight decay 0.1,
        a half-decade rate grid, 3 seeds, 1,000 steps of 16 x 64 bytes (RATES below: 240 trials).
        Width 256's four rates are the blind prediction's (`PREDICTED_256`, committed after widths
        32-128 are filed and before any run at 256); until then the variant lists widths 32-128.
  gpu   widths 512 and 768, head size 64 (8 and 12 heads: 768 is GPT-2 124M's shape), the four arms
        over the whole grid, the same budget: for one H100/H200-class card, not run here.

Each trial is study A's protocol 4 trial (experiments/stability.py:cpu: its schedule, logging and
outcome rules) on Tiny Shakespeare instead of the synthetic language, at the rung's width.

  nplace sweep --config experiments/ladder.py:cpu --workdir runs/ladder --batch 8 --only 'd_model=32,'
  nplace report --results results/ runs/ladder
"""
import math

import ml_collections

from nplace.config import experiment
from nplace.protocol import FINDING, SCALE_LADDER, THREE_WAY, Claim, Grid, Protocol, ScaleLadder, Threshold
SEED_SETTING = "GPT-2 (124M to 1.5B) on OpenWebText"  # where the seed's claims were made
DEPTH, CPU_HEAD, GPU_HEAD = 12, 16, 64  # head size: one across a tier (a GPT-2 head is 64)
GPU_WIDTHS = (512, 768)  # the cpu tier's widths: RATES' and BLIND_WIDTH
SEEDS = range(3)
STEP = 0.5  # decades between neighbouring rates of the grid


def _rate(exponent: float) -> float:
  return 10 ** exponent


def _arm(placement: str, embed_norm=False, qk_norm=False) -> dict:
  # every key always set, so trial names line up
  return {"model.placement": placement, "model.embed_norm": embed_norm, "model.qk_norm": qk_norm,
          "optim.weight_decay": 0.1}


PRE, PERI, PRE_EMBED, PRE_QK = "Pre-LN", "Peri-LN", "Pre-LN + embedding norm", "Pre-LN + QK-norm"
ARMS = {
    PRE: _arm("pre"),
    PERI: _arm("peri", embed_norm=True),  # Peri-LN as its paper trains it
    PRE_EMBED: _arm("pre", embed_norm=True),  # the embedding norm's control
    PRE_QK: _arm("pre", qk_norm=True),  # Wortsman et al.'s remedy for the narrowing
}
FULL = tuple(e / 2 for e in range(-6, 1))  # log10 rates: 10^-3 .. 10^0, half-decade steps
# width -> arm -> the log10 rates it runs at (width 256: from the blind prediction)
RATES = {
    32: {arm: FULL for arm in ARMS},
    64: {arm: FULL for arm in ARMS},
    # Pre-LN reaches down to 10^-2.5 so that its tuned rate is bracketed if it falls with width
    128: {PRE: FULL[1:], PERI: FULL[2:], PRE_EMBED: FULL[2:]},
}
FIT_WIDTHS, BLIND_WIDTH = (32, 64, 128), 256
# arm -> (predicted log10 maximum stable rate at width 256, the interval's low, high): the fit
# below applied to the filed widths 32-128, committed before any run at 256 (tests check it).
PREDICTED_256 = {PRE: (-1.0, -1.581, -0.393), PERI: (-0.5, -1.081, 0.107)}  # at 9,559,808 parameters


def rates_256(predicted: float) -> tuple[float, ...]:
  """The blind rung's rates: the grid rate c nearest the predicted edge, one step below it and two
  above, so every rate within half a decade of c is measured and none is the sweep's top (a floor)."""
  centre = math.floor(predicted / STEP + 0.5) * STEP
  return (centre - STEP, centre, centre + STEP, centre + 2 * STEP)


THRESHOLDS = (
    Threshold("did_not_learn", 0.1, "fraction of the learnable nats gained below which a run did not learn "
                                    "(where an entropy rate exists; text has none: `learned_margin`)"),
    Threshold("learned_margin", 0.3, "nats below the frequency loss a text run's validation loss must reach to "
                                     "have learned: the gain protocol 4 asks on the synthetic language (a tenth "
                                     "of its 3.0 learnable nats)"),
    Threshold("spike_rebound", 1.0, "nats above the running minimum of the train loss that make a loss spike "
                                    "(reported, never a failure)"),
    Threshold("blow_up_rise", 1.0, "nats above the train loss's running minimum after warmup that make a "
                                   "blow-up: a run that blew up was not stable at its rate"),
    Threshold("min_lr_gap", 0.25, "decades: one arm's maximum stable rate is above another's at a width when "
                                  "every seed of it is above every seed of the other by more than this (at "
                                  "least one grid step)"),
    Threshold("slope_margin", 0.1, "decades of rate per decade of parameters a trend must clear (from GPT-2 "
                                   "124M to 1.5B, 0.11 decades: under a quarter of a grid step)"),
    Threshold("hold_band", 0.5, "decades of rate per decade of parameters within which a trend 'holds': one "
                                "grid step per decade, about what 3 seeds on a half-decade grid at four widths "
                                "resolve (the grid's steps alone give an interval of about +-0.3)"),
    Threshold("lr_tolerance", 0.5, "decades: a predicted maximum stable rate this close to the measured one is "
                                   "right"),
)
EDGE_CLAIM = dict(power_at=0.5)  # one grid step between the arms
PROTOCOL = Protocol(
    name="ladder", version=1, kind=SCALE_LADDER, seeds=len(SEEDS), bootstrap_resamples=2000, bootstrap_seed=0,
    interval=0.95, verdicts=THREE_WAY, blow_ups=True, diverged_at_cap=True, stable_needs_no_blow_up=True,
    arms=ARMS, thresholds=THRESHOLDS,
    ladder=ScaleLadder(FIT_WIDTHS, BLIND_WIDTH, PREDICTED_256, beyond="gpu", share=(PRE, PERI, PRE_EMBED),
                       described=((PRE_QK, PRE),), beside=("experiments/stability.py:placements",
                                                           "stability_placements")),
    summary="Study A's stability claims over model size: depth 12 at widths 32, 64, 128 and 256 (head size 16), "
            "on Tiny Shakespeare read as bytes, 1,000 steps of 16 x 64 bytes at every width (a fixed-token "
            "ladder), weight decay 0.1, 3 seeds, a half-decade rate grid; Pre-LN, Peri-LN with its embedding "
            "norm, Pre-LN + embedding norm and Pre-LN + QK-norm. Protocol 4's outcome rules (stable = learned "
            "and never blew up), with 'learned' on text meaning a validation loss 0.3 nats below the corpus's "
            "frequency loss. A seed's edge is its maximum stable rate (log10): stable at the width's top rate "
            "counts at the top (a floor), stable at none one step below the bottom (a ceiling). Trends are "
            "least-squares lines against log10 of the width's Pre-LN parameter count, their 95% intervals from "
            "2000 draws (seed 0) resampling each arm's seeds at each width (spread by sqrt(n/(n-1)), the "
            "bootstrap's missing variance) and moving each (arm, width)'s edges by one offset shared by its "
            "seeds, triangular over +-1 grid step (where a grid at an unknown phase puts the true edge). The "
            "same fit over widths 32-128 predicts width 256 blind, and 512 and 768. Fixed before any run; "
            "amended before any trial was filed or read, after simulation: the offsets were uniform over "
            "+-half a step, without the spread correction (a false-positive rate of 13% at the boundary slope "
            "with seeds that agree), and QK-norm's trend claim over two widths (power under 1% at half a decade "
            "per decade) became a comparison at each width, its trend described. Amended again before any "
            "trial was filed or read, after data built to break it: a comparison is contradicted only where "
            "the other arm is above at some width (equal grid rates contradicted a true lead of 0.3 decades); "
            "the gap holds only with Peri-LN's lead reproduced; a trend whose seeds hold a bound is at most "
            "inconclusive; the tuned distance is not testable where a tuned rate is above the edge; width 256 "
            "runs four rates (c - 0.5 to c + 1, so a right prediction is measured, not a floor); a prediction "
            "and the baseline are scored at their nearest grid rate, 'not measured' where a bound leaves both "
            "possible; the embedding-norm claims read widths 32-128 as stated; the stated power draws every "
            "arm's edges through its sweep.",
    claims=(
        Claim("peri_above_pre_at_every_width", "Peri-LN still learns at higher learning rates than Pre-LN, at "
              "every width", metric="edge_above_every_width", better=PERI, worse=PRE, **EDGE_CLAIM),
        Claim("gap_holds", "Peri-LN's lead in maximum stable rate holds as the model grows (its slope against "
              "log10 parameters within the hold band; widens or narrows if the slope's interval clears it)",
              metric="gap_slope_within", better=PERI, worse=PRE, source=FINDING, power_at=0.0,
              given="peri_above_pre_at_every_width"),
        Claim("pre_edge_falls", "Pre-LN's maximum stable rate falls as the model grows (Wortsman et al. 2023)",
              metric="edge_slope_below", arm=PRE, source=FINDING, power_at=-0.5),
        Claim("qk_norm_above_pre_at_every_width", "QK-norm raises Pre-LN's maximum stable rate, at every width "
              "(Wortsman et al. 2023; widths 32 and 64)", metric="edge_above_every_width", better=PRE_QK, worse=PRE,
              source=FINDING, **EDGE_CLAIM),
        Claim("tuned_nears_edge", "Pre-LN's tuned rate (its best final loss) sits nearer its maximum stable rate "
              "as the model grows (widths 32-128, where the sweep brackets it)", metric="tuned_distance_slope_below",
              arm=PRE, source=FINDING, power_at=-0.5, widths=FIT_WIDTHS),
        Claim("embed_norm_raises_edge", "The embedding norm alone raises Pre-LN's maximum stable rate, at every "
              "width (32-128)", metric="edge_above_every_width", better=PRE_EMBED, worse=PRE, source=FINDING,
              widths=FIT_WIDTHS, **EDGE_CLAIM),
        Claim("output_norms_raise_edge", "Peri-LN's output norms raise it beyond the embedding norm's, at every "
              "width (32-128)", metric="edge_above_every_width", better=PERI, worse=PRE_EMBED, source=FINDING,
              widths=FIT_WIDTHS, **EDGE_CLAIM),
    ),
)
# The rules the claims' metrics name (nplace/studies/ladder.py implements them):
# - edge_above_every_width: at each width where both arms ran (or the claim's `widths`), `better` is
#   above when every seed's edge exceeds every `worse` seed's by more than `min_lr_gap` (a `better`
#   seed stable at its top or a `worse` seed stable at none still counts: its bound is on the
#   claim's side); below when every `worse` seed exceeds every `better` seed so (the mirror); equal
#   grid rates are neither. Reproduced when above at every width; contradicted when below at some
#   width; else inconclusive.
#   With 3 seeds an arm, complete separation is the only 3-against-3 arrangement an exact
#   permutation test puts at p = 1/20: each width's decision has a false-positive rate of at most 5%.
# - gap_slope_within: the slope of the mean edge gap (better - worse) per width against log10
#   parameters; reproduced when its interval lies inside +-hold_band, contradicted when wholly
#   outside it (widens or narrows), else inconclusive; reproduced only with peri_above_pre_at_every_width
#   reproduced (a lead to hold). Every trend whose seeds hold a bound (stable at the sweep's top or at
#   none) is at most inconclusive: the bound may sit anywhere beyond. QK-norm's slope minus Pre-LN's over widths 32
#   and 64 is the same statistic, described with its interval, not judged (two widths cannot
#   resolve it: the grid's steps alone give an interval of about +-1.4).
# - edge_slope_below: the slope of `arm`'s edge; reproduced when the interval's top is below
#   -slope_margin, contradicted when its low end is above it, else inconclusive.
# - tuned_distance_slope_below: each seed's edge minus its tuned rate (the rate of its lowest final
#   validation loss, a diverged run at ln V), over widths 32-128; the tuned rate's own offset drawn
#   apart from the edge's; as edge_slope_below. Not testable where a seed's tuned rate is its
#   width's lowest rate (not bracketed), or above its edge (a run that blew up there).
# - The embedding norm's share of Peri-LN's lead at each width 32-128, (edge(Pre-LN + embedding
#   norm) - edge(Pre-LN)) / (edge(Peri-LN) - edge(Pre-LN)) over the seeds' means, with the same
#   draws' interval: described, not judged.
# - The blind prediction: each arm's line over widths 32-128, at width 256's log10 parameters, with
#   the draws' interval, scored at the grid rate nearest it: right when the median of width 256's
#   seeds' edges is a rate of the rung within `lr_tolerance` of it; wrong when it is not, or when a
#   bound puts every edge it allows beyond; not measured when a bound leaves both possible. The
#   baseline "the same as width 128" (128's median edge) is scored the same way on the same
#   measurement. Two arms, no test: the page gives both scores. The same lines at 512 and 768 are
#   the gpu tier's prediction.


def get_config(arg: str = "cpu") -> ml_collections.ConfigDict:
  if arg not in ("cpu", "gpu"):
    raise ValueError(f"ladder variant {arg!r}: expected cpu | gpu")
  c = experiment("stability", "cpu")  # protocol 4's trial: 1,000 steps of 16 x 64, every step logged
  c.model.update(vocab_size=257)  # bytes and EOS
  c.data.update(source="shakespeare", tokenizer="byte", val_fraction=0.1)
  return c


def _shape(width: int, head: int) -> dict:
  return {"model.n_layer": DEPTH, "model.d_model": width, "model.n_head": width // head}


def get_sweep(arg: str = "cpu") -> list[dict]:
  get_config(arg)  # validates arg
  if arg == "gpu":
    rungs = {width: ({arm: FULL for arm in ARMS}, GPU_HEAD) for width in GPU_WIDTHS}
  else:
    rungs = {width: (rates, CPU_HEAD) for width, rates in RATES.items()}
    rungs[BLIND_WIDTH] = ({arm: rates_256(p[0]) for arm, p in PREDICTED_256.items()}, CPU_HEAD)
  return [{**_shape(width, head), **ARMS[arm], "optim.lr": _rate(e), "seed": s}
          for width, (rates, head) in rungs.items() for arm in ARMS if arm in rates
          for e in rates[arm] for s in SEEDS]


def protocol(arg: str = "cpu") -> Protocol:
  get_config(arg)
  return PROTOCOL


GRID = Grid(config=get_config, sweep=get_sweep, seed_setting=SEED_SETTING, arms=ARMS,
            judged_by=lambda arg: (protocol(arg),))
