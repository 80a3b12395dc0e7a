"""The demo's closing table, including runs that diverged (no val loss)."""
from nplace import demo


def test_table_rows_and_missing_values():
  rows = demo.table({
      "post": {"status": "diverged", "val_loss": None, "frequency_loss": 4.4772,
               "entropy_rate": None, "tokens_per_sec": None},
      "peri": {"status": "completed", "val_loss": 2.12345, "frequency_loss": 4.4772,
               "entropy_rate": 1.4519, "tokens_per_sec": 5018.8},
  }).splitlines()
  assert rows[0].split() == ["run", "status", "val", "loss", "freq", "loss", "entropy", "rate", "tok/s"]
  assert rows[1].split() == ["post", "diverged", "-", "4.4772", "-", "-"]
  assert rows[2].split() == ["peri", "completed", "2.1235", "4.4772", "1.4519", "5019"]


def test_demo_trains_every_placement_and_dt():
  assert {placement for placement, _ in demo.RUNS.values()} == {"post", "pre", "peri"}
  assert ("peri", 0.1) in demo.RUNS.values()
