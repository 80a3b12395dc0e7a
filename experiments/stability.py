"""Study A (Kan et al. 2025): is Peri-LN less sensitive to the learning rate than Pre-LN, does it
fail less often or at higher rates, and does dt=0.1 help? Judged by the pre-registered
protocols below (`PROTOCOL_V4_*`, version 4: the seed's failure counts at fixed rates, the
maximum stable rate with the embedding norm's control, and versions 2 and 3's data re-judged;
`PROTOCOL_V3`, version 3, which widens version 2's cpu sweep; `PROTOCOL`, version 2;
`PROTOCOL_V1` and `PROTOCOL_V0` kept beside them).

`experiments/stability.py:VARIANT`, VARIANT one of
  cpu          protocol 2 on this machine's tier: Pre-LN and Peri-LN (both with weight decay 0.1
               and 0) and Peri-LN dt=0.1 x depth {6, 12} at width 32 x 7 learning rates (1e-3 ..
               1, half-decade steps) x 5 seeds, 1,000 steps of 16 x 64 tokens (1M tokens a
               trial), every step's loss logged, evaluated at 1/4, 1/2 and the end (350 trials)
  cpu_wide     protocol 3: cpu's grid with the sweep widened to lr 10 (9 rates, 450 trials). Its
               rates up to 1 are cpu's filed trials, reused (`reuses`): `nplace sweep` skips
               them and runs the 100 new ones (56 min at --batch 15)
  gpu          protocol 2 for one H100/H200-class card: depth {12, 24} at width 256, 2,000 steps
               of 16 x 256 tokens in bfloat16 (run it with --batch 15); not yet run
  paper[,SIZE] protocol 2's arms on GPT-2 SIZE (124m | 350m | 774m | 1.5b) and OpenWebText
  v1_cpu, v1_gpu, v1_paper[,SIZE]
               protocol 1: Pre-LN, Peri-LN, Peri-LN dt=0.1 x 5 learning rates (1e-3 .. 1e-1) x 3
               seeds (gpu, paper: 5); cpu at depth {6, 12} x width {32, 64}, 300 steps
  v4_pilot     protocol 4's pilot: Pre-LN (weight decay 0.1) at depth 12 x width 32, lr 10^-0.9,
               -0.8, -0.7, -0.6 x seeds 100-102 (12 trials): `edge_rate` picks the edge from it
  v4_fixed     protocol 4 (a): 5 arms (Pre-LN and Peri-LN with weight decay 0.1 and 0, Pre-LN
               with the embedding norm) at Pre-LN's tuned rate 10^-1.5 and at the edge rate x
               seeds 10-39, depth 12 x 32, 1,000 steps as cpu (300 trials; the edge's 150 need
               EDGE_LR, set from the filed pilot)
  v4_embed     protocol 4 (b): Pre-LN with the embedding norm on cpu's depth-12 sweep (7 rates x
               seeds 0-4, 35 new trials), beside cpu's depth-12 trials, reused
  placements   every published placement (9 new configurations) at depth 12 x 32 over protocol 3's 9
               rates x seeds 0-2, beside Pre-LN, Peri-LN and Pre-LN + embedding norm reused from
               cpu, cpu_wide and v4_embed (249 new trials); described by `PROTOCOL_PLACEMENTS`
  v0_stress    protocol 0: the stress grid the first results came from (placement x weight decay
               {0.1, 0} x 3 seeds at lr 3e-2, 150 steps), kept beside version 1
  v0_lr_scan   protocol 0's one-seed learning-rate scan
  v0_paper[,SIZE], v0_paper_lr_scan[,SIZE]   protocol 0's paper grids

Protocol 4 also re-judges cpu's and cpu_wide's trials (`rejudged_by`).

`nplace sweep --config experiments/stability.py:cpu --workdir runs/stability --batch 15` runs
the grid (in parts: `--only 'n_layer=6,'`); `nplace report --results results/ runs/stability`
files it into results/ and regenerates results/README.md, which judges it by its protocol.
"""
import dataclasses

import ml_collections

from nplace.config import base_config
from nplace.protocol import (COMPARISON, FINDING, FISHER, FIXED_RATES, LR_SWEEP, PERMUTATION, SEED_CLAIM,
                             STABILITY_SWEEP, STRATIFIED, THREE_WAY, WELCH_T, Claim, Protocol, Threshold)

SEED_SETTING = "GPT-2 (124M to 1.5B) on OpenWebText"  # where the seed's claims were made


def _model(placement, dt=1.0, embed_norm=False) -> dict:
  # every key always set, so trial names line up
  return {"model.placement": placement, "model.dt": dt, "model.embed_norm": embed_norm}


# The arms. Peri-LN carries the Peri-LN paper's norm on the embedding output: at GPT-2's init
# the 0.02-std token embedding is otherwise drowned by 2L unit-rms branch outputs, so plain
# `peri` learns nothing in short runs (protocol 0's results) -- a property of that init.
ARMS = {
    "Pre-LN": _model("pre"),
    "Peri-LN": _model("peri", embed_norm=True),
    "Peri-LN, dt 0.1": _model("peri", dt=0.1, embed_norm=True),
}
LRS = (1e-3, 10 ** -2.5, 1e-2, 10 ** -1.5, 1e-1)  # 2 decades, half-decade steps
PAPER_LRS = (1e-4, 10 ** -3.5, 1e-3, 10 ** -2.5, 1e-2)
TIERS = {  # protocol 1: tier -> (depths, widths, seeds)
    "cpu": ((6, 12), (32, 64), range(3)),
    "gpu": ((12, 24), (128, 256), range(5)),
    "paper": ((None,), (None,), range(5)),  # the GPT-2 size's own depth and width
}

# Protocol 2. Weight decay is part of the arm (the seed reports divergences with 0.1 and 0).
ARMS_V2 = {
    "Pre-LN": {**_model("pre"), "optim.weight_decay": 0.1},
    "Pre-LN, no weight decay": {**_model("pre"), "optim.weight_decay": 0.0},
    "Peri-LN": {**_model("peri", embed_norm=True), "optim.weight_decay": 0.1},
    "Peri-LN, no weight decay": {**_model("peri", embed_norm=True), "optim.weight_decay": 0.0},
    "Peri-LN, dt 0.1": {**_model("peri", dt=0.1, embed_norm=True), "optim.weight_decay": 0.1},
}
# 3 decades in half-decade steps up to 1: Wortsman et al.'s sweep tops out at 3e-1; above 1e-1
# protocol 1's shapes start to fail, and the top must fail for every arm (else flagged).
LRS_V2 = tuple(10 ** (e / 2) for e in range(-6, 1))
PAPER_LRS_V2 = tuple(10 ** (e / 2) for e in range(-8, -1))  # 1e-4 .. 1e-1
TIERS_V2 = {  # tier -> (depths, widths, seeds)
    "cpu": ((6, 12), (32,), range(5)),
    "gpu": ((12, 24), (256,), range(5)),
    "paper": ((None,), (None,), range(5)),
}

# Kept from protocol 1, values and wording: what both versions judge alike.
V1_THRESHOLDS = (
    Threshold("min_effect", 0.05, "nats: the smallest difference in LR sensitivity (or best loss) "
                                  "that counts; an interval must clear it"),
    Threshold("did_not_learn", 0.1, "fraction of the learnable nats gained below which a run did "
                                    "not learn"),
    Threshold("spike_rebound", 1.0, "nats above the running minimum of the train loss that make a "
                                    "loss spike (reported, never a failure)"),
)
PERI_FLATTER, DT_FLATTER, PERI_MATCHES_BEST = (
    Claim("peri_flatter", "Peri-LN is less sensitive to the learning rate than Pre-LN",
          metric="lr_sensitivity", better="Peri-LN", worse="Pre-LN"),
    Claim("dt_flatter", "dt 0.1 makes Peri-LN less sensitive to the learning rate still",
          metric="lr_sensitivity", better="Peri-LN, dt 0.1", worse="Peri-LN"),
    Claim("peri_matches_best", "Peri-LN matches or beats Pre-LN at each one's best learning rate",
          metric="best_loss", better="Peri-LN", worse="Pre-LN", matches=True),
)

# Protocol 2's rules (and so protocol 3's), beyond its thresholds and its outcome rules (`blow_ups`:
# nplace/studies/outcomes.py):
# - LR sensitivity and best loss as in protocol 1, with a diverged seed counted as the cap (ln V)
#   in the mean curve and in "best lr": a rate where some seeds diverged cannot be best.
# - Maximum stable learning rate of a seed: the largest rate of the sweep at which its run
#   learned (`learned`); compared between arms in log10 per seed. A seed that learned at no rate
#   has none and makes the claim not testable in that shape.
# - Failed trials: counted per arm over the sweep, split into diverged and did-not-learn;
#   `divergences` claims compare the diverged counts with Fisher's exact test (`divergence_test`),
#   one-sided at `failure_p` (reproduced when `worse` diverges significantly more often; not reproduced
#   otherwise). A claim whose arms diverged nowhere is not testable.
# - The top rate must fail (diverge or not learn) for every arm in every shape, else the page
#   flags the sweep as not reaching the failure region; an optimum at the sweep's edge, or whose
#   neighbours sit less than `bracket_margin` above it, is flagged as not bracketed.
# - Horizons: every verdict is judged again on the validation losses at 1/4 and 1/2 of the run
#   (the train loss up to that step for the outcome rules); a verdict that differs between
#   horizons says so.
# - A claim needs every seed of `seeds` at every rate in every shape, else not testable.
PROTOCOL = Protocol(
    name="stability", version=2, kind=STABILITY_SWEEP,
    summary="Learning-rate sensitivity, failure region and maximum stable learning rate of Pre-LN "
            "and Peri-LN (with the embedding norm), each with weight decay 0.1 and 0, and of "
            "Peri-LN at dt 0.1: per arm and model shape, the validation loss over a 3-decade "
            "learning-rate sweep reaching 1, 5 seeds, 1M tokens a trial (cpu tier); every verdict "
            "judged again at 1/4 and 1/2 of the run. Outcome rules 2 (blow-ups from every step's "
            "loss); Welch t-intervals. Fixed before any run of this version.",
    seeds=5, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95, interval_method=WELCH_T,
    divergence_test=FISHER, blow_ups=True, diverged_at_cap=True, horizons=(0.25, 0.5, 1.0), arms=ARMS_V2,
    thresholds=(
        *V1_THRESHOLDS,
        Threshold("min_lr_gap", 0.25, "decades: the difference in maximum stable learning rate (log10, "
                                      "per seed) an interval must clear: more than half a sweep step"),
        Threshold("bracket_margin", 0.05, "nats: an optimum is bracketed when the mean loss at both "
                                          "neighbouring rates is at least this much above it"),
        Threshold("failure_p", 0.05, "one-sided p-value of Fisher's exact test on diverged-trial "
                                     "counts below which one arm diverges more often"),
    ),
    claims=(
        PERI_FLATTER,
        Claim("peri_flatter_no_wd", "... and so without weight decay",
              metric="lr_sensitivity", better="Peri-LN, no weight decay", worse="Pre-LN, no weight decay"),
        DT_FLATTER,
        PERI_MATCHES_BEST,
        Claim("peri_higher_max_lr", "Peri-LN still learns at higher learning rates than Pre-LN",
              metric="max_stable_lr", better="Peri-LN", worse="Pre-LN"),
        Claim("peri_higher_max_lr_no_wd", "... and so without weight decay",
              metric="max_stable_lr", better="Peri-LN, no weight decay", worse="Pre-LN, no weight decay"),
        Claim("pre_diverges_more", "Pre-LN diverges in more trials of the sweep than Peri-LN",
              metric="divergences", better="Peri-LN", worse="Pre-LN"),
        Claim("pre_diverges_more_no_wd", "... and so without weight decay",
              metric="divergences", better="Peri-LN, no weight decay", worse="Pre-LN, no weight decay"),
    ),
)
# Protocol 3: at protocol 2's top rate (1) Peri-LN still learned in every seed and shape, so its
# failure region and maximum stable rate were not reached; a decade more, nothing else changed.
LRS_V3 = tuple(10 ** (e / 2) for e in range(-6, 3))
PROTOCOL_V3 = dataclasses.replace(
    PROTOCOL, version=3,
    summary="Protocol 2 on its cpu grid with the learning-rate sweep widened by a decade, to 10 (4 "
            "decades, 9 rates): at protocol 2's top rate of 1 every Peri-LN seed still learned, so "
            "its failure region was not reached. Rules, thresholds, claims, arms, seeds and trial "
            "config are protocol 2's; its filed trials are reused at the rates up to 1. Declared "
            "after protocol 2's results and before any run at the new rates: its verdicts differ "
            "from protocol 2's only through those rates.")
# Protocol 4, declared before any of its runs. Three-way verdicts, each claim's test simulated
# with no effect and at its `power_at` on the page. Its definitions:
# - Failed: diverged or did not learn (outcome rules with blow-ups, as protocol 2). Stable at a
#   rate: learned and never blew up, a rise of `blow_up_rise` nats above the train loss's running
#   minimum after warmup (the project's spike size): a run that blew up and recovered once the
#   schedule had cut the rate is not stable at the rate it was given.
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
# - (b) The maximum stable rate of Pre-LN with the embedding norm on protocol 2's depth-12 sweep,
#   against protocol 2's filed Pre-LN and Peri-LN: exact permutation tests of a shift against
#   `min_lr_gap`, each way at 0.025 (the values move in half-decade steps: no t-interval); a seed
#   stable at the sweep's top rate may be stable higher, so it cannot count against a claim.
# - (c) Protocols 2 and 3's data re-judged (seen data, labelled so): LR sensitivity and best loss
#   by Welch's t-interval, three-way; the maximum stable rate as (b); divergences by the exact
#   test within each (depth, rate) stratum, so rates where every run of both arms failed decide
#   nothing.
# - Secondary, described and not judged: blew up at any step, ended diverged, the final loss.
TUNED_LR = 10 ** -1.5
PILOT_LRS = tuple(10 ** e for e in (-0.9, -0.8, -0.7, -0.6))
PILOT_SEEDS, FIXED_SEEDS = range(100, 103), range(10, 40)
# edge_rate of the filed pilot (results/stability_v4_pilot, tests/test_claim_power.py checks it): no
# rate had 1 or 2 of 3 Pre-LN seeds failing; 0 of 3 failed up to 10^-0.7, 3 of 3 at 10^-0.6.
EDGE_LR = 10 ** -0.6
PRE_EMBED = "Pre-LN + embedding norm"
ARMS_V4 = {**{k: v for k, v in ARMS_V2.items() if k != "Peri-LN, dt 0.1"},
           PRE_EMBED: {**_model("pre", embed_norm=True), "optim.weight_decay": 0.1}}


def edge_rate(failed: dict) -> float:
  """The pilot rate (lr -> (failed runs, runs)) whose Pre-LN failure fraction is nearest one half
  (compared in whole runs: |2 failed - runs|); of tied rates, the lowest at which some seed
  failed (else the lowest)."""
  distance = {lr: abs(2 * f - n) / n for lr, (f, n) in failed.items()}
  tied = sorted(lr for lr, d in distance.items() if d == min(distance.values()))
  return next((lr for lr in tied if failed[lr][0] > 0), tied[0])


V4_THRESHOLDS = tuple(t for t in PROTOCOL.thresholds if t.name != "failure_p") + (
    Threshold("failure_p", 0.025, "one-sided p-value of each exact test on failure counts, each way (a two-sided "
                                  "95% decision, as the intervals)"),
    Threshold("blow_up_rise", 1.0, "nats above the train loss's running minimum after warmup that make a "
                                   "blow-up: a run that blew up was not stable at its rate"),
    Threshold("never_rate", 0.2, "a failure rate whose exact interval lies below this (the seed's Pre-LN "
                                 "rate with weight decay, 1 run in 5) counts as the seed's 0 of 5"),
)
V4 = dict(name="stability", version=4, seeds=5, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95,
          interval_method=WELCH_T, divergence_test=STRATIFIED, verdicts=THREE_WAY, blow_ups=True,
          diverged_at_cap=True, stable_needs_no_blow_up=True, thresholds=V4_THRESHOLDS)
HIGHER_MAX_LR = dict(metric="max_stable_lr", method=PERMUTATION, power_at=0.5)  # one sweep step


def _fixed_rate_claims(edge: float | None) -> tuple:
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
    claims=_fixed_rate_claims(EDGE_LR))
PROTOCOL_V4_EMBED = Protocol(
    **V4, kind=STABILITY_SWEEP, arms={k: ARMS_V4[k] for k in ("Pre-LN", "Peri-LN", PRE_EMBED)},
    summary="The maximum stable rate (learned and never blew up) of Pre-LN with the embedding norm over protocol "
            "2's depth-12 sweep, beside protocol 2's filed Pre-LN and Peri-LN: whether Peri-LN's higher rate "
            "comes from its output norms or from the embedding norm. Fixed before any run of this version.",
    claims=(Claim("peri_higher_max_lr", "Peri-LN still learns at higher learning rates than Pre-LN",
                  better="Peri-LN", worse="Pre-LN", **HIGHER_MAX_LR),
            Claim("embed_norm_raises_max_lr", "The embedding norm alone raises Pre-LN's maximum stable rate",
                  better=PRE_EMBED, worse="Pre-LN", source=FINDING, **HIGHER_MAX_LR),
            Claim("output_norms_raise_max_lr", "Peri-LN's output norms raise it beyond the embedding norm's",
                  better="Peri-LN", worse=PRE_EMBED, source=FINDING, **HIGHER_MAX_LR)))
PROTOCOL_V4_REJUDGED = Protocol(
    **V4, kind=STABILITY_SWEEP, horizons=(0.25, 0.5, 1.0), arms=ARMS_V2,
    summary="Protocol 4's rules on protocols 2 and 3's filed trials, which were seen before these rules were "
            "written: three-way verdicts; the maximum stable rate by its new definition (learned and never "
            "blew up) and exact permutation tests; divergences by the exact test within each depth and rate.",
    claims=(dataclasses.replace(PERI_FLATTER, power_at=0.2),
            Claim("peri_flatter_no_wd", "... and so without weight decay", metric="lr_sensitivity",
                  better="Peri-LN, no weight decay", worse="Pre-LN, no weight decay", power_at=0.2),
            dataclasses.replace(DT_FLATTER, power_at=0.2),
            dataclasses.replace(PERI_MATCHES_BEST, power_at=0.0),
            Claim("peri_higher_max_lr", "Peri-LN still learns at higher learning rates than Pre-LN",
                  better="Peri-LN", worse="Pre-LN", **HIGHER_MAX_LR),
            Claim("peri_higher_max_lr_no_wd", "... and so without weight decay", better="Peri-LN, no weight decay",
                  worse="Pre-LN, no weight decay", **HIGHER_MAX_LR),
            Claim("pre_diverges_more", "Pre-LN diverges more often than Peri-LN at the same depth and rate",
                  metric="divergences", better="Peri-LN", worse="Pre-LN", power_at=(0.5, 0.1)),
            Claim("pre_diverges_more_no_wd", "... and so without weight decay", metric="divergences",
                  better="Peri-LN, no weight decay", worse="Pre-LN, no weight decay", power_at=(0.5, 0.1))))

# The placements grid: every published placement at depth 12 x width 32 over protocol 3's nine
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
PLACEMENT_ARMS = {"Pre-LN": ARMS_V2["Pre-LN"], "Peri-LN": ARMS_V2["Peri-LN"], **NEW_PLACEMENTS,
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

PROTOCOL_V1 = Protocol(
    name="stability", version=1, kind=LR_SWEEP,
    summary="Learning-rate sensitivity (Wortsman et al. 2023, arXiv 2309.14322) of Pre-LN and "
            "Peri-LN: per arm and model shape, the final validation loss over a 2-decade "
            "learning-rate sweep, 3 seeds (cpu tier). Fixed before any run of this version.",
    seeds=3, bootstrap_resamples=2000, bootstrap_seed=0, interval=0.95,
    thresholds=(
        *V1_THRESHOLDS,
    ),
    claims=(
        PERI_FLATTER,
        DT_FLATTER,
        PERI_MATCHES_BEST,
        Claim("pre_diverges_more", "Pre-LN diverges more often than Peri-LN over the sweep",
              metric="divergences", better="Peri-LN", worse="Pre-LN"),
    ),
)

PROTOCOL_V0 = Protocol(
    name="stability", version=0, kind=COMPARISON,
    summary="Failures counted at one stress learning rate after 150 steps. Its failure margin "
            "(0.25 nats) was chosen after the pilot runs, so its verdicts are not evidence; kept "
            "so its committed results stay readable (nplace/studies/outcomes.py: `failures`).",
    seeds=3, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95,
    thresholds=(Threshold("failure_margin", 0.25, "nats below the frequency loss a run must reach"),
                Threshold("spike_rebound", 1.0, "nats above the running minimum of the train loss")),
    claims=(),
)

V0_WEIGHT_DECAYS = (0.1, 0.0)
V0_PLACEMENTS = (_model("pre"), _model("peri"), _model("peri", dt=0.1), _model("peri", embed_norm=True))
V0_STRESS_LR = 3e-2  # protocol 0: the lowest rate of its scan at which Pre-LN stopped learning
V0_SCAN_LRS = (1e-3, 3e-3, 1e-2, 3e-2)
V0_PAPER_SCAN_LRS = (3e-4, 6e-4, 1.2e-3, 2.4e-3)
VARIANTS = ("cpu", "cpu_wide", "gpu", "paper", "v4_pilot", "v4_fixed", "v4_embed", "placements", "v1_cpu", "v1_gpu", "v1_paper", "v0_stress", "v0_lr_scan",
            "v0_paper", "v0_paper_lr_scan")


def _small(steps: int, batch_size: int, seq_len: int) -> ml_collections.ConfigDict:
  c = base_config()
  c.model.update(vocab_size=512, max_len=seq_len, n_layer=12, n_head=4, d_model=64, remat="none")
  c.data.seq_len = seq_len
  c.train.update(steps=steps, batch_size=batch_size, log_every=10, eval_every=steps, eval_batches=4,
                 spike_window=20, peak_flops=2e11)
  c.optim.update(lr=1e-2, warmup_steps=max(10, steps // 20))
  c.checkpoint.every = steps
  return c


def _v0_stress() -> ml_collections.ConfigDict:
  """Protocol 0's model: 12 layers of width 64, ~40 s a trial on 2 cores."""
  c = _small(150, 16, 64)
  c.optim.lr = V0_STRESS_LR
  return c


def _gpu() -> ml_collections.ConfigDict:
  c = _small(2000, 16, 256)
  c.model.update(vocab_size=2048, dtype="bfloat16")
  c.data.synthetic_tokens = 2 ** 24
  c.train.update(eval_batches=8, peak_flops=9.9e14)
  return c


def _v2(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Protocol 2's logging of a tier's config: every step's loss (outcome rules 2 read it),
  evaluated and saved at each quarter (the horizons; a killed cell resumes from the last)."""
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
                     "(paper variants take ,SIZE)")
  if size and "paper" not in variant:
    raise ValueError(f"stability variant {arg!r}: only paper variants take a SIZE")
  return variant, size or "124m"


def _tier(variant: str) -> tuple[str, bool]:
  """(the tier whose model and schedule a protocol 1-4 variant trains, whether it is protocol 1's)."""
  if variant.startswith("v4") or variant == "placements":
    return "cpu", False
  return variant.removeprefix("v1_").removesuffix("_wide"), variant.startswith("v1")


def _v4_sweep(variant: str) -> list[dict]:
  """Protocol 4's trials, at depth 12 x 32 and with the keys in cpu's order (so names line up)."""
  shape = {"model.n_layer": 12, "model.d_model": 32}
  if variant == "v4_pilot":
    return [{**shape, **ARMS_V4["Pre-LN"], "optim.lr": lr, "seed": s} for lr in PILOT_LRS for s in PILOT_SEEDS]
  if variant == "placements":
    return [{**shape, **arm, "optim.lr": lr, "seed": s} for arm in PLACEMENT_ARMS.values() for lr in LRS_V3
            for s in PLACEMENT_SEEDS]
  if variant == "v4_fixed":
    rates = (TUNED_LR,) if EDGE_LR is None else (TUNED_LR, EDGE_LR)
    return [{**shape, **arm, "optim.lr": lr, "seed": s} for arm in ARMS_V4.values() for lr in rates
            for s in FIXED_SEEDS]
  return [{**shape, **ARMS_V4[arm], "optim.lr": lr, "seed": s} for arm in PROTOCOL_V4_EMBED.arms
          for lr in LRS_V2 for s in TIERS_V2["cpu"][2]]


def protocol(arg: str = "cpu") -> Protocol:
  """The protocol a variant's results are judged by."""
  variant, _ = _split(arg)
  own = {"cpu_wide": PROTOCOL_V3, "v4_pilot": PROTOCOL_V4_PILOT, "v4_fixed": PROTOCOL_V4_FIXED,
         "v4_embed": PROTOCOL_V4_EMBED, "placements": PROTOCOL_PLACEMENTS}
  return own.get(variant) or {"v0": PROTOCOL_V0, "v1": PROTOCOL_V1}.get(variant[:2], PROTOCOL)


def rejudged_by(arg: str = "cpu") -> tuple[Protocol, ...]:
  """Later protocols that judge this variant's filed trials again: a new verdict beside the old."""
  return (PROTOCOL_V4_REJUDGED,) if _split(arg)[0] in ("cpu", "cpu_wide") else ()


def reuses(arg: str = "cpu") -> str | None:
  """The variants whose filed trials this one's grid shares (same config and names), judged as
  its own: cpu_wide's rates up to 1 and v4_embed's Pre-LN and Peri-LN are cpu's trials; the
  placements grid's Pre-LN and Peri-LN are cpu's and cpu_wide's, its Pre-LN + embedding norm
  up to rate 1 v4_embed's."""
  return {"cpu_wide": "cpu", "v4_embed": "cpu", "placements": ("cpu", "cpu_wide", "v4_embed")}.get(_split(arg)[0])


def get_config(arg: str = "cpu"):
  variant, size = _split(arg)
  if variant.startswith("v0"):
    return _paper(size) if "paper" in variant else _v0_stress()
  tier, v1 = _tier(variant)
  # protocol 2's cpu trials see 1M tokens: protocol 1's 300 steps were half a token per parameter
  c = {"cpu": lambda: _small(300 if v1 else 1000, 16, 64), "gpu": _gpu, "paper": lambda: _paper(size)}[tier]()
  return c if v1 else _v2(c)


def get_sweep(arg: str = "cpu") -> list[dict]:
  variant, _ = _split(arg)
  if variant.startswith("v4") or variant == "placements":
    return _v4_sweep(variant)
  tier, v1 = _tier(variant)
  if tier in TIERS:
    depths, widths, seeds = (TIERS if v1 else TIERS_V2)[tier]
    lrs = {"cpu_wide": LRS_V3, "paper": PAPER_LRS_V2, "v1_paper": PAPER_LRS}.get(variant, LRS if v1 else LRS_V2)
    shapes = [{}] if tier == "paper" else [{"model.n_layer": d, "model.d_model": w}
                                           for d in depths for w in widths]
    return [{**shape, **arm, "optim.lr": lr, "seed": seed}
            for shape in shapes for arm in (ARMS if v1 else ARMS_V2).values() for lr in lrs for seed in seeds]
  if variant.endswith("lr_scan"):
    lrs = V0_PAPER_SCAN_LRS if "paper" in variant else V0_SCAN_LRS
    return [{**model, "optim.lr": lr} for model in V0_PLACEMENTS + (_model("post"),) for lr in lrs]
  placements = V0_PLACEMENTS if variant == "v0_stress" else V0_PLACEMENTS + (_model("post"),)
  return [{**model, "optim.weight_decay": wd, "seed": seed}
          for model in placements for wd in V0_WEIGHT_DECAYS for seed in (range(3) if variant == "v0_stress" else range(5))]
