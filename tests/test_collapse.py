"""Study B's measures and claims, judged on constructed trials whose answers are known."""
import math
import pathlib

import numpy as np
import pytest

from nplace import protocol as p
from nplace.studies import collapse, grid, judge, results, verdict
from nplace.studies.report import tables
from nplace.studies.results import Trial
from nplace.train.summary import Summary

FREQ, ENTROPY, DEPTH = 4.5, 1.5, 4
ARMS = {"Post": {"model.placement": "post"}, "Pre": {"model.placement": "pre"}}
PROTOCOL = p.Protocol("collapse", 1, p.COLLAPSE, "", 3, 0, 0, 0.95, (
    p.Threshold("collapse_margin", 0.05, ""), p.Threshold("min_similarity_rise", 0.1, ""),
    p.Threshold("max_gradient_ratio", 0.01, "")), (
    p.Claim("collapses", "Post collapses", "collapses", arm="Post"),
    p.Claim("escapes", "Pre escapes", "escapes", arm="Pre"),
    p.Claim("clones", "Post's similarity rises", "similarity_rises", arm="Post"),
    p.Claim("clones_centered", "... centered", "similarity_centered_rises", arm="Post"),
    p.Claim("starves", "Post starves", "gradient_starves", arm="Post"),
    p.Claim("kept", "Pre keeps it", "gradient_kept", arm="Pre"),
    p.Claim("backward", "Post's factor < 1", "backward_below_one", arm="Post")))
STEPS = [0, 250, 500]


def trial(arm, seed, plateau, similarity_top, gradient_bottom, backward):
  """A run whose last quarter sits `plateau` nats above the frequency loss; probes per block with
  block 1's similarity 0.2 and the top's `similarity_top` at init; |dL/dh_L| 1 and |dL/dh_1|
  `gradient_bottom` at each probe; backward factor 5 at the first site, `backward` elsewhere."""
  loss = [(s, FREQ + 3 if s < 1000 else FREQ + plateau) for s in range(10, 2010, 10)]
  similarity = [[0.2, 0.3, 0.5, similarity_top]] * 3
  grad_h = [[g, 0.5, 0.8, 1.0] for g in gradient_bottom]
  factors = [[5.0] + [b] * (2 * DEPTH - 1) for b in backward]
  probes = {"similarity": {"steps": STEPS, "values": similarity},
            "similarity_centered": {"steps": STEPS, "values": [[v / 2 for v in row] for row in similarity]},
            "grad_h": {"steps": STEPS, "values": grad_h},
            ("norm_backward" if arm == "Post" else "norm_in_backward"): {"steps": STEPS, "values": factors}}
  return Trial(f"{arm},{seed}", {**ARMS[arm], "seed": seed},
               Summary(step=2000, val_loss=FREQ + plateau, frequency_loss=FREQ, entropy_rate=ENTROPY),
               loss, 100, 512, probes)


def verdicts(trials, protocol=PROTOCOL):
  return {v.claim.id: v for v in judge.judge(protocol, collapse.Measures(protocol, ARMS, trials))}


def textbook():
  return ([trial("Post", s, 0.02, 0.9, [0.5, 1e-3, 1e-4], [0.8, 0.7, 0.6]) for s in range(3)]
          + [trial("Pre", s, -1.5, 0.4, [0.9, 0.5, 0.3], [1.0, 1.1, 1.2]) for s in range(3)])


def test_a_textbook_collapse_reproduces_every_claim_with_its_seed_values():
  found = verdicts(textbook())
  assert {k: v.verdict for k, v in found.items()} == {k: verdict.REPRODUCED for k in found}
  effect, = found["collapses"].effects
  assert (effect.mean, effect.low, effect.high, effect.seeds) == pytest.approx((0.02, 0.02, 0.02, 3))
  assert found["clones"].effects[0].mean == pytest.approx(0.7)  # top 0.9 - block 1 0.2
  assert found["clones_centered"].effects[0].mean == pytest.approx(0.35)
  assert found["starves"].effects[0].mean == pytest.approx(-4)  # log10 of the smallest ratio over probes
  assert found["backward"].effects[0].mean == pytest.approx(0.7)  # the largest after init; site 1 left out


def test_one_seed_the_other_way_is_not_reproduced():
  trials = textbook()
  trials[2] = trial("Post", 2, 0.3, 0.9, [0.5, 0.5, 0.5], [0.8, 1.2, 0.6])  # learned a little, kept its gradient
  found = verdicts(trials)
  assert {k for k, v in found.items() if v.verdict == verdict.NOT_REPRODUCED} == {"collapses", "starves", "backward"}
  assert found["collapses"].would_change == "2 of 3 seeds hold it: every seed"


def test_the_margin_decides_a_plateau_near_its_edge():
  trials = [trial("Post", s, 0.07, 0.9, [1e-3] * 3, [0.5] * 3) for s in range(3)]
  assert verdicts(trials)["collapses"].verdict == verdict.NOT_REPRODUCED
  assert verdicts(trials, PROTOCOL.scaled("collapse_margin", 2.0))["collapses"].verdict == verdict.REPRODUCED


def test_an_unprobed_arm_is_not_testable_for_the_mechanisms():
  trials = textbook()
  for t in trials:
    t.probes = {}
  found = verdicts(trials)
  assert found["collapses"].verdict == verdict.REPRODUCED
  assert all(found[k].verdict == verdict.NOT_TESTABLE for k in ("clones", "starves", "kept", "backward"))
  assert math.isnan(collapse.similarity_rise(trials[0]))


# --- protocol 2: mechanisms an escaping arm can fail ---

ARMS_V2 = {"Post": {"model.placement": "post"}, "Pre": {"model.placement": "pre"},
           "Centered": {"model.placement": "post", "model.attention": "centered"},
           "Control": {"model.placement": "post", "model.attn_out_scale": 0.25}}
PROTOCOL_V2 = p.Protocol("collapse", 2, p.COLLAPSE_MECHANISMS, "", 3, 0, 0, 0.95, (
    p.Threshold("collapse_margin", 0.05, ""), p.Threshold("clone_similarity", 0.99, ""),
    p.Threshold("max_gradient_ratio", 0.01, ""), p.Threshold("min_factor_fall", 0.05, ""),
    p.Threshold("min_explained", 0.5, ""), p.Threshold("plateau_window", 100, "")), (
    p.Claim("clones", "Post's tokens are clones", "clones", arm="Post"),
    p.Claim("no_clones", "Pre's are not", "no_clones", arm="Pre"),
    p.Claim("falls", "Post's factor falls", "factor_falls", arm="Post"),
    p.Claim("stays", "Centered's stays", "factor_stays", arm="Centered", source=p.FINDING),
    p.Claim("account", "the norms account", "norms_account", arm="Post"),
    p.Claim("pre_account", "Pre's norms account", "norms_account", arm="Pre"),
    p.Claim("first", "Post starves first", "starves_first", arm="Post"),
    p.Claim("control", "centered escapes, the control collapses", "escapes_unlike_control", "Centered", "Control")),
    arms=ARMS_V2)


def trial_v2(arm, seed, *, plateau=0.02, top=(0.995, 0.995), factors=(0.8, 0.7), site_factor=0.5, ratios=(1.0, 1e-3, 1e-3),
             steps=STEPS, plateau_from=1000, arms=ARMS_V2):
  """A run at the frequency loss + 3 until `plateau_from`, then `plateau` above it; at init the
  top block's raw and centered similarity `top`; the mean backward factor (sites after the first)
  going through `factors` (the last probe's `factors[-1]`), every site past the first two at
  `site_factor` (or at its value per probe); |dL/dh_1| / |dL/dh_L| = `ratios` at the probe `steps`."""
  loss = [(s, FREQ + 3 if s < plateau_from else FREQ + plateau) for s in range(10, 2010, 10)]
  n = len(steps)
  mean = list(np.interp(range(n), [0, n - 1], factors))
  # the first site reads the embedding; site 2 sets the mean of sites 2..8 to `mean` with sites 3..8 at site_factor
  norm_backward = [[5.0, 7 * m - 6 * f] + [f] * (2 * DEPTH - 2) for m, f in zip(mean, np.broadcast_to(site_factor, n))]
  similarity = [[0.2, 0.3, 0.5, top[0]]] * n
  centered = [[0.1, 0.2, 0.3, top[1]]] * n
  probes = {"similarity": {"steps": steps, "values": similarity},
            "similarity_centered": {"steps": steps, "values": centered},
            "grad_h": {"steps": steps, "values": [[r, 0.5, 0.8, 1.0] for r in ratios]},
            ("norm_backward" if arms[arm]["model.placement"] == "post" else "norm_in_backward"):
                {"steps": steps, "values": norm_backward}}
  overrides = {**arms[arm], "seed": seed}
  return Trial(f"{arm},{seed}", overrides, Summary(step=2000, val_loss=FREQ + plateau, frequency_loss=FREQ,
                                                    entropy_rate=ENTROPY), loss, 100, 512, probes)


def textbook_v2():
  return ([trial_v2("Post", s) for s in range(3)]
          + [trial_v2("Pre", s, plateau=-1.5, top=(0.995, 0.4), factors=(0.3, 0.3), ratios=(2, 2, 2)) for s in range(3)]
          + [trial_v2("Centered", s, plateau=-1.4, top=(0.7, 0.2), factors=(0.9, 0.88), ratios=(3, 0.2, 0.2))
             for s in range(3)]
          + [trial_v2("Control", s) for s in range(3)])


def verdicts_v2(trials, protocol=PROTOCOL_V2):
  return {v.claim.id: v for v in judge.judge(protocol, collapse.Measures(protocol, protocol.arms, trials))}


def test_protocol_2_on_a_textbook_collapse():
  found = verdicts_v2(textbook_v2())
  assert {k: v.verdict for k, v in found.items()} == {
      "clones": verdict.REPRODUCED, "no_clones": verdict.REPRODUCED,  # Pre's raw cosine is 0.995, its centered one is not
      "falls": verdict.REPRODUCED, "stays": verdict.REPRODUCED, "account": verdict.REPRODUCED,
      "pre_account": verdict.NOT_TESTABLE,  # no norm on Pre's residual path: nothing to account with
      "first": verdict.REPRODUCED, "control": verdict.REPRODUCED}
  assert found["falls"].effects[0].mean == pytest.approx(0.1)
  # six sites at 0.5 from h_1 up to h_4 carry log10 0.5^6 = -1.81 of the smallest ratio's -3
  assert found["account"].effects[0].mean == pytest.approx(6 * math.log10(0.5) / -3)
  assert found["first"].effects[0].mean == pytest.approx(1000 - 250)  # plateau step - first starved probe


def test_the_accounting_telescopes_into_norms_and_branches():
  found = collapse.accounting(trial_v2("Post", 0))
  assert list(found.steps) == STEPS
  assert found.measured == pytest.approx([0, -3, -3])
  assert found.norms == pytest.approx([6 * math.log10(0.5)] * 3)
  assert found.branches == pytest.approx(found.measured - found.norms)
  assert math.isnan(found.explained(0))  # nothing lost at init: no share to speak of
  assert collapse.accounting(trial_v2("Pre", 0)) is None


def test_a_missing_seed_makes_every_claim_on_its_arm_not_testable():
  trials = [t for t in textbook_v2() if not (t.overrides["model.placement"] == "post" and "model.attention" not in t.overrides
                                               and "model.attn_out_scale" not in t.overrides and t.overrides["seed"] == 1)]
  found = verdicts_v2(trials)
  for claim in ("clones", "falls", "account", "first"):
    assert found[claim].verdict == verdict.NOT_TESTABLE, claim
    assert found[claim].would_change == "every seed filed: missing Post seed 1"
  assert found["no_clones"].verdict == verdict.REPRODUCED  # Pre's seeds are all there


def test_clones_need_both_cosines_and_the_factor_must_fall_by_the_margin():
  trials = textbook_v2()
  trials[0] = trial_v2("Post", 0, top=(0.999, 0.98))  # raw cosine alone is not a clone
  trials[1] = trial_v2("Post", 1, factors=(0.8, 0.77))  # fell, by less than min_factor_fall
  found = verdicts_v2(trials)
  assert found["clones"].verdict == found["falls"].verdict == verdict.NOT_REPRODUCED
  assert found["clones"].effects[0].low == pytest.approx(0.98)


def test_the_order_of_events_says_when_the_probes_cannot_tell():
  late = [0, 500, 750]  # the ratio is first below 0.01 at 500, and the loss reaches its plateau at 400
  trials = textbook_v2()
  trials[0] = trial_v2("Post", 0, steps=late, plateau_from=400)
  assert verdicts_v2(trials)["first"].verdict == verdict.NOT_TESTABLE  # starved somewhere in (0, 500]: either order
  order = collapse.order_of_events(trials[0], PROTOCOL_V2)
  assert (order.last_unstarved, order.starved, order.plateau, order.outcome) == (0, 500, 400, collapse.UNRESOLVED)
  trials[0] = trial_v2("Post", 0, steps=[0, 450, 750], ratios=(1.0, 0.5, 1e-4), plateau_from=400)
  assert collapse.order_of_events(trials[0], PROTOCOL_V2).outcome == collapse.PLATEAU_FIRST
  assert verdicts_v2(trials)["first"].verdict == verdict.NOT_REPRODUCED


def test_the_control_that_escapes_too_says_size_not_the_average():
  trials = [t for t in textbook_v2() if "model.attn_out_scale" not in t.overrides]
  trials += [trial_v2("Control", s, plateau=-1.2) for s in range(3)]
  found = verdicts_v2(trials)["control"]
  assert found.verdict == verdict.NOT_REPRODUCED
  assert "the matched control escapes too" in found.would_change
  assert [e.mean for e in found.effects] == pytest.approx([-1.4, -1.2])


def test_an_arm_that_adds_a_key_to_another_is_its_own():
  assert results.arm_of(ARMS_V2, {"model.placement": "post", "model.attn_out_scale": 0.25, "seed": 0}) == "Control"
  assert results.arm_of(ARMS_V2, {"model.placement": "post", "seed": 0}) == "Post"
  assert results.arm_of(ARMS_V2, {"model.placement": "peri"}) is None


def test_too_small_a_share_does_not_account_for_the_starvation():
  trials = textbook_v2()
  trials[2] = trial_v2("Post", 2, ratios=(1.0, 1e-3, 1e-5))  # 0.5^6 carries 1.81 of 5 decades
  found = verdicts_v2(trials)["account"]
  assert found.verdict == verdict.NOT_REPRODUCED
  assert found.effects[0].low == pytest.approx(6 * math.log10(0.5) / -5)


# --- protocol 3: a mechanism claim holds only where the escaping runs fail it ---

COLLAPSE_GRID = grid.load_module(pathlib.Path(__file__).resolve().parent.parent / "experiments" / "collapse.py")
STEPS_V3 = [0, 250, *COLLAPSE_GRID.READ_STEPS]  # 0, 250, 500, 1000, 1500, 2000


def textbook_v3():
  """Post-LN starved for good from step 250 (its norms alone lose 6 decades), its loss on the
  plateau from 1000; every other arm escapes with its gradient and factors kept."""
  post = dict(ratios=(1.0, 1e-6, 1e-7, 1e-7, 1e-7, 1e-7), site_factor=(1.0, 0.1, 0.1, 0.1, 0.1, 0.1),
              factors=(0.8, 0.7))
  escaping = dict(plateau=-1.5, top=(0.5, 0.3), factors=(0.9, 0.88), ratios=(2, 0.5, 0.5, 0.5, 0.5, 0.5))
  return [trial_v2(arm, s, steps=STEPS_V3, arms=COLLAPSE_GRID.ARMS,
                   **(post if arm == "Post-LN" else escaping)) for arm in COLLAPSE_GRID.ARMS for s in range(3, 6)]


def verdicts_v3(trials):
  protocol = COLLAPSE_GRID.PROTOCOL_V3
  return {v.claim.id: v for v in judge.judge(protocol, collapse.Measures(protocol, COLLAPSE_GRID.ARMS, trials))}


def test_protocol_3_on_a_textbook_collapse_and_on_an_escaping_run_that_starves_too():
  found = verdicts_v3(textbook_v3())
  mechanisms = ("post_clones_at_init", "post_gradient_starves", "post_factor_falls", "post_norms_account",
                "post_starves_first")
  assert {k: found[k].verdict for k in mechanisms} == dict.fromkeys(mechanisms, verdict.REPRODUCED)
  assert found["post_norms_account"].effects[0].mean == pytest.approx(-6)  # 6 sites from 1 to 0.1
  assert found["post_norms_account"].effects[1].shape == "9 escaping runs"  # the Post-LN arms that escape
  assert found["post_starves_first"].effects[0].mean == pytest.approx(1000 - 250)
  # one escaping run whose gradient stays starved too: starvation no longer tells collapse from escape
  trials = textbook_v3()
  trials[-1] = trial_v2("Post-LN, small attention at init", 5, plateau=-1.5, top=(0.5, 0.3), factors=(0.9, 0.88),
                        ratios=(2, 1e-5, 1e-5, 1e-5, 1e-5, 1e-5), steps=STEPS_V3, arms=COLLAPSE_GRID.ARMS)
  found = verdicts_v3(trials)
  assert found["post_gradient_starves"].verdict == found["post_starves_first"].verdict == verdict.NOT_REPRODUCED
  assert "does not separate: 1 of the 15 escaping runs hold it too (Post-LN, small attention at init seed 5)" \
      in found["post_gradient_starves"].would_change
  assert found["post_clones_at_init"].verdict == verdict.REPRODUCED


def test_a_verdict_that_flips_within_half_to_double_a_threshold_is_marked_fragile():
  protocol = COLLAPSE_GRID.PROTOCOL_V3
  trials = textbook_v3()  # Post-LN's factor falls by 0.1, the escaping arms' by 0.02: 0.06 ×2 flips it
  found = judge.sensitivity(protocol, lambda q: collapse.Measures(q, COLLAPSE_GRID.ARMS, trials))
  fragile = judge.fragile(protocol, found)
  assert fragile == {"post_factor_falls": ["`min_factor_fall` ×2"]}
  row = tables.verdict_table(protocol, [verdicts_v3(trials)["post_factor_falls"]], "cpu", 3, fragile=fragile)
  assert "**reproduced** (fragile: flips at `min_factor_fall` ×2)" in row


def _attention_branch_rms(config, overrides: dict, seed: int) -> np.ndarray:
  """rms of each block's attention sublayer output at init, in the model's own forward pass on
  the probe batch (the first validation rows, as the declaration measured it)."""
  import jax
  import jax.numpy as jnp

  from nplace.config import ModelConfig
  from nplace.model import decoder
  from nplace.probes import inputs
  from nplace.probes.suite import einsum_attention

  config = grid.apply(config, {**overrides, "seed": seed}, "matched control")
  cfg = einsum_attention(ModelConfig.of(config.model))
  params = decoder.init(cfg, jax.random.key(seed))
  tokens_BT = jnp.asarray(inputs.probe_batch(config, held_out=True))[:, :-1]
  is_attention = lambda module, method: type(module).__name__ == "Attention"
  _, state = jax.jit(lambda p, t: decoder.Decoder(cfg).apply(
      {"params": p}, t, capture_intermediates=is_attention, mutable=["intermediates"]))(params, tokens_BT)
  out_LBTD = state["intermediates"]["blocks"]["attn"]["__call__"][0]
  return np.sqrt(np.mean(np.square(np.asarray(out_LBTD, np.float64)), axis=(1, 2, 3)))


def test_the_matched_control_is_as_small_at_init_as_the_centered_arm():
  """The declared scale, measured again on seed 0 at the cpu tier's shape: the softmax branch's
  rms over the centered one's, pooled over the blocks, and the control's own branch against the
  centered one's."""
  collapse_grid = COLLAPSE_GRID
  config = collapse_grid.get_config("cpu")
  pooled = lambda arm: float(np.sqrt(np.mean(np.square(_attention_branch_rms(config, collapse_grid.ARMS[arm], 0)))))
  softmax, centered = pooled("Post-LN"), pooled("Post-LN, centered")
  assert centered / softmax == pytest.approx(collapse_grid.MATCHED_ATTN_SCALE, abs=0.01)  # 0.234 on seed 0
  assert pooled(collapse_grid.MATCHED_CONTROL) / centered == pytest.approx(1, abs=0.25)
