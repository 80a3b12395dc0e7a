"""Hidden-state growth over depth (study A's bound): does the top layer's mean |h| of a trained
Pre-LN model grow exponentially in the depth D, and Peri-LN's at most linearly (its variance at
most quadratically)? Judged by the pre-registered protocols below (`PROTOCOL_V3`, version 3;
`PROTOCOL`, version 2, and `PROTOCOL_V1` kept beside it).

`experiments/growth.py:VARIANT`, VARIANT one of
  cpu     protocol 2: depths 3, 6, 12, 24, 48, 96 at width 32, each trained for the same 1,000
          steps of 16 x 64 tokens (1M tokens, lr 3e-3, weight decay 0.1), 3 seeds; Pre-LN and
          Peri-LN (with the embedding norm) at dt 1 and 0.1; probed at init, every quarter
          and the end (72 trials)
  gpu     protocol 2's arms, depths and seeds for one H100/H200-class card: width 256, 2,000
          steps of 16 x 256 tokens in bfloat16 (run it with --batch 4); not yet run
  paper   the same arms and depths at GPT-2 124M's width (768) on OpenWebText
  v3_cpu  protocol 3: protocol 2's cpu trials (arms, config, probes) at depths 3, 6, 12, 24, 48
          with 3 new seeds, 3, 4 and 5 (60 trials); v3_gpu its gpu tier
  v1_cpu  protocol 1: depths 6, 12, 24, 48 at width 32, 300 steps, with and without weight
          decay, one seed (32 trials); v1_gpu its gpu tier
  v0_cpu  protocol 0: depths 12, 24, 48 after 50 steps, plain Peri-LN, fitted over the layers
          of each model (kept beside version 1)
  v0_paper

  nplace sweep --config experiments/growth.py:v3_cpu --workdir runs/growth_v3 --batch 4
  nplace report --results results/ runs/growth_v3   # fits over D, judged by PROTOCOL_V3
  nplace report runs/growth --out report            # the per-layer fits within each model
"""
from nplace.config import base_config, variant
from nplace.protocol import (FINDING, GROWTH_PER_SEED, GROWTH_POOLED, THREE_WAY, WELCH_T, Claim, Protocol,
                             Threshold)

SEED_SETTING = "GPT-2 (124M to 1.5B) on OpenWebText"  # where the seed's claims were made

DEPTHS = (6, 12, 24, 48)
DEPTHS_V2 = (3, 6, 12, 24, 48, 96)  # a 32x range: an exponential's log-log slope rises ~8x across it
SEEDS_V2 = range(3)
DEPTHS_V3 = (3, 6, 12, 24, 48)  # protocol 2's without 96: its 12 trials took 75 of the grid's 143 minutes
SEEDS_V3 = range(3, 6)  # seeds protocol 2 did not run
WEIGHT_DECAYS = (0.1, 0.0)
ARMS = {
    "Pre-LN": {"model.placement": "pre", "model.dt": 1.0, "model.embed_norm": False},
    "Pre-LN, dt 0.1": {"model.placement": "pre", "model.dt": 0.1, "model.embed_norm": False},
    "Peri-LN": {"model.placement": "peri", "model.dt": 1.0, "model.embed_norm": True},
    "Peri-LN, dt 0.1": {"model.placement": "peri", "model.dt": 0.1, "model.embed_norm": True},
}
V0_DEPTHS = (12, 24, 48)
V0_MODELS = (("pre", 1.0), ("pre", 0.1), ("peri", 1.0), ("peri", 0.1))

# Protocol 2's rules:
# - The measured quantity is the growth above init: the top layer's mean |h| (or entry-wise
#   variance) at the probe minus at init, per trial. A seed whose growth is not positive at some
#   depth leaves that claim not testable for its arm.
# - `slope_rises`: per seed, the least-squares slope of log growth against log D over the deepest
#   three depths minus that over the shallowest three; reproduced when the interval's low end
#   clears `min_slope_rise`, not reproduced otherwise. Both fits are in the same (log-log) space.
#   The design's power: the page prints the smallest rate r of growth e^{rD} that passes with
#   probability 0.8 under `assumed_log_noise` (depth_growth.detectable_rate), computed from this
#   declaration alone.
# - `power_at_most` (`variance_power_at_most`): per seed, the exponent p of growth ~ a D^p
#   over all depths (least squares in log-log); reproduced when the interval's high end is at most
#   the claim's `at_most`, 1 (2), not reproduced when its low end is above it, not testable in between.
# - Protocol 1's `dt_tightens_*` claims are dropped: every branch is multiplied by dt, so they held
#   by construction. The page reports instead Peri-LN's growth against its bound: each of the 2D
#   sublayers adds an output of rms 1 times dt at init, so rms(h_L) <= rms(h_0) + 2 dt D there.
# - Reported, not judged: the top layer's largest |h| (`max_abs`) at init and at the end, and its
#   margin to the float16 (65,504) and bfloat16 (3.4e38) range.
# - A claim needs every depth of DEPTHS_V2 with every seed, else not testable.
# - Horizons: the claims are judged again on the probes at 1/4 and 1/2 of the run.
PROTOCOL = Protocol(
    name="growth", version=2, kind=GROWTH_PER_SEED,
    summary="Growth above init of the top layer's moments of trained models (the value at the end "
            "minus at init) against their depth D (3 to 96, the same 1M tokens each), 3 seeds per "
            "depth; every fit per seed, Welch t-intervals over the seeds; judged again on the "
            "probes at 1/4 and 1/2 of the run. Fixed before any run of this version.",
    seeds=3, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95, interval_method=WELCH_T,
    horizons=(0.25, 0.5, 1.0),
    thresholds=(
        Threshold("min_slope_rise", 0.2, "how much the log-log slope of the growth over the deepest "
                                         "three depths must exceed that over the shallowest three "
                                         "(interval's low end) to call the growth exponential: a power "
                                         "law's slope does not rise, e^{rD}'s rises by ~45 r here"),
        Threshold("assumed_log_noise", 0.1, "the per-seed noise in log growth the power statement "
                                            "assumes (not a verdict threshold)"),
    ),
    claims=(
        Claim("pre_exponential", "Pre-LN's top-layer mean |h| grows exponentially in D",
              metric="slope_rises", arm="Pre-LN"),
        Claim("peri_at_most_linear", "Peri-LN's top-layer mean |h| grows at most linearly in D",
              metric="power_at_most", arm="Peri-LN", at_most=1.0),
        Claim("peri_variance_at_most_quadratic", "Peri-LN's top-layer variance grows at most "
              "quadratically in D", metric="variance_power_at_most", arm="Peri-LN", at_most=2.0),
    ),
)
# Protocol 3's rules (issue 57), fixed before any of its runs; what protocol 2's data showed it
# to get wrong: its slope rise calls a straight line with a positive intercept exponential
# (0.3 + 0.03 D rises by 0.44 > 0.2), and Pre-LN's growth above init was affine at every horizon;
# Peri-LN's growth above init is negative at depth 3, so its exponent had no fit.
# - Trials: protocol 2's cpu config and arms at DEPTHS_V3 with SEEDS_V3, new seeds. Verdicts are
#   three-way (nplace/studies/three_way.py), each claim's false-positive rate and power simulated
#   through the code that judges it (nplace/studies/growth_curves.py).
# - `exponential_rate`: per seed, the growth above init y(D) fitted by least squares to
#   a + b (e^{rD} - 1) / r (a + b D at r = 0), r profiled over -0.1 .. 0.3 per layer in steps of
#   0.0005 (growth_curves.RATE_GRID), over rising fits only (b > 0). Reproduced when the Welch
#   interval of r̂ over the seeds lies above `min_rate` and the seeds' mean r̂ over all but the
#   deepest depth does too (the depths double, so one deep point can carry a bend); contradicted
#   when the interval lies below `min_rate`, inconclusive otherwise; an r̂ at the grid's edge is
#   censored (that edge cannot count against the claim it bounds). An affine curve is fitted
#   best at r = 0 whatever its intercept. Its nulls: the seeds' mean affine fit, and curves
#   at `min_rate`; its power: curves at `power_at`, each with the seeds' own relative noise.
# - `level_power_at_most` (`level_variance_power_at_most`): per seed the exponent p of the top
#   layer's level at the horizon (mean |h|; entry-wise variance), not its growth above init, as
#   a D^p by least squares in log-log; reproduced when the interval's top is at most `at_most`,
#   1 (2), contradicted when its low end is above it, inconclusive otherwise. Peri-LN's output
#   norms bound its level by construction, rms(h_L) <= rms(h_0) + 2 dt D = 1 + 2 dt D: that the
#   level is at most linear is not in question, its exponent is the finding. Null: curves exactly
#   at the bound; power: at `power_at`, with the seeds' noise in log level.
# - Horizons: 0.25 and 0.5 are the probes at a quarter and half of one cosine schedule of 1,000
#   steps (the learning rate still high), snapshots of the same runs, not shorter training budgets.
# - A claim needs every depth of DEPTHS_V3 with every seed, else not testable. The bound and the
#   largest |h| are reported as under protocol 2.
PROTOCOL_V3 = Protocol(
    name="growth", version=3, kind=GROWTH_PER_SEED,
    summary="The top layer of trained models against their depth D (3 to 48, the same 1M tokens "
            "each), 3 new seeds per depth: Pre-LN's growth above init fitted per seed by "
            "a + b(e^{rD} − 1)/r, so that only a bending curve has a rate r̂ above 0; Peri-LN's "
            "level fitted by a D^p. Welch t-intervals over the seeds, three-way verdicts; judged "
            "again on the probes at 1/4 and 1/2 of the run, snapshots of one cosine schedule, "
            "not shorter budgets. Fixed before any run of this version.",
    seeds=3, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95, interval_method=WELCH_T,
    verdicts=THREE_WAY, horizons=(0.25, 0.5, 1.0), depths=DEPTHS_V3,
    thresholds=(
        Threshold("min_rate", 0.02, "the smallest rate r, per layer, called exponential (the interval's "
                                    "low end must clear it): at r = 0.02 the growth's per-layer increment at "
                                    "D = 48 is e^{0.96} = 2.6 times that at D = 0, and the curve leaves the "
                                    "chord through its ends over 3..48 by 11% of its range; a smaller rate "
                                    "bends it less than a straight line's noise of a few percent could"),
    ),
    claims=(
        Claim("pre_exponential", "Pre-LN's top-layer mean |h| grows exponentially in D",
              metric="exponential_rate", arm="Pre-LN", power_at=0.04),
        Claim("pre_dt_exponential", "Pre-LN with dt 0.1: its top-layer mean |h| grows exponentially in D",
              metric="exponential_rate", arm="Pre-LN, dt 0.1", power_at=0.04, source=FINDING),
        Claim("peri_at_most_linear", "Peri-LN's top-layer mean |h| grows at most linearly in D",
              metric="level_power_at_most", arm="Peri-LN", at_most=1.0, power_at=0.5),
        Claim("peri_variance_at_most_quadratic", "Peri-LN's top-layer variance grows at most "
              "quadratically in D", metric="level_variance_power_at_most", arm="Peri-LN", at_most=2.0,
              power_at=1.0),
    ),
)
PROTOCOL_V1 = Protocol(
    name="growth", version=1, kind=GROWTH_POOLED,
    summary="Top-layer hidden-state moments of trained models against their depth D (6, 12, 24, 48; "
            "the same tokens each), one seed per point; intervals are the fits' 95% t-intervals over "
            "the four depths. Fixed before any run of this version.",
    seeds=1, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95,
    thresholds=(
        Threshold("min_r2_gap", 0.05, "R² by which one fit over D must beat the other to decide"),
    ),
    claims=(
        Claim("pre_exponential", "Pre-LN's top-layer mean |h| grows exponentially in D",
              metric="exponential_over_linear", arm="Pre-LN"),
        Claim("peri_at_most_linear", "Peri-LN's top-layer mean |h| grows at most linearly in D",
              metric="power_at_most", arm="Peri-LN", at_most=1.0),
        Claim("dt_tightens_pre", "dt 0.1 lowers Pre-LN's top-layer mean |h| at every depth",
              metric="lower_at_every_depth", better="Pre-LN, dt 0.1", worse="Pre-LN"),
        Claim("dt_tightens_peri", "dt 0.1 lowers Peri-LN's top-layer mean |h| at every depth",
              metric="lower_at_every_depth", better="Peri-LN, dt 0.1", worse="Peri-LN"),
    ),
)


def protocol(arg: str = "cpu") -> Protocol:
  get_config(arg)
  if arg.startswith("v3"):
    return PROTOCOL_V3
  return PROTOCOL_V1 if arg.startswith(("v0", "v1")) else PROTOCOL


def _cpu():
  """Width 32: the four depths (360 layers in all, x 8 arms) fit ~20 minutes of 2 cores."""
  c = base_config()
  c.model.update(vocab_size=512, max_len=64, n_head=4, d_model=32, remat="none")
  c.data.seq_len = 64
  c.train.update(steps=300, batch_size=16, log_every=10, eval_every=300, eval_batches=4, peak_flops=2e11)
  c.optim.update(lr=3e-3, warmup_steps=15)
  c.probe.update(every=300, power_iters=0, hutchinson_probes=2)
  c.checkpoint.every = 300
  return c


def _gpu():
  c = _cpu()
  c.model.update(vocab_size=2048, max_len=256, d_model=256, dtype="bfloat16")
  c.data.update(seq_len=256, synthetic_tokens=2 ** 24)
  c.train.update(steps=2000, eval_every=2000, eval_batches=8, peak_flops=9.9e14)
  c.optim.update(lr=1e-3, warmup_steps=100)
  c.probe.every = 2000
  c.checkpoint.every = 1000
  return c


def _v0_cpu():
  c = _cpu()
  c.model.d_model = 64
  c.train.update(steps=50, eval_every=50)
  c.optim.warmup_steps = 10
  c.probe.every = 50
  c.checkpoint.every = 50
  return c


def _paper():
  c = base_config()
  c.data.update(source="openwebtext", tokenizer="gpt2")
  c.model.update(dtype="bfloat16", remat="full")
  c.train.update(steps=20_000, batch_size=256, eval_every=1000, eval_batches=20)
  c.optim.update(lr=6e-4, warmup_steps=2000)
  c.probe.update(every=20_000, power_iters=0)
  c.checkpoint.every = 1000
  return c


def _v2(c):
  """Protocol 2's horizon of a tier: 1M tokens on the cpu tier (protocol 1's 300 steps were
  0.3M), evaluated, probed and saved at each quarter."""
  if c.train.steps == 300:
    c.train.steps = 1000
    c.optim.warmup_steps = 50
  quarter = c.train.steps // 4
  c.train.eval_every = c.probe.every = quarter
  c.checkpoint.every = min(c.checkpoint.every, quarter)
  return c


def get_config(arg: str = "cpu"):
  return variant("growth", arg, {"cpu": lambda: _v2(_cpu()), "gpu": lambda: _v2(_gpu()), "paper": lambda: _v2(_paper()),
                                 "v3_cpu": lambda: _v2(_cpu()), "v3_gpu": lambda: _v2(_gpu()),
                                 "v1_cpu": _cpu, "v1_gpu": _gpu, "v0_cpu": _v0_cpu, "v0_paper": _paper})


def get_sweep(arg: str = "cpu") -> list[dict]:
  get_config(arg)
  if arg.startswith("v0"):
    return [{"model.placement": placement, "model.dt": dt, "model.n_layer": depth}
            for placement, dt in V0_MODELS for depth in V0_DEPTHS]
  if arg.startswith("v1"):
    return [{"model.n_layer": depth, **arm, "optim.weight_decay": wd}
            for depth in DEPTHS for arm in ARMS.values() for wd in WEIGHT_DECAYS]
  depths, seeds = (DEPTHS_V3, SEEDS_V3) if arg.startswith("v3") else (DEPTHS_V2, SEEDS_V2)
  return [{"model.n_layer": depth, **arm, "seed": seed} for depth in depths for arm in ARMS.values()
          for seed in seeds]
