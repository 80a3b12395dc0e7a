"""Study B's measures and claims, judged on constructed trials whose answers are known."""
import math
import pathlib

import numpy as np
import pytest

from nplace.studies import collapse, grid, judge, results, verdict
from nplace.studies.report import study_b, tables
from nplace.studies.results import Trial
from nplace.train.summary import Summary

FREQ, ENTROPY, DEPTH = 4.5, 1.5, 4
COLLAPSE_GRID = grid.load_module(pathlib.Path(__file__).resolve().parent.parent / "experiments" / "collapse.py")
PROTOCOL, ARMS = COLLAPSE_GRID.PROTOCOL, COLLAPSE_GRID.ARMS
STEPS = [0, 250, *collapse.READ_STEPS]  # 0, 250, 500, 1000, 1500, 2000


def trial(arm, seed, *, plateau=0.02, top=(0.995, 0.995), factors=(0.8, 0.7), site_factor=0.5, ratios=(1.0, 1e-6),
          steps=STEPS, plateau_from=1000):
  """A run at the frequency loss + 3 until `plateau_from`, then `plateau` above it; at init the
  top block's raw and centered similarity `top`; the mean backward factor (sites after the first)
  going through `factors` (the last probe's `factors[-1]`), every site past the first two at
  `site_factor` (or at its value per probe); |dL/dh_1| / |dL/dh_L| = `ratios` at the probe `steps`
  (its last value repeated to the last probe)."""
  loss = [(s, FREQ + 3 if s < plateau_from else FREQ + plateau) for s in range(10, 2010, 10)]
  n = len(steps)
  ratios = list(ratios) + [ratios[-1]] * (n - len(ratios))
  mean = list(np.interp(range(n), [0, n - 1], factors))
  # the first site reads the embedding; site 2 sets the mean of sites 2..8 to `mean` with sites 3..8 at site_factor
  norm_backward = [[5.0, 7 * m - 6 * f] + [f] * (2 * DEPTH - 2) for m, f in zip(mean, np.broadcast_to(site_factor, n))]
  similarity = [[0.2, 0.3, 0.5, top[0]]] * n
  centered = [[0.1, 0.2, 0.3, top[1]]] * n
  probes = {"similarity": {"steps": steps, "values": similarity},
            "similarity_centered": {"steps": steps, "values": centered},
            "grad_h": {"steps": steps, "values": [[r, 0.5, 0.8, 1.0] for r in ratios]},
            ("norm_backward" if ARMS[arm]["model.placement"] == "post" else "norm_in_backward"):
                {"steps": steps, "values": norm_backward}}
  overrides = {**ARMS[arm], "seed": seed}
  return Trial(f"{arm},{seed}", overrides, Summary(step=2000, val_loss=FREQ + plateau, frequency_loss=FREQ,
                                                    entropy_rate=ENTROPY), loss, 100, 512, probes)


POST_STARVED = dict(ratios=(1.0, 1e-6, 1e-7), site_factor=(1.0, 0.1, 0.1, 0.1, 0.1, 0.1))
ESCAPING = dict(plateau=-1.5, top=(0.5, 0.3), factors=(0.9, 0.88), ratios=(2, 0.5))


def textbook(seeds=range(3, 6)):
  """Post-LN starved for good from step 250 (its norms alone lose 6 decades), its loss on the
  plateau from 1000; every other arm escapes with its gradient and factors kept."""
  return [trial(arm, s, **(POST_STARVED if arm == "Post-LN" else ESCAPING)) for arm in ARMS for s in seeds]


def verdicts(trials, protocol=PROTOCOL):
  return {v.claim.id: v for v in judge.judge(protocol, collapse.Measures(protocol, ARMS, trials))}


def _replaced(trials, new):
  return [new if t.name == new.name else t for t in trials]


MECHANISMS = ("post_clones_at_init", "post_gradient_starves", "post_factor_falls", "post_norms_account",
              "post_starves_first")


def test_a_textbook_collapse_reproduces_every_claim_with_its_seed_values():
  found = verdicts(textbook())
  assert {k: v.verdict for k, v in found.items()} == {
      **{k: verdict.REPRODUCED for k in found},
      # the control escapes here as the centered arm does: the average is not what the centered arm removes
      "centered_escapes_not_by_size": verdict.NOT_REPRODUCED}
  effect, = found["post_collapses"].effects
  assert (effect.mean, effect.low, effect.high, effect.seeds) == pytest.approx((0.02, 0.02, 0.02, 3))
  assert found["post_clones_at_init"].effects[0].mean == pytest.approx(0.995)  # the smaller of raw and centered
  assert found["post_gradient_starves"].effects[0].mean == pytest.approx(-7)  # log10 of the largest read-step ratio
  assert found["post_factor_falls"].effects[0].mean == pytest.approx(0.1)
  assert found["post_norms_account"].effects[0].mean == pytest.approx(-6)  # 6 sites from 1 to 0.1
  assert found["post_norms_account"].effects[1].shape == "9 escaping runs"  # the Post-LN arms that escape
  assert found["post_starves_first"].effects[0].mean == pytest.approx(1000 - 250)  # plateau step - starved step


def test_one_seed_the_other_way_is_not_reproduced():
  trials = _replaced(textbook(), trial("Post-LN", 5, plateau=0.3, **{k: v for k, v in POST_STARVED.items()}))
  found = verdicts(trials)
  assert found["post_collapses"].verdict == verdict.NOT_REPRODUCED
  assert found["post_collapses"].would_change == "2 of 3 seeds hold it: every seed"
  for claim in MECHANISMS:  # a mechanism of a collapse that did not happen in every seed is not tested
    assert found[claim].verdict == verdict.NOT_TESTABLE, claim


def test_the_margin_decides_a_plateau_near_its_edge():
  trials = [trial("Post-LN", s, plateau=0.07) for s in range(3)]
  assert verdicts(trials)["post_collapses"].verdict == verdict.NOT_REPRODUCED
  assert verdicts(trials, PROTOCOL.scaled("collapse_margin", 2.0))["post_collapses"].verdict == verdict.REPRODUCED


def test_an_unprobed_grid_is_not_testable_for_the_mechanisms():
  trials = textbook()
  for t in trials:
    t.probes = {}
  found = verdicts(trials)
  assert found["post_collapses"].verdict == verdict.REPRODUCED
  assert all(found[k].verdict == verdict.NOT_TESTABLE for k in (*MECHANISMS, "pre_gradient_kept", "no_clones_pre"))


def test_the_accounting_telescopes_into_norms_and_branches():
  found = collapse.accounting(trial("Post-LN", 0, ratios=(1.0, 1e-3)))
  assert list(found.steps) == STEPS
  assert found.measured == pytest.approx([0] + [-3] * 5)
  assert found.norms == pytest.approx([6 * math.log10(0.5)] * 6)
  assert found.branches == pytest.approx(found.measured - found.norms)
  assert collapse.accounting(trial("Pre-LN", 0)) is None  # no norm on Pre-LN's residual path


def test_a_missing_seed_makes_every_claim_on_its_arm_not_testable():
  trials = [t for t in textbook(range(3)) if t.name != "Post-LN,1"]
  found = verdicts(trials)
  for claim in ("post_collapses", *MECHANISMS):
    assert found[claim].verdict == verdict.NOT_TESTABLE, claim
    assert found[claim].would_change == "every seed filed: missing Post-LN seed 1"
  assert found["no_clones_pre"].verdict == verdict.REPRODUCED  # Pre-LN's seeds are all there


def test_clones_need_both_cosines_and_the_factor_must_fall_by_the_margin():
  trials = textbook()
  trials = _replaced(trials, trial("Post-LN", 3, top=(0.999, 0.98), **POST_STARVED))  # raw cosine alone: no clone
  trials = _replaced(trials, trial("Post-LN", 4, factors=(0.8, 0.77), **POST_STARVED))  # fell, by < min_factor_fall
  found = verdicts(trials)
  assert found["post_clones_at_init"].verdict == found["post_factor_falls"].verdict == verdict.NOT_REPRODUCED
  assert found["post_clones_at_init"].effects[0].low == pytest.approx(0.98)


def test_the_order_of_events_says_when_the_probes_cannot_tell():
  late = [0, *collapse.READ_STEPS]  # below the threshold for good from 500; the loss on its plateau from 400
  starved = trial("Post-LN", 3, steps=late, plateau_from=400, ratios=(1.0, 1e-6))
  assert verdicts(_replaced(textbook(), starved))["post_starves_first"].verdict == verdict.NOT_TESTABLE
  order = collapse.order_of_events(starved, PROTOCOL)
  assert (order.last_unstarved, order.starved, order.plateau, order.outcome) == (0, 500, 400, collapse.UNRESOLVED)
  after = trial("Post-LN", 3, steps=[0, 450, *collapse.READ_STEPS], ratios=(1.0, 0.5, 1e-6), plateau_from=400)
  assert collapse.order_of_events(after, PROTOCOL).outcome == collapse.PLATEAU_FIRST
  assert verdicts(_replaced(textbook(), after))["post_starves_first"].verdict == verdict.NOT_REPRODUCED
  # starved for good from the very probe at which the loss reached its plateau: not before it
  same = trial("Post-LN", 3, steps=[0, 250, *collapse.READ_STEPS], ratios=(1.0, 1.0, 1e-6), plateau_from=500)
  order = collapse.order_of_events(same, PROTOCOL)
  assert (order.last_unstarved, order.starved, order.plateau, order.outcome) == (250, 500, 500, collapse.UNRESOLVED)


def test_the_control_that_collapses_says_the_average_not_the_size():
  control = COLLAPSE_GRID.MATCHED_CONTROL
  trials = [t for t in textbook() if results.arm_of(ARMS, t.overrides) != control]
  trials += [trial(control, s) for s in range(3, 6)]  # collapses as Post-LN does
  found = verdicts(trials)["centered_escapes_not_by_size"]
  assert found.verdict == verdict.REPRODUCED
  assert [e.mean for e in found.effects] == pytest.approx([-1.5, 0.02])
  escaping = verdicts(textbook())["centered_escapes_not_by_size"]
  assert escaping.verdict == verdict.NOT_REPRODUCED and "the matched control escapes too" in escaping.would_change
  # the control collapsing is not enough: the centered arm must escape in every seed too
  stuck = verdicts(_replaced(trials, trial("Post-LN, centered", 5)))["centered_escapes_not_by_size"]
  assert stuck.verdict == verdict.NOT_REPRODUCED and "does not escape in every seed" in stuck.would_change
  # nor is the control collapsing in two seeds of three, its third escaping
  mixed = verdicts(_replaced(trials, trial(control, 5, **ESCAPING)))["centered_escapes_not_by_size"]
  assert mixed.verdict == verdict.NOT_REPRODUCED and "neither collapses nor escapes in every seed" in mixed.would_change


# A claim about one escaping arm, each with the one seed edit that makes it false: the arm
# collapsing, its tokens clones at init, its gradient starved at one read step, its factor falling.
ONE_SEED_AGAINST = [(c.id, c.arm, {**ESCAPING, "plateau": 0.02}) for c in PROTOCOL.claims if c.metric == "escapes"] + \
    [(c.id, c.arm, {**ESCAPING, "top": (0.995, 0.995)}) for c in PROTOCOL.claims if c.metric == "no_clones"] + [
    ("pre_gradient_kept", "Pre-LN", {**ESCAPING, "ratios": (2, 0.5, 0.5, 1e-5, 0.5)}),  # starved at step 1000 only
    ("centered_factor_stays", "Post-LN, centered", {**ESCAPING, "factors": (0.9, 0.8)})]


@pytest.mark.parametrize("claim_id,arm,edit", ONE_SEED_AGAINST, ids=[c for c, *_ in ONE_SEED_AGAINST])
def test_one_seed_of_an_escaping_arm_that_fails_its_claim_is_not_reproduced(claim_id, arm, edit):
  assert verdicts(textbook())[claim_id].verdict == verdict.REPRODUCED
  found = verdicts(_replaced(textbook(), trial(arm, 5, **edit)))[claim_id]
  assert found.verdict == verdict.NOT_REPRODUCED and found.would_change == "2 of 3 seeds hold it: every seed"


def test_an_arm_that_adds_a_key_to_another_is_its_own():
  control = COLLAPSE_GRID.MATCHED_CONTROL
  assert results.arm_of(ARMS, {**ARMS[control], "seed": 0}) == control
  assert results.arm_of(ARMS, {**ARMS["Post-LN"], "seed": 0}) == "Post-LN"
  assert results.arm_of(ARMS, {"model.placement": "peri"}) is None


def test_an_escaping_run_that_starves_too_does_not_separate():
  trials = _replaced(textbook(), trial("Post-LN, small attention at init", 5, **{**ESCAPING, "ratios": (2, 1e-5)}))
  found = verdicts(trials)
  assert found["post_gradient_starves"].verdict == found["post_starves_first"].verdict == verdict.NOT_REPRODUCED
  assert "does not separate: 1 of the 15 escaping runs hold it too (Post-LN, small attention at init seed 5)" \
      in found["post_gradient_starves"].would_change
  assert found["post_clones_at_init"].verdict == verdict.REPRODUCED


def test_a_verdict_that_flips_within_half_to_double_a_threshold_is_marked_fragile():
  trials = textbook()  # Post-LN's factor falls by 0.1, the escaping arms' by 0.02: 0.06 ×2 flips it
  found = judge.sensitivity(PROTOCOL, lambda q: collapse.Measures(q, ARMS, trials))
  fragile = judge.fragile(PROTOCOL, found)
  assert fragile == {"post_factor_falls": ["`min_factor_fall` ×2"]}
  row = tables.verdict_table(PROTOCOL, [verdicts(trials)["post_factor_falls"]], "cpu", 3, fragile=fragile)
  assert "**reproduced** (fragile: flips at `min_factor_fall` ×2)" in row


def test_the_cpu_tier_was_declared_under_protocol_2_and_every_tier_is_judged_by_protocol_3():
  assert [COLLAPSE_GRID.declared(tier) for tier in ("cpu", "v3_cpu", "gpu", "paper")] == [2, 3, 3, 3]
  assert {COLLAPSE_GRID.protocol(tier) for tier in ("cpu", "v3_cpu", "gpu", "paper")} == {PROTOCOL}
  for tier in ("cpu", "v3_cpu", "gpu", "paper"):  # each probes at every read step
    probe = COLLAPSE_GRID.get_config(tier).probe
    probed = {*range(0, probe.early_until + 1, probe.early_every), *range(0, 10 ** 5, probe.every)}
    assert set(collapse.READ_STEPS) <= probed, tier


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


@pytest.mark.slow
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


def test_the_page_says_why_study_b_prints_no_false_positive_rate_or_power():
  """Its verdicts need every seed (and, for a mechanism, every escaping run): the sentence the
  section prints in place of the column says so, with the protocol's own number of seeds."""
  line = study_b.no_operating_line(PROTOCOL)
  assert f"every one of the {PROTOCOL.seeds} seeds of its arm" in line and "every escaping run" in line
