"""Rule version 4, the range test (nplace/studies/lab/range_test.py): its prediction on hand-written
loss tables, its losses against the train loop's full run bit for bit, and the configurations it
reads from a grid."""
import math
import types

import numpy as np
import pytest

from nplace.config import experiment
from nplace.logs import events
from nplace.studies import grid
from nplace.studies.lab import range_test
from nplace.train import loop

CAP, WARMUP, RISE = 6.0, 5, 1.0  # ln V of the hand-written tables, warmup, blow_up_rise


def curve(level, spike=False, nan_at=None, stop_at=None):
  """A run's loss at steps 1..RANGE_STEPS: from CAP down to `level` by step 50, flat after;
  `spike`: 1.5 nats up at steps 70-72 (a blow-up it recovers from); `nan_at`: not finite there;
  `stop_at`: its last step (the train loop stopped it)."""
  loss = [(s, CAP - (CAP - level) * min(1.0, s / 50)) for s in range(1, range_test.RANGE_STEPS + 1)]
  loss = [(s, v + 1.5 if spike and 70 <= s <= 72 else math.nan if s == nan_at else v) for s, v in loss]
  return [(s, v) for s, v in loss if stop_at is None or s <= stop_at]


def predicted(**curves_by_exponent) -> float:
  """The predicted rate of a table {"e_2": curve, ...} (rate 10^-2 ...), as a power of 10."""
  losses = {10 ** -float(name[2:].replace("_", ".")): loss for name, loss in curves_by_exponent.items()}
  return round(math.log10(range_test.predict(losses, CAP, WARMUP, RISE)["predicted_max_lr"]), 6)


# best drop 4 (L = 2 at 1e-2): a rate qualifies at L <= 4, half of it
CLEAN = dict(e_3=curve(3.0), e_2=curve(2.0), e_1=curve(3.9), e_0=curve(5.5))


@pytest.mark.parametrize("table,want", [
    (CLEAN, -1),  # the largest rate within half the best drop
    (CLEAN | dict(e_1=curve(3.9, spike=True)), -2),  # a blow-up: not stable, whatever its L
    (CLEAN | dict(e_1=curve(4.5)), -2),  # a stall: short of half the best drop
    (CLEAN | dict(e_1=curve(3.9, nan_at=95)), -2),  # a NaN: reads ln V
    (CLEAN | dict(e_1=curve(3.9, stop_at=60)), -2),  # stopped by the loop: reads ln V
    (CLEAN | dict(e_1=curve(4.0)), -1),  # exactly half the best drop qualifies
    (CLEAN | dict(e_1=curve(2.0), e_0=curve(2.0)), 0),  # a tie in the best drop: the larger rate
    (dict(e_3=curve(5.5), e_2=curve(2.0, spike=True), e_1=curve(2.0, nan_at=80)), -3.5),  # none qualifies
    (dict(e_3=curve(CAP), e_2=curve(6.5)), -3.5),  # none learned (capped at ln V: a drop of 0 never qualifies)
])
def test_the_prediction_on_hand_written_loss_tables(table, want):
  assert predicted(**table) == want


def test_the_card_reads_every_rate_capped_at_ln_v():
  card = range_test.predict({1e-2: curve(2.0), 1e-1: curve(6.5), 1.0: curve(3.0, spike=True),
                             10.0: curve(2.0, nan_at=3)}, CAP, WARMUP, RISE)
  assert card["score"] == pytest.approx(2.0) and card["predicted_max_lr"] == 1e-2
  assert [(r["lr"], r["loss"], r["finite"], r["blew_up"]) for r in card["range_test"]] == [
      (1e-2, pytest.approx(2.0), True, False), (1e-1, CAP, True, False), (1.0, pytest.approx(3.0), True, True),
      (10.0, CAP, False, False)]  # a NaN in warmup is not finite, but no blow-up (outcomes.blew_up reads after warmup)
  assert card["prediction"] == ("predicted max stable lr 1.0e-02 (range test: L after 100 steps at lr 1.0e-02 2.00, "
                                "1.0e-01 6.00, 1.0e+00 3.00!, 1.0e+01 nan; ! blew up)")


def tiny(lr, cache):
  """experiments/tiny.py's model at 2 x 32 on 8 x 16 tokens, 12 steps (a 4-step warmup, then the
  cosine): the range test's config at `lr`."""
  c = experiment("tiny", "pre")
  c.model.update(n_layer=2, d_model=32)
  c.data.update(seq_len=16, synthetic_tokens=1 << 16, cache_dir=str(cache))
  c.train.update(steps=12, batch_size=8, log_every=1, eval_every=12, eval_batches=1)
  c.probe.every = 0
  c.optim.warmup_steps, c.checkpoint.every = 4, 12
  return grid.apply(c, {"optim.lr": lr, "seed": range_test.RANGE_SEED}, "test")


def test_the_range_test_is_the_first_steps_of_the_full_run_bit_for_bit(tmp_path):
  """Half of the 12-step schedule (past warmup: a schedule cut to 6 steps would decay sooner),
  three rates as one cell, against the train loop's 12-step runs of the same configs (`nplace
  sweep --batch 3`'s cell) read at steps 1-6; the rate that goes non-finite reads ln V."""
  configs = [tiny(lr, tmp_path / "data") for lr in (1e-3, 3e-2, 1e30)]
  got = range_test.train_losses(configs, 6)
  names = [f"lr={c.optim.lr:g}" for c in configs]
  loop.train_cell(dict(zip(names, configs)), {name: tmp_path / name for name in names})
  for name, losses in zip(names[:2], got):
    steps, values = events.read_scalars(tmp_path / name)["train/loss"]
    assert [s for s, _ in losses] == steps[:6].tolist() == list(range(1, 7))
    np.testing.assert_array_equal(np.float32([v for _, v in losses]), values[:6], err_msg=name)
  assert not np.isfinite([v for _, v in got[2]]).all()
  readings = [range_test.read(c.optim.lr, losses, math.log(512), 4, RISE, 6) for c, losses in zip(configs, got)]
  assert [r.finite for r in readings] == [True, True, False] and readings[2].loss == math.log(512)


def test_configurations_are_the_grids_trials_by_arm_and_shape_at_the_range_seed():
  trials = [{"model.n_layer": d, "model.placement": p, "optim.lr": lr, "seed": s}
            for p in ("pre", "post", "peri") for d in (2, 4) for lr in (1e-1, 1e-3) for s in (0, 1)]
  module = types.SimpleNamespace(get_sweep=lambda arg: trials)
  base = experiment("tiny", "pre")
  base.train.steps = range_test.RANGE_STEPS
  found = range_test.configurations(module, "x", base, {"Pre": {"model.placement": "pre"},
                                                        "Peri": {"model.placement": "peri"}})
  assert list(found) == [(arm, f"depth {d}") for arm in ("Pre", "Peri") for d in (2, 4)]
  for (arm, shape), configs in found.items():
    assert [c.optim.lr for c in configs] == [1e-3, 1e-1]
    assert {(c.seed, c.model.placement, f"depth {c.model.n_layer}") for c in configs} == {
        (range_test.RANGE_SEED, arm.lower(), shape)}
  base.train.steps = range_test.RANGE_STEPS - 1
  with pytest.raises(grid.GridError, match=r"trial n_layer=2,placement=pre,lr=0.1,seed=0: config error: "
                                           r"train.steps=99: the range test reads the first 100 steps"):
    range_test.configurations(module, "x", base, {"Pre": {"model.placement": "pre"}})
