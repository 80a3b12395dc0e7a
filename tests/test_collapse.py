"""Study B's measures and claims, judged on constructed trials whose answers are known."""
import math

import pytest

from nplace.studies import collapse, protocol as p
from nplace.studies.results import Trial
from nplace.train.summary import Summary

FREQ, ENTROPY, DEPTH = 4.5, 1.5, 4
ARMS = {"Post": {"model.placement": "post"}, "Pre": {"model.placement": "pre"}}
PROTOCOL = p.Protocol("collapse", 1, "", 3, 0, 0, 0.95, (
    p.Threshold("collapse_margin", 0.05, ""), p.Threshold("min_similarity_rise", 0.1, ""),
    p.Threshold("max_gradient_ratio", 0.01, "")), (
    p.Claim("collapses", "Post collapses", "collapses", "Post", "Post"),
    p.Claim("escapes", "Pre escapes", "escapes", "Pre", "Pre"),
    p.Claim("clones", "Post's similarity rises", "similarity_rises", "Post", "Post"),
    p.Claim("clones_centered", "... centered", "similarity_centered_rises", "Post", "Post"),
    p.Claim("starves", "Post starves", "gradient_starves", "Post", "Post"),
    p.Claim("kept", "Pre keeps it", "gradient_kept", "Pre", "Pre"),
    p.Claim("backward", "Post's factor < 1", "backward_below_one", "Post", "Post")))
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
  return {v.claim.id: v for v in p.judge(protocol, collapse.Measures(protocol, ARMS, trials))}


def textbook():
  return ([trial("Post", s, 0.02, 0.9, [0.5, 1e-3, 1e-4], [0.8, 0.7, 0.6]) for s in range(3)]
          + [trial("Pre", s, -1.5, 0.4, [0.9, 0.5, 0.3], [1.0, 1.1, 1.2]) for s in range(3)])


def test_a_textbook_collapse_reproduces_every_claim_with_its_seed_values():
  found = verdicts(textbook())
  assert {k: v.verdict for k, v in found.items()} == {k: p.REPRODUCED for k in found}
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
  assert {k for k, v in found.items() if v.verdict == p.NOT_REPRODUCED} == {"collapses", "starves", "backward"}
  assert found["collapses"].would_change == "2 of 3 seeds hold it: every seed"


def test_the_margin_decides_a_plateau_near_its_edge():
  trials = [trial("Post", s, 0.07, 0.9, [1e-3] * 3, [0.5] * 3) for s in range(3)]
  assert verdicts(trials)["collapses"].verdict == p.NOT_REPRODUCED
  assert verdicts(trials, PROTOCOL.scaled("collapse_margin", 2.0))["collapses"].verdict == p.REPRODUCED


def test_an_unprobed_arm_is_not_testable_for_the_mechanisms():
  trials = textbook()
  for t in trials:
    t.probes = {}
  found = verdicts(trials)
  assert found["collapses"].verdict == p.REPRODUCED
  assert all(found[k].verdict == p.NOT_TESTABLE for k in ("clones", "starves", "kept", "backward"))
  assert math.isnan(collapse.similarity_rise(trials[0]))
