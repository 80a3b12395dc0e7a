"""results/README.md is exactly what `nplace report --results results/` makes of the committed
results: nothing on the page was typed by hand."""
import dataclasses
import json
import math
import pathlib
import re
import shutil

import pytest

from nplace.studies import grid, results
from nplace.studies.report import page as results_page
from nplace.studies.runs import RunsError
from nplace.studies.results import Trial
from nplace.train.summary import Summary

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "results"


@pytest.mark.slow
def test_the_committed_results_page_is_its_regeneration(tmp_path):
  def generated(directory, names):  # what the regeneration writes
    return [n for n in names if pathlib.Path(directory) == RESULTS and n in ("README.md", "figures")]

  copy = tmp_path / "results"
  shutil.copytree(RESULTS, copy, ignore=generated)
  results_page.write(copy, repo=RESULTS.parent)
  committed = (RESULTS / "README.md").read_text()
  assert (copy / "README.md").read_text() == committed
  shown = re.findall(r"!\[[^\]]*\]\((figures/[^)]+)\)", committed)
  assert shown and sorted(shown) == sorted(f"figures/{p.name}" for p in (copy / "figures").iterdir())
  assert all((copy / figure).read_bytes() == (RESULTS / figure).read_bytes() for figure in shown)
  # every table has a row: a section with nothing to show leaves the table out
  empty = re.findall(r"\n(\|[^\n]*\|)\n\|(?:---\|)+\n(?!\|)", committed)
  assert not empty, empty



def _constructed_trial(overrides: dict, steps=1000, vocab=512, freq=4.48, rate=1.45):
  """A trial of study A's cpu grid whose fate follows its rate: Pre-LN learns below 10^-0.5 and from there
  blows up above init for good (diverged); Peri-LN learns below 1 and at 1 stays near the
  frequency loss (did not learn)."""
  lr, seed = overrides["optim.lr"], overrides["seed"]
  pre = overrides["model.placement"] == "pre"
  fails = lr >= (10 ** -0.5 if pre else 1.0)
  final = (4.4 if fails else 2.0 + 0.3 * abs(math.log10(lr) + 2)) + 0.01 * seed
  loss = [(s, 6.3 - (6.3 - final) * min(1.0, s / 500)) for s in range(0, steps + 1, 10)]
  if fails and pre:
    loss, final = [(s, 6.3 if s < 60 else 7.5) for s, _ in loss], 7.4
  val = [(s, final if fails and pre else dict(loss)[s]) for s in range(0, steps + 1, steps // 4)]
  summary = Summary(val_loss=final, frequency_loss=freq, entropy_rate=rate, step=steps)
  return Trial(grid.trial_name(overrides), overrides, summary, loss, 50, vocab, val_loss=val)


@pytest.mark.slow
def test_a_sweep_run_in_part_is_judged_at_every_horizon_and_says_what_is_missing(tmp_path):
  """Study A's cpu grid (declared under protocol 2, judged by protocol 4's re-judgement) on
  constructed trials of its first shape only: the page names the missing part, gives every claim
  `not testable` with what the finished part shows, a horizon table, each seed's maximum stable
  rate and the failure region."""
  from nplace.studies import grid
  study = tmp_path / "results" / "stability_cpu"
  study.mkdir(parents=True)
  (study / "grid.json").write_text(json.dumps({"config": "experiments/stability.py:cpu"}))
  sweep = grid.load_module(RESULTS.parent / "experiments" / "stability.py").get_sweep("cpu")
  trials = [_constructed_trial(o) for o in sweep if o["model.n_layer"] == 6]
  (study / "trials.jsonl").write_text("".join(t.to_json() + "\n" for t in trials))
  page = results_page.write(tmp_path / "results", repo=RESULTS.parent).read_text()
  assert "## stability, protocol v4: `experiments/stability.py:cpu` (protocol 2's trials, re-judged)" in page
  assert "Version 4's rules on the trials version 2 ran" in page and "Verdicts are three-way" in page
  assert "**Partly run**: not yet filed: depth 12, width 32 (175 trials)" in page
  verdict_rows = [line for line in page.splitlines() if "(`pre_diverges_more`)" in line]
  assert verdict_rows and "**not testable at this tier**" in verdict_rows[0]
  assert "finished ones: reproduced" in verdict_rows[0]  # every Pre-LN trial from 10^-0.5 diverged, no Peri-LN one
  assert "| claim | 0.25 of the run | 0.5 of the run | the end |" in page
  row = next(line for line in page.splitlines() if line.startswith("| depth 6, width 32 | Pre-LN |"))
  assert "| 0.1, 0.1, 0.1, 0.1, 0.1 |" in row and "| 10 / 0 of 35 |" in row and row.endswith("| yes |")
  peri = next(line for line in page.splitlines() if line.startswith("| depth 6, width 32 | Peri-LN |"))
  assert "| 0.32, 0.32, 0.32, 0.32, 0.32 |" in peri and "| 0 / 5 of 35 |" in peri


def test_a_widened_grid_reuses_only_the_listed_trials_it_has_not_filed_itself(tmp_path):
  """cpu_wide with one of cpu's trials filed itself: that trial once (its own record), cpu's other
  listed trials beside it, and the count says how many are cpu's."""
  module = grid.load_module(RESULTS.parent / "experiments" / "stability.py")
  found = grid.load_grid(RESULTS.parent / "experiments" / "stability.py")
  sweep = [o for o in module.get_sweep("cpu") if o["model.n_layer"] == 6][:3]
  cpu = results.Study(tmp_path / "stability_cpu", "experiments/stability.py:cpu", [_constructed_trial(o) for o in sweep])
  again = dataclasses.replace(_constructed_trial(sweep[0]), warmup=60)
  own = results.Study(tmp_path / "stability_cpu_wide", "experiments/stability.py:cpu_wide", [again])
  judged = results.with_reused(own, found, "cpu_wide", {"stability_cpu": cpu})
  assert [t.name for t in judged.trials] == [grid.trial_name(o) for o in sweep]
  assert judged.trials[0] is again and judged.reused == (("stability_cpu", 2),)


@pytest.mark.slow
def test_a_widened_grid_is_judged_on_its_own_trials_and_the_ones_it_reuses(tmp_path):
  """Study A's cpu_wide grid (declared under protocol 3) files only the rates above cpu's top; its
  page judges all 9 rates, cpu's filed trials included, and says whose they are."""
  module = grid.load_module(RESULTS.parent / "experiments" / "stability.py")
  for variant, keep in (("cpu", lambda o: True),
                        ("cpu_wide", lambda o: o["model.n_layer"] == 6 and o["optim.lr"] > 1)):
    study = tmp_path / "results" / f"stability_{variant}"
    study.mkdir(parents=True)
    (study / "grid.json").write_text(json.dumps({"config": f"experiments/stability.py:{variant}"}))
    trials = [_constructed_trial(o) for o in module.get_sweep(variant) if keep(o)]
    (study / "trials.jsonl").write_text("".join(t.to_json() + "\n" for t in trials))
  assert module.get_config("cpu_wide").to_dict() == module.get_config("cpu").to_dict()
  page = results_page.write(tmp_path / "results", repo=RESULTS.parent).read_text()
  wide = page.split("## stability, protocol v4: `experiments/stability.py:cpu_wide` (protocol 3's trials, re-judged)")[1]
  assert "400 trials" in wide and "350 trials of [stability_cpu/](stability_cpu/), the grid it widens" in wide
  assert "**Partly run**: not yet filed: depth 12, width 32 (50 trials)" in wide
  row = next(line for line in wide.splitlines() if line.startswith("| depth 6, width 32 | Peri-LN |"))
  assert "| 0 / 15 of 45 |" in row, row  # its failures at 1, 3.2 and 10, 5 seeds each
  shutil.rmtree(tmp_path / "results" / "stability_cpu")
  with pytest.raises(RunsError, match=r"stability_cpu_wide: its grid .* reuses stability_cpu's trials, which are not"):
    results_page.write(tmp_path / "results", repo=RESULTS.parent)


def _growth_trial(overrides: dict, steps=1000):
  """A growth trial of protocol 3's grid: the top layer's mean |h| grows above its init value 1 by
  0.05 e^(0.05 D) for Pre-LN and by 0.2 D for Peri-LN, seeds 2% apart; variance its square."""
  depth, seed = overrides["model.n_layer"], overrides["seed"]
  grown = (0.05 * math.exp(0.05 * depth) if overrides["model.placement"] == "pre" else 0.2 * depth) * (1 + 0.02 * seed)
  at = {s: 1 + grown * s / steps for s in range(0, steps + 1, steps // 4)}
  probes = {name: {"steps": list(at), "values": [[0.5, f(v)] for v in at.values()]}
            for name, f in (("mean_abs", lambda v: v), ("var_entry", lambda v: v * v), ("rms", lambda v: v),
                            ("max_abs", lambda v: 10 * v))}
  summary = Summary(val_loss=2.0, frequency_loss=4.48, entropy_rate=1.45, step=steps)
  return Trial(grid.trial_name(overrides), overrides, summary, [(0, 6.2), (steps, 2.0)], 50, 512, probes)


@pytest.mark.slow
def test_a_growth_grid_is_judged_per_seed_and_a_missing_seed_is_not_testable(tmp_path):
  study = tmp_path / "results" / "growth_v3_cpu"
  study.mkdir(parents=True)
  (study / "grid.json").write_text(json.dumps({"config": "experiments/growth.py:v3_cpu"}))
  sweep = grid.load_module(RESULTS.parent / "experiments" / "growth.py").get_sweep("v3_cpu")
  trials = [_growth_trial(o) for o in sweep]
  (study / "trials.jsonl").write_text("".join(t.to_json() + "\n" for t in trials))
  page = results_page.write(tmp_path / "results", repo=RESULTS.parent).read_text()
  rows = {claim: next(line for line in page.splitlines() if f"(`{claim}`)" in line)
          for claim in ("pre_exponential", "pre_dt_exponential")}
  assert all("**reproduced**" in row and row.endswith("at 0.04 |") for row in rows.values())  # e^(0.05 D): r̂ 0.05
  assert "Each claim's false-positive rate and power: the verdict table's last column." in page
  assert "| Peri-LN | 3: 0.14 ± 0.00 → 0.24 ± 0.00," in page  # (1 + 0.6 (1 + 0.02 s)) / (1 + 6), seeds 3-5
  described = page.split("### The level's exponent over depth")[1]
  assert "A description, not a claim of the seed's." in described and "lie under the same bounds" in described
  assert "| Peri-LN | 0.70 [0.69, 0.71] | 1.40 [1.38, 1.42] |" in described  # 1 + 0.2 D: ~D^0.7 over 3..48
  (study / "trials.jsonl").write_text("".join(t.to_json() + "\n" for t in trials[1:]))  # one seed of one depth gone
  page = results_page.write(tmp_path / "results", repo=RESULTS.parent).read_text()
  assert "**not testable at this tier**" in next(line for line in page.splitlines() if "(`pre_exponential`)" in line)
  assert "**Partly run**: not yet filed: Pre-LN (1 trials)" in page
  shrunk = next(t for t in trials if t.overrides["model.placement"] == "peri")
  shrunk.probes["mean_abs"]["values"].reverse()  # its stream ends below where it started
  (study / "trials.jsonl").write_text("".join(t.to_json() + "\n" for t in trials))
  page = results_page.write(tmp_path / "results", repo=RESULTS.parent).read_text()
  assert "seeds whose growth is not positive at some depth are left out: Peri-LN 1 of 3]" in page


def test_the_fixed_rates_section_says_which_rate_is_tuned_and_why_from_the_protocol():
  """The sentence beside the failure counts is built from the protocol's declared rates, which
  are the rates its claims are about; a protocol that declares none (the pilot) gets none."""
  module = grid.load_module(RESULTS.parent / "experiments" / "stability.py")
  fixed = module.PROTOCOL_V4_FIXED
  assert {claim.lr for claim in fixed.claims} == {rate.lr for rate in fixed.rates} == {module.TUNED_LR, module.EDGE_LR}
  [line] = results_page._rates_line(fixed)
  assert line.startswith("Pre-LN's tuned rate is 0.032 (10^-1.5): the middle of the rates where protocol 2's "
                         "depth-12 Pre-LN learned best. Pre-LN's edge rate is 0.25 (10^-0.6): ")
  moved = dataclasses.replace(fixed, rates=(dataclasses.replace(fixed.rates[0], lr=0.01),))
  assert results_page._rates_line(moved)[0].startswith("Pre-LN's tuned rate is 0.01 (10^-2): ")
  assert results_page._rates_line(module.PROTOCOL_V4_PILOT) == []
