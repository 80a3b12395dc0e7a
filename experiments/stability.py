"""Study A (Kan et al. 2025): is Peri-LN less sensitive to the learning rate than Pre-LN, does it
fail less often or at higher rates, and does dt=0.1 help? Judged by the pre-registered protocol
version 4 (`PROTOCOL_V4_*`): the seed's failure counts at fixed rates, the maximum stable rate
with the embedding norm's control, and the learning-rate sweeps, whose filed cpu trials (run under
versions 2 and 3, archived in results/archive/) it re-judges; and by `PROTOCOL_PLACEMENTS`.

`experiments/stability.py:VARIANT`, VARIANT one of
  cpu          Pre-LN and Peri-LN (both with weight decay 0.1 and 0) and Peri-LN dt=0.1 x depth
               {6, 12} at width 32 x 7 learning rates (1e-3 .. 1, half-decade steps) x 5 seeds,
               1,000 steps of 16 x 64 tokens (1M tokens a trial), every step's loss logged,
               evaluated at 1/4, 1/2 and the end (350 trials); run under protocol 2, re-judged
               by protocol 4 (`PROTOCOL_V4_REJUDGED`)
  cpu_wide     cpu's grid with the sweep widened to lr 10 (9 rates, 450 trials), run under protocol
               3 and re-judged likewise. Its rates up to 1 are cpu's filed trials, reused
               (`reuses`): `nplace sweep` skips them and runs the 100 new ones (56 min at --batch 15)
  gpu          cpu's arms for one H100/H200-class card: depth {12, 24} at width 256, 2,000 steps of
               16 x 256 tokens in bfloat16 (run it with --batch 15); judged by protocol 4
               (`PROTOCOL_V4_SWEEP`); not yet run
  paper[,SIZE] cpu's arms on GPT-2 SIZE (124m | 350m | 774m | 1.5b) and OpenWebText, likewise
  v4_pilot     protocol 4's pilot: Pre-LN (weight decay 0.1) at depth 12 x width 32, lr 10^-0.9,
               -0.8, -0.7, -0.6 x seeds 100-102 (12 trials): `edge_rate` picks the edge from it
  v4_fixed     protocol 4 (a): 5 arms (Pre-LN and Peri-LN with weight decay 0.1 and 0, Pre-LN
               with the embedding norm) at Pre-LN's tuned rate 10^-1.5 and at the edge rate x
               seeds 10-39, depth 12 x 32, 1,000 steps as cpu (300 trials)
  v4_embed     protocol 4 (b): Pre-LN with the embedding norm on cpu's depth-12 sweep (7 rates x
               seeds 0-4, 35 new trials), beside cpu's depth-12 trials, reused
  placements   every published placement (9 new configurations) at depth 12 x 32 over cpu_wide's 9
               rates x seeds 0-2, beside Pre-LN, Peri-LN and Pre-LN + embedding norm reused from
               cpu, cpu_wide and v4_embed (249 new trials); described by `PROTOCOL_PLACEMENTS`

`nplace sweep --config experiments/stability.py:cpu --workdir runs/stability --batch 15` runs
the grid (in parts: `--only 'n_layer=6,'`); `nplace report --results results/ runs/stability`
files it into results/ and regenerates results/README.md, which judges it by its protocol.
"""
import dataclasses

import ml_collections

from nplace.config import base_config
from nplace.protocol import (FINDING, FIXED_RATES, PERMUTATION, SEED_CLAIM, STABILITY_SWEEP, THREE_WAY, WELCH_T,
                             Claim, FixedRate, Grid, Protocol, Threshold)
SEED_SETTING = "GPT-2 (124M to 1.5B) on OpenWebText"  # where the seed's claims were made


def _model(placement, dt=1.0, embed_norm=False) -> dict:
  # every key always set, so trial names line up
  return {"model.placement": placement, "model.dt": dt, "model.embed_norm": embed_norm}


# The arms. Weight decay is part of the arm (the seed reports divergences with 0.1 and 0).
# Peri-LN carries the Peri-LN paper's norm on the embedding output: at GPT-2's init the 0.02-std
# token embedding is otherwise drowned by 2L unit-rms branch outputs, so plain `peri` learns
# nothing in short runs (protocol 0's results) -- a property of that init.
ARMS = {
    "Pre-LN": {**_model("pre"), "optim.weight_decay": 0.1},
    "Pre-LN, no weight decay": {**_model("pre"), "optim.weight_decay": 0.0},
    "Peri-LN": {**_model("peri", embed_norm=True), "optim.weight_decay": 0.1},
    "Peri-LN, no weight decay": {**_model("peri", embed_norm=True), "optim.weight_decay": 0.0},
    "Peri-LN, dt 0.1": {**_model("peri", dt=0.1, embed_norm=True), "optim.weight_decay": 0.1},
}
# 3 decades in half-decade steps up to 1: Wortsman et al.'s sweep tops out at 3e-1; above 1e-1
# protocol 1's shapes started to fail, and the top must fail for every arm (else flagged).
LRS = tuple(10 ** (e / 2) for e in range(-6, 1))
PAPER_LRS = tuple(10 ** (e / 2) for e in range(-8, -1))  # 1e-4 .. 1e-1
# cpu_wide: at cpu's top rate (1) Peri-LN still learned in every seed and shape, so its failure
# region and maximum stable rate were not reached; a decade more, nothing else changed.
WIDE_LRS = tuple(10 ** (e / 2) for e in range(-6, 3))
TIERS = {  # tier -> (depths, widths, seeds)
    "cpu": ((6, 12), (32,), range(5)),
    "gpu": ((12, 24), (256,), range(5)),
    "paper": ((None,), (None,), range(5)),  # the GPT-2 size's own depth and width
}
SWEEP_LRS = {"cpu": LRS, "cpu_wide": WIDE_LRS, "gpu": LRS, "paper": PAPER_LRS}  # a swept variant's rates

# Protocol 4, declared before any of its runs. Three-way verdicts, each claim's test simulated
# with no effect and at its `power_at` on the page. Its definitions:
# - Outcomes (nplace/studies/outcomes.py, with blow-ups from every step's loss): failed is
#   diverged or did not learn. Stable at a rate: learned and never blew up, a rise of
#   `blow_up_rise` nats above the train loss's running minimum after warmup (the project's spike
#   size): a run that blew up and recovered once the schedule had cut the rate is not stable at
#   the rate it was given.
# - LR sensitivity per seed over the sweep (Wortsman et al. 2023), with a diverged seed counted as
#   the cap (ln V) in the mean curve and so in "best lr": a rate where some seeds diverged cannot
#   be best. The top rate must fail for every arm in every shape, else the page flags the sweep as
#   not reaching the failure region; an optimum at the sweep's edge, or whose neighbours sit less
#   than `bracket_margin` above it, is flagged as not bracketed. Every verdict is judged again at
#   1/4 and 1/2 of the run (`horizons`; the train loss up to that step for the outcome rules).
#   A claim needs every seed of `seeds` at every rate in every shape, else not testable.
# - (a) The seed's failure counts at one recipe, 30 seeds an arm: at Pre-LN's tuned rate
#   (10^-1.5, the middle of the rates where protocol 2's depth-12 Pre-LN learned best) each arm's
#   failure rate and its exact (Clopper-Pearson) interval against the seed's rate: contradicted
#   when the interval's top is below it; for a seed rate of 0, reproduced when the top is below
#   `never_rate` (contradicted when its low end reaches it). For a seed rate above 0 the claim is
#   the seed's instability: contradicted when the interval excludes the seed's rate, reproduced
#   when it holds it and excludes 0 (as often as the seed's own 1 of 5, whose exact interval is
#   [0.005, 0.72], allows). At the edge rate (`edge_rate` of the pilot, seeds the test does not
#   use) the arms' failure counts by one-sided Fisher's exact tests, each way, Holm-adjusted over
#   the three comparisons: it restates at one rate the claim that Pre-LN fails at lower rates
#   than Peri-LN, and estimates how often each arm fails at Pre-LN's edge.
# - (b) The maximum stable rate of Pre-LN with the embedding norm on cpu's depth-12 sweep, against
#   the filed Pre-LN and Peri-LN: exact permutation tests of a shift against `min_lr_gap`, each
#   way at 0.025 (the values move in half-decade steps: no t-interval); a seed stable at the
#   sweep's top rate may be stable higher, so it cannot count against a claim.
# - (c) The sweeps (cpu's and cpu_wide's filed trials re-judged, seen data, labelled so; gpu's and
#   paper's fresh): LR sensitivity and best loss by Welch's t-interval, three-way; the maximum
#   stable rate as (b); divergences by the exact test within each (depth, rate) stratum, so rates
#   where every run of both arms failed decide nothing.
# - Secondary, described and not judged: blew up at any step, ended diverged, the final loss.
TUNED_LR = 10 ** -1.5
PILOT_LRS = tuple(10 ** e for e in (-0.9, -0.8, -0.7, -0.6))
PILOT_SEEDS, FIXED_SEEDS = range(100, 103), range(10, 40)
# edge_rate of the filed pilot (results/stability_v4_pilot, tests/test_claim_power.py checks it): no
# rate had 1 or 2 of 3 Pre-LN seeds failing; 0 of 3 failed up to 10^-0.7, 3 of 3 at 10^-0.6.
EDGE_LR = 10 ** -0.6
PRE_EMBED = "Pre-LN + embedding norm"
ARMS_V4 = {**{k: v for k, v in ARMS.items() if k != "Peri-LN, dt 0.1"},
           PRE_EMBED: {**_model("pre", embed_norm=True), "optim.weight_decay": 0.1}}


def edge_rate(failed: dict) -> float:
  """The pilot rate (lr -> (failed runs, runs)) whose Pre-LN failure fraction is nearest one half
  (compared in whole runs: |2 failed - runs|); of tied rates, the lowest at which some seed
  failed (else the lowest)."""
  distance = {lr: abs(2 * f - n) / n for lr, (f, n) in failed.items()}
  tied = sorted(lr for lr, d in distance.items() if d == min(distance.values()))
  return next((lr for lr in tied if failed[lr][0] > 0), tied[0])


V4_THRESHOLDS = (
    Threshold("min_effect", 0.05, "nats: the smallest difference in LR sensitivity (or best loss) "
                                  "that counts; an interval must clear it"),
    Threshold("did_not_learn", 0.1, "fraction of the learnable nats gained below which a run did "
                                    "not learn"),
    Threshold("spike_rebound", 1.0, "nats above the running minimum of the train loss that make a "
                                    "loss spike (reported, never a failure)"),
    Threshold("min_lr_gap", 0.25, "decades: the difference in maximum stable learning rate (log10, "
                                  "per seed) an interval must clear: more than half a sweep step"),
    Threshold("bracket_margin", 0.05, "nats: an optimum is bracketed when the mean loss at both "
                                      "neighbouring rates is at least this much above it"),
    Threshold("failure_p", 0.025, "one-sided p-value of each exact test on failure counts, each way (a two-sided "
                                  "95% decision, as the intervals)"),
    Threshold("blow_up_rise", 1.0, "nats above the train loss's running minimum after warmup that make a "
                                   "blow-up: a run that blew up was not stable at its rate"),
    Threshold("never_rate", 0.2, "a failure rate whose exact interval lies below this (the seed's Pre-LN "
                                 "rate with weight decay, 1 run in 5) counts as the seed's 0 of 5"),
)
V4 = dict(name="stability", version=4, seeds=5, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95,
          interval_method=WELCH_T, verdicts=THREE_WAY, blow_ups=True, diverged_at_cap=True,
          stable_needs_no_blow_up=True, thresholds=V4_THRESHOLDS)
HIGHER_MAX_LR = dict(metric="max_stable_lr", method=PERMUTATION, power_at=0.5)  # one sweep step
PERI_HIGHER_MAX_LR = "Peri-LN still learns at higher learning rates than Pre-LN"


def _fixed_rate_claims(edge: float) -> tuple:
  rates = (("Pre-LN", "pre_fails_at_tuned", "Pre-LN fails in about 1 run of 5 at its tuned rate", 0.2),
           ("Pre-LN, no weight decay", "pre_fails_at_tuned_no_wd", "... and in about 3 of 5 without weight decay",
            0.6),
           ("Peri-LN", "peri_never_fails_at_tuned", "Peri-LN fails in none at that rate", 0.0),
           ("Peri-LN, no weight decay", "peri_never_fails_at_tuned_no_wd", "... nor without weight decay", 0.0))
  edges = (("Peri-LN", "Pre-LN", "pre_fails_more_at_edge", "At Pre-LN's edge rate Pre-LN fails more often than "
            "Peri-LN", SEED_CLAIM),
           ("Peri-LN, no weight decay", "Pre-LN, no weight decay", "pre_fails_more_at_edge_no_wd",
            "... and so without weight decay", SEED_CLAIM),
           (PRE_EMBED, "Pre-LN", "embed_norm_alone_at_edge", "The embedding norm alone makes Pre-LN fail less "
            "often at its edge rate", FINDING))
  return (*(Claim(i, text, "failure_rate", arm=arm, lr=TUNED_LR, seed_rate=rate, power_at=rate)
            for arm, i, text, rate in rates),
          *(Claim(i, text, "fails_more", better=better, worse=worse, lr=edge, source=source,
                  power_at=(0.5, 0.0 if source == SEED_CLAIM else 0.1))  # the seed's 0 of 5; else a tenth
            for better, worse, i, text, source in edges))


PROTOCOL_V4_PILOT = Protocol(
    **V4, kind=FIXED_RATES, arms={"Pre-LN": ARMS_V4["Pre-LN"]},
    summary="Protocol 4's pilot: Pre-LN (weight decay 0.1) at depth 12 x 32 over four rates around its failure "
            "edge, 3 seeds the test does not use; edge_rate (experiments/stability.py) picks the rate its "
            "fixed-rate comparison runs at. It judges no claim.",
    claims=())
PROTOCOL_V4_FIXED = Protocol(
    **{**V4, "seeds": len(FIXED_SEEDS)}, kind=FIXED_RATES, arms=ARMS_V4,
    summary="The seed's divergence claim as the seed states it: failed runs (diverged or did not learn) at two "
            "fixed learning rates, Pre-LN's tuned rate 10^-1.5 and its edge rate from the pilot, 30 new seeds "
            "an arm, depth 12 x 32, 1,000 steps; Pre-LN and Peri-LN (with the embedding norm) with weight decay "
            "0.1 and 0, and Pre-LN with the embedding norm, the control for Peri-LN's embedding norm. Fixed "
            "before any run of this version.",
    rates=(FixedRate(TUNED_LR, "Pre-LN's tuned rate", "the middle of the rates where protocol 2's depth-12 "
                                                      "Pre-LN learned best"),
           FixedRate(EDGE_LR, "Pre-LN's edge rate", "the pilot's rate whose Pre-LN failure fraction is nearest "
                                                    "one half, of tied rates the lowest at which some seed failed "
                                                    "(`edge_rate`), on seeds the test does not use")),
    claims=_fixed_rate_claims(EDGE_LR))
PROTOCOL_V4_EMBED = Protocol(
    **V4, kind=STABILITY_SWEEP, arms={k: ARMS_V4[k] for k in ("Pre-LN", "Peri-LN", PRE_EMBED)},
    summary="The maximum stable rate (learned and never blew up) of Pre-LN with the embedding norm over protocol "
            "2's depth-12 sweep, beside protocol 2's filed Pre-LN and Peri-LN: whether Peri-LN's higher rate "
            "comes from its output norms or from the embedding norm. Fixed before any run of this version; its "
            "Pre-LN and Peri-LN are protocol 2's trials, seen before it was written, so `peri_higher_max_lr` "
            "re-judges seen data at depth 12 (the re-judgement of stability_cpu judges it at both depths).",
    claims=(Claim("peri_higher_max_lr", f"{PERI_HIGHER_MAX_LR}, at depth 12 (a re-judgement of protocol 2's "
                  "filed trials, seen before this version)", better="Peri-LN", worse="Pre-LN", **HIGHER_MAX_LR),
            Claim("embed_norm_raises_max_lr", "The embedding norm alone raises Pre-LN's maximum stable rate",
                  better=PRE_EMBED, worse="Pre-LN", source=FINDING, **HIGHER_MAX_LR),
            Claim("output_norms_raise_max_lr", "Peri-LN's output norms raise it beyond the embedding norm's",
                  better="Peri-LN", worse=PRE_EMBED, source=FINDING, **HIGHER_MAX_LR)))
PROTOCOL_V4_SWEEP = Protocol(
    **V4, kind=STABILITY_SWEEP, horizons=(0.25, 0.5, 1.0), arms=ARMS,
    summary="Protocol 4's rules on a learning-rate sweep of the five arms (Pre-LN and Peri-LN with the "
            "embedding norm, each with weight decay 0.1 and 0, and Peri-LN at dt 0.1) per model shape, 5 seeds, "
            "every verdict judged again at 1/4 and 1/2 of the run: three-way verdicts; the maximum stable rate "
            "(learned and never blew up) by exact permutation tests; divergences by the exact test within each "
            "depth and rate. Fixed before any run of the gpu and paper tiers.",
    claims=(Claim("peri_flatter", "Peri-LN is less sensitive to the learning rate than Pre-LN",
                  metric="lr_sensitivity", better="Peri-LN", worse="Pre-LN", power_at=0.2),
            Claim("peri_flatter_no_wd", "... and so without weight decay", metric="lr_sensitivity",
                  better="Peri-LN, no weight decay", worse="Pre-LN, no weight decay", power_at=0.2),
            Claim("dt_flatter", "dt 0.1 makes Peri-LN less sensitive to the learning rate still",
                  metric="lr_sensitivity", better="Peri-LN, dt 0.1", worse="Peri-LN", power_at=0.2),
            Claim("peri_matches_best", "Peri-LN matches or beats Pre-LN at each one's best learning rate",
                  metric="best_loss", better="Peri-LN", worse="Pre-LN", matches=True, power_at=0.0),
            Claim("peri_higher_max_lr", PERI_HIGHER_MAX_LR, better="Peri-LN", worse="Pre-LN", **HIGHER_MAX_LR),
            Claim("peri_higher_max_lr_no_wd", "... and so without weight decay", better="Peri-LN, no weight decay",
                  worse="Pre-LN, no weight decay", **HIGHER_MAX_LR),
            Claim("pre_diverges_more", "Pre-LN diverges more often than Peri-LN at the same depth and rate",
                  metric="divergences", better="Peri-LN", worse="Pre-LN", power_at=(0.5, 0.1)),
            Claim("pre_diverges_more_no_wd", "... and so without weight decay", metric="divergences",
                  better="Peri-LN, no weight decay", worse="Pre-LN, no weight decay", power_at=(0.5, 0.1))))
# cpu's and cpu_wide's trials, run under protocols 2 and 3 (archived), judged by the same rules.
PROTOCOL_V4_REJUDGED = dataclasses.replace(
    PROTOCOL_V4_SWEEP,
    summary="Protocol 4's rules on protocols 2 and 3's filed trials, which were seen before these rules were "
            "written: three-way verdicts; the maximum stable rate by its new definition (learned and never "
            "blew up) and exact permutation tests; divergences by the exact test within each depth and rate.")

# The placements grid: every published placement at depth 12 x width 32 over cpu_wide's nine
# rates, 3 seeds, 1,000 steps as cpu, weight decay 0.1; each as its paper defines it, at GPT-2's
# init and without the embedding norm. Pre-LN and Peri-LN (which carries its embedding norm) are
# cpu's and cpu_wide's filed trials, seeds 0-2, and Pre-LN + embedding norm (the confound's
# control) v4_embed's, its two rates above 1 run here: 249 new trials.
PLACEMENT_SEEDS = range(3)
NEW_PLACEMENTS = {
    **{label: {**_model(name), "optim.weight_decay": 0.1} for label, name in (
        ("Post-LN", "post"), ("Reorder (OLMo 2)", "reorder"), ("DeepNorm", "deepnorm"), ("Mix-LN", "mix"),
        ("LayerNorm Scaling", "lns"), ("ReZero", "rezero"), ("HybridNorm", "hybrid"))},
    "Pre-LN + QK-norm": {**_model("pre"), "model.qk_norm": True, "optim.weight_decay": 0.1},
    "Pre-LN, DyT": {**_model("pre"), "model.norm": "dyt", "optim.weight_decay": 0.1},
}
PLACEMENT_ARMS = {"Pre-LN": ARMS["Pre-LN"], "Peri-LN": ARMS["Peri-LN"], **NEW_PLACEMENTS,
                  PRE_EMBED: ARMS_V4[PRE_EMBED]}
PROTOCOL_PLACEMENTS = Protocol(
    **(V4 | dict(name="placements", version=1, seeds=3)), kind=STABILITY_SWEEP, arms=PLACEMENT_ARMS,
    summary="Every published placement's stability under one protocol: depth 12 x width 32, 1,000 steps, "
            "weight decay 0.1, protocol 3's nine rates (1e-3 .. 10), 3 seeds, each placement as its paper "
            "defines it at GPT-2's init without the embedding norm; Peri-LN with its embedding norm, and "
            "Pre-LN with it as the confound's control. Protocol 4's definitions: stable = learned and never "
            "blew up; the maximum stable rate per seed; LR sensitivity with a diverged seed at ln V. "
            "Described, not judged between placements. Fixed, with lab rule version 4 (whose blind test on "
            "it, lab protocol 3, is archived), before any of its runs.",
    claims=(),
)

VARIANTS = ("cpu", "cpu_wide", "gpu", "paper", "v4_pilot", "v4_fixed", "v4_embed", "placements")
DECLARED = {"cpu": 2, "cpu_wide": 3}  # the archived protocol versions these grids ran under


def _small(steps: int, batch_size: int, seq_len: int) -> ml_collections.ConfigDict:
  c = base_config()
  c.model.update(vocab_size=512, max_len=seq_len, n_layer=12, n_head=4, d_model=64, remat="none")
  c.data.seq_len = seq_len
  c.train.update(steps=steps, batch_size=batch_size, log_every=10, eval_every=steps, eval_batches=4,
                 spike_window=20, peak_flops=2e11)
  c.optim.update(lr=1e-2, warmup_steps=max(10, steps // 20))
  c.checkpoint.every = steps
  return c


def _gpu() -> ml_collections.ConfigDict:
  c = _small(2000, 16, 256)
  c.model.update(vocab_size=2048, dtype="bfloat16")
  c.data.synthetic_tokens = 2 ** 24
  c.train.update(eval_batches=8, peak_flops=9.9e14)
  return c


def _every_step_logged(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A tier's config with every step's loss logged (the outcome rules read it), evaluated and
  saved at each quarter (the horizons; a killed cell resumes from the last)."""
  quarter = c.train.steps // 4
  c.train.update(log_every=1, eval_every=quarter)
  c.checkpoint.every = min(c.checkpoint.every, quarter)
  return c


def _paper(size: str) -> ml_collections.ConfigDict:
  """GPT-2 SIZE on OpenWebText with nanoGPT's recipe (docs/science.md, reference numbers):
  0.5M-token batches, lr 6e-4 cosine to 6e-5, warmup 2000, AdamW (0.9, 0.95), clip 1."""
  from nplace.config import experiment  # nplace.config imports experiment files lazily too
  c = experiment("gpt2", size)
  c.data.update(source="openwebtext", tokenizer="gpt2")
  c.train.update(steps=50_000, batch_size=512, grad_accum=8, eval_every=1000, eval_batches=20)
  c.optim.update(lr=6e-4, min_lr_ratio=0.1, warmup_steps=2000)
  c.checkpoint.every = 1000
  c.model.update(dtype="bfloat16", remat="full")
  return c


def _split(arg: str) -> tuple[str, str]:
  variant, _, size = arg.partition(",")
  if variant not in VARIANTS:
    raise ValueError(f"stability variant {arg!r}: expected one of {', '.join(VARIANTS)} "
                     "(paper takes ,SIZE)")
  if size and variant != "paper":
    raise ValueError(f"stability variant {arg!r}: only paper takes a SIZE")
  return variant, size or "124m"


def _tier(variant: str) -> str:
  """The tier whose model and schedule a variant trains: every grid but gpu's and paper's is cpu's."""
  return variant if variant in ("gpu", "paper") else "cpu"


def _swept(variant: str) -> list[dict]:
  """A learning-rate sweep of the five arms over its tier's shapes."""
  depths, widths, seeds = TIERS[_tier(variant)]
  shapes = [{}] if variant == "paper" else [{"model.n_layer": d, "model.d_model": w} for d in depths for w in widths]
  return [{**shape, **arm, "optim.lr": lr, "seed": seed}
          for shape in shapes for arm in ARMS.values() for lr in SWEEP_LRS[variant] for seed in seeds]


def _v4_sweep(variant: str) -> list[dict]:
  """Protocol 4's own grids, at depth 12 x 32 and with the keys in cpu's order (so names line up)."""
  shape = {"model.n_layer": 12, "model.d_model": 32}
  if variant == "v4_pilot":
    return [{**shape, **ARMS_V4["Pre-LN"], "optim.lr": lr, "seed": s} for lr in PILOT_LRS for s in PILOT_SEEDS]
  if variant == "placements":
    return [{**shape, **arm, "optim.lr": lr, "seed": s} for arm in PLACEMENT_ARMS.values() for lr in WIDE_LRS
            for s in PLACEMENT_SEEDS]
  if variant == "v4_fixed":
    return [{**shape, **arm, "optim.lr": lr, "seed": s} for arm in ARMS_V4.values() for lr in (TUNED_LR, EDGE_LR)
            for s in FIXED_SEEDS]
  return [{**shape, **ARMS_V4[arm], "optim.lr": lr, "seed": s} for arm in PROTOCOL_V4_EMBED.arms
          for lr in LRS for s in TIERS["cpu"][2]]


def protocol(arg: str = "cpu") -> Protocol:
  """The current protocol a variant's results are judged by."""
  variant, _ = _split(arg)
  return {"cpu": PROTOCOL_V4_REJUDGED, "cpu_wide": PROTOCOL_V4_REJUDGED, "v4_pilot": PROTOCOL_V4_PILOT,
          "v4_fixed": PROTOCOL_V4_FIXED, "v4_embed": PROTOCOL_V4_EMBED,
          "placements": PROTOCOL_PLACEMENTS}.get(variant, PROTOCOL_V4_SWEEP)


def declared(arg: str = "cpu") -> int:
  """The protocol version a variant's grid was declared under: a later `protocol(arg)` re-judges
  its filed trials."""
  variant, _ = _split(arg)
  return DECLARED.get(variant, protocol(arg).version)


def reuses(arg: str = "cpu") -> tuple[str, ...]:
  """The variants whose filed trials this one's grid shares (same config and names), judged as
  its own: cpu_wide's rates up to 1 and v4_embed's Pre-LN and Peri-LN are cpu's trials; the
  placements grid's Pre-LN and Peri-LN are cpu's and cpu_wide's, its Pre-LN + embedding norm
  up to rate 1 v4_embed's."""
  return {"cpu_wide": ("cpu",), "v4_embed": ("cpu",), "placements": ("cpu", "cpu_wide", "v4_embed")}.get(
      _split(arg)[0], ())


def get_config(arg: str = "cpu"):
  variant, size = _split(arg)
  # 1,000 steps of 16 x 64 on cpu: 1M tokens a trial
  tier = {"cpu": lambda: _small(1000, 16, 64), "gpu": _gpu, "paper": lambda: _paper(size)}[_tier(variant)]
  return _every_step_logged(tier())


def get_sweep(arg: str = "cpu") -> list[dict]:
  variant, _ = _split(arg)
  return _swept(variant) if variant in SWEEP_LRS else _v4_sweep(variant)


GRID = Grid(config=get_config, sweep=get_sweep, seed_setting=SEED_SETTING, arms=ARMS,
            judged_by=lambda arg: (protocol(arg),), declared=declared, reuses=reuses)
