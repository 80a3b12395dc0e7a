"""peri_embedding: protocol 2 re-judges protocol 1's filed trials under study A's protocol 4 rules
(three-way, Welch intervals, each claim's false-positive rate and power), on the config those
trials ran."""
import pathlib

import pytest

from nplace.protocol import THREE_WAY
from nplace.studies import grid, judge, results, three_way
from nplace.studies import measures as measures_lib
from nplace.studies import verdict as v
from nplace.studies.report import tables

ROOT = pathlib.Path(__file__).resolve().parent.parent
PERI = grid.load_module(ROOT / "experiments" / "peri_embedding.py")


@pytest.fixture(scope="module")
def filed():
  study = results.load(ROOT / "results" / "peri_embedding_cpu")
  return study, measures_lib.measures_for(PERI.PROTOCOL, study, PERI.GRID, "cpu")


def test_the_grid_is_the_config_and_the_trials_that_were_filed(filed):
  """300 steps of 16 x 64 tokens and a 15-step warmup, as every filed trial ran; the same names."""
  study, _ = filed
  config = PERI.get_config("cpu")
  assert {t.summary.step for t in study.trials} == {config.train.steps} == {300}
  assert {t.warmup for t in study.trials} == {config.optim.warmup_steps}
  assert sorted(grid.trial_name(o) for o in PERI.get_sweep("cpu")) == sorted(t.name for t in study.trials)
  assert tables.scale(PERI.GRID, "cpu", study)[1] == 300 * 16 * 64


def test_protocol_2_re_judges_protocol_1s_trials_three_way():
  assert (PERI.PROTOCOL.version, PERI.declared("cpu"), PERI.protocol("cpu")) == (2, 1, PERI.PROTOCOL)
  assert PERI.PROTOCOL.verdicts == THREE_WAY and "seen before these rules were written" in PERI.PROTOCOL.summary


def test_each_claim_is_reproduced_by_no_effect_in_at_most_5_percent_and_states_its_power(filed):
  _, measures = filed
  protocol = PERI.PROTOCOL
  verdicts = {x.claim.id: x.verdict for x in judge.judge(protocol, measures)}
  assert verdicts == dict.fromkeys(verdicts, v.REPRODUCED) and len(verdicts) == 6
  found = {c.id: three_way.operating(c, protocol, measures, seed=protocol.bootstrap_seed) for c in protocol.claims}
  assert {claim: rates[0] for claim, rates in found.items() if rates[0] > 0.05} == {}
  assert found["fixed_matches_pre"][1] > 0.95  # Pre-LN and the fixed Peri-LN agree to 0.01 nats in every seed
