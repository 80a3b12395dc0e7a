"""`nplace report` as a user runs it: on a study-A grid trained for real (one configuration
diverges at a huge learning rate), on plain run directories, and on hand-written probe
event files for the growth and study-B sections."""
import json
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import tensorboardX

from nplace.commands import main, train as train_command
from nplace.config import experiment
from nplace.protocol import Claim
from nplace.studies import fits, outcomes, verdict
from nplace.studies import runs
from nplace.studies.report import answers, page as results_page
from nplace.train.summary import Summary

ROOT = pathlib.Path(__file__).resolve().parent.parent
NPLACE = pathlib.Path(sys.executable).parent / "nplace"
PNG = b"\x89PNG\r\n\x1a\n"
GRID_FILE = """
from nplace.config import experiment
from nplace.protocol import COMPARISON, THREE_WAY, Claim, Grid, Protocol, Threshold

ARMS = {"Pre-LN": {"model.placement": "pre"}, "Peri-LN": {"model.placement": "peri"}}
SEED_SETTING = "a test"


def protocol(arg="test"):
  return Protocol("test grid", 1, COMPARISON, "Pre-LN at a huge learning rate.", 2, 100, 0, 0.95,
                  (Threshold("min_effect", 0.05, "nats"), Threshold("did_not_learn", 0.1, "fraction"),
                   Threshold("spike_rebound", 1.0, "nats"), Threshold("failure_p", 0.025, "p")),
                  (Claim("pre_diverges_more", "Pre-LN diverges more often", "divergences",
                         better="Peri-LN", worse="Pre-LN"),), verdicts=THREE_WAY)


def get_config(arg="test"):
  c = experiment("tiny", "pre")  # smaller still: 4 steps of a 2-layer, d=32 model
  c.model.update(n_layer=2, d_model=32)
  c.data.update(seq_len=16, synthetic_tokens=65536)
  c.train.update(steps=4, batch_size=4, log_every=1, eval_every=4, eval_batches=1)
  c.optim.warmup_steps = 1
  c.checkpoint.every = 4
  return c


def get_sweep(arg="test"):  # Pre-LN at a learning rate that overflows in two steps; Peri-LN as preset
  return [{"model.placement": "pre", "optim.lr": 1e30, "seed": s} for s in (0, 1)] + [
      {"model.placement": "peri", "seed": s} for s in (0, 1)]


GRID = Grid(get_config, get_sweep, SEED_SETTING, ARMS, judged_by=lambda arg: (protocol(arg),))
"""


def nplace(*args, env):
  done = subprocess.run([NPLACE, *map(str, args)], env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout + done.stderr
  return done


@pytest.fixture(scope="module")
def grid(tmp_path_factory, env):
  """GRID_FILE's four trials trained for real by `nplace sweep` (a study-A grid: the file is
  named stability.py)."""
  root = tmp_path_factory.mktemp("grid")
  (root / "stability.py").write_text(GRID_FILE)
  nplace("sweep", "--config", f"{root / 'stability.py'}:test", "--workdir", root / "sweep", env=env)
  return root / "sweep"


def report(*args, capsys):
  """`nplace report ARGS` in this process (nplace.commands.main is the console script); its stdout."""
  assert main.main(["report", *map(str, args)]) == 0
  return capsys.readouterr().out


def table(text: str, header: str) -> list[dict]:
  """The rows of the markdown table whose header line starts with `header`."""
  lines = text.splitlines()
  start = next(i for i, line in enumerate(lines) if line.startswith(header))
  header = [c.strip() for c in lines[start].strip("|").split("|")]
  rows = []
  for line in lines[start + 2:]:
    if not line.startswith("|"):
      break
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
    rows.append(dict(zip(header, cells)))
  return rows


def figures(out: pathlib.Path, text: str) -> list[pathlib.Path]:
  """The PNG files report.md shows; each must exist and be a PNG."""
  paths = [out / p for p in re.findall(r"!\[[^\]]*\]\((figures/[^)]+)\)", text)]
  for path in paths:
    assert path.read_bytes()[:8] == PNG, path
  return paths


def trials(root) -> list[dict]:
  """sweep.json's trials, each with its summary read from the trial's own summary.json."""
  out = json.loads((root / "sweep.json").read_text())["trials"]
  for t in out:
    t["summary"] = Summary.read(root / t["workdir"] / "summary.json")
  return out


@pytest.mark.slow
def test_results_file_a_sweep_and_regenerate_the_readme_from_them_alone(grid, tmp_path, env):
  results_dir = tmp_path / "results"
  results_dir.mkdir()
  done = nplace("report", "--results", results_dir, grid, env=env)
  assert "filed 4 trials" in done.stdout
  filed = [json.loads(line) for line in (results_dir / "stability_test" / "trials.jsonl").read_text().splitlines()]
  assert sorted(t["overrides"]["model.placement"] for t in filed) == ["peri", "peri", "pre", "pre"]
  assert all(t["loss"] and t["warmup"] == 1 and t["vocab_size"] == 512 for t in filed if t["summary"]["status"] != "diverged")
  text = (results_dir / "README.md").read_text()
  assert "test grid, protocol v1" in text and figures(results_dir, text)
  assert re.search(r"4 trials of \d+ steps \(2 stopped early as they diverged, at step \d+\)\.", text)
  # Pre-LN 2 of 2 diverged, Peri-LN 0, but at no common rate: the exact test within rates has no stratum
  claim = table(text, "| claim | tier |")[0]
  assert claim["verdict"] == "**not testable at this tier**" and claim["what would change it"] == (
      "runs of both arms at a common rate")
  assert [(r["arm"], r["lr"], r["diverged"], r["learned"]) for r in table(text, "| shape | arm | lr |")] == [
      ("Pre-LN", "1e+30", "2", "0"), ("Peri-LN", "-", "0", "0")]
  results_page.write(results_dir)  # again, from the filed results alone: the same page
  assert (results_dir / "README.md").read_text() == text


@pytest.mark.slow
def test_a_grid_filed_in_parts_from_two_sweep_directories_keeps_both_parts(grid, tmp_path, capsys):
  results_dir = tmp_path / "results"
  results_dir.mkdir()
  report("--results", results_dir, grid, capsys=capsys)
  path = results_dir / "stability_test" / "trials.jsonl"
  filed = [json.loads(line) for line in path.read_text().splitlines()]
  earlier = {**filed[0], "name": "part_1_trial", "overrides": {**filed[0]["overrides"], "seed": 7}}
  path.write_text("".join(json.dumps(t) + "\n" for t in [earlier, *filed[1:]]))  # a part filed from elsewhere
  out = report("--results", results_dir, grid, capsys=capsys)
  assert "filed 4 trials" in out and "(1 new, 3 unchanged; beside 1 filed before)" in out
  names = [json.loads(line)["name"] for line in path.read_text().splitlines()]
  assert names == ["part_1_trial", *(t["name"] for t in filed[1:]), filed[0]["name"]]  # re-filed in place, new at the end
  rows = table((results_dir / "README.md").read_text(), "| shape | arm | lr |")
  assert [(r["arm"], r["diverged"]) for r in rows] == [("Pre-LN", "3"), ("Peri-LN", "0")]  # both parts judged


@pytest.mark.slow
def test_study_a_table_counts_what_the_summaries_say(grid, tmp_path, env):
  out = tmp_path / "report"
  done = nplace("report", grid, "--out", out, env=env)
  assert str(out / "report.md") in done.stdout
  text = (out / "report.md").read_text()
  assert "## Study A: stability" in text and figures(out, text)
  summaries = [(t["overrides"]["model.placement"], t["summary"]) for t in trials(grid)]
  assert sum(s.status == "diverged" for _, s in summaries) == 2  # the huge lr did it
  rows = table(text, "| placement |")
  assert [(r["placement"], r["lr"]) for r in rows] == [("pre", "1e+30"), ("peri", "-")]
  for row in rows:
    members = [s for placement, s in summaries if placement == row["placement"]]
    n = len(members)
    diverged = sum(s.status == "diverged" for s in members)
    at_frequency = sum(s.status != "diverged" and s.val_loss >= s.frequency_loss - 0.05 for s in members)
    assert row["nonfinite"] == f"{diverged}/{n}"
    assert row["frequency_loss"] == f"{at_frequency}/{n}"
    assert row["failed"] == f"{sum(bool(outcomes.failures(s)) for s in members)}/{n}"
    assert row["runs"].count("](") == n
  # each run's row links its directory, relative to the report
  for row in table(text, "| run | status |"):
    target = re.search(r"\]\(([^)]+)\)", row["run"]).group(1)
    assert (out / target / "summary.json").is_file()


@pytest.mark.slow
def test_plain_run_directories_get_a_runs_section_and_the_command_that_remakes_them(
    grid, tmp_path, capsys, monkeypatch):
  monkeypatch.chdir(ROOT)  # the commands name experiments/ from the repository root
  out = tmp_path / "report"
  peri = next(t for t in trials(grid) if t["overrides"]["model.placement"] == "peri")
  run_dir = grid / peri["workdir"]
  report(run_dir, "--out", out, capsys=capsys)
  text = (out / "report.md").read_text()
  assert "## Runs" in text and len(figures(out, text)) == 2  # train and eval loss
  command = re.search(rf"^{re.escape(run_dir.name)}: (nplace train .*)$", text, re.M).group(1)
  fv = train_command.COMMAND.parse(shlex.split(command)[2:])[0]
  as_json = lambda config: json.loads(json.dumps(config))
  assert as_json(fv.config.to_dict()) == runs.run_config(run_dir) and fv.workdir == str(run_dir)


def test_a_run_that_recovered_from_a_spike_learned_and_shows_the_spike(tmp_path, capsys):
  """Protocol 0 called this run (val loss 2.38, a 2.5-nat rebound) a `spike`; the run table
  judges it as the protocols do. A jump inside warmup (read from the saved config) is no spike.
  An unfinished run is not judged; a failed sweep trial shows its error (it showed "failed" alone)."""
  run_dir = tmp_path / "post"
  warmup = [6.0, 5.9, 5.8, 5.7, 9.0, 5.6, 5.5, 5.4, 5.3, 5.2]  # steps 1-10
  descent = list(np.linspace(4.0, 3.0, 19))  # steps 11-29
  recovery = [5.5, 4.5, *np.linspace(2.9, 2.3, 29)]  # the spike at step 30, back below 3 at 32
  writer = tensorboardX.SummaryWriter(str(run_dir))
  for step, loss in enumerate(warmup + descent + recovery, 1):
    writer.add_scalar("train/loss", loss, step)
  writer.close()
  (run_dir / "summary.json").write_text(json.dumps(Summary(
      step=60, val_loss=2.38, frequency_loss=4.48, entropy_rate=1.45, tokens_per_sec=11893.4,
      max_loss_rebound=2.5).to_dict()))
  config = experiment("tiny", "post")
  config.optim.warmup_steps = 10
  (run_dir / "checkpoints" / "60" / "config").mkdir(parents=True)
  (run_dir / "checkpoints" / "60" / "config" / "metadata").write_text(config.to_json())
  assert outcomes.failures(Summary.read(run_dir / "summary.json")) == ("spike",)  # protocol 0's verdict
  report(run_dir, "--out", tmp_path / "out", capsys=capsys)
  [row] = table((tmp_path / "out" / "report.md").read_text(), "| run | status |")
  assert row["outcome"] == "learned"
  assert row["loss spikes"] == "1 (max 2.5 nats, 1 recovered)"
  assert row["tok/s"] == "11,893"
  (run_dir / "summary.json").write_text(Summary(step=30, val_loss=3.0, status="preempted").to_json())
  report(run_dir, "--out", tmp_path / "out", capsys=capsys)
  [row] = table((tmp_path / "out" / "report.md").read_text(), "| run | status |")
  assert (row["status"], row["outcome"]) == ("preempted", "-")  # unfinished: not judged
  (run_dir / "summary.json").unlink()  # a sweep's trial that failed before it wrote one
  (tmp_path / "sweep.json").write_text(json.dumps({"config": "experiments/tiny.py:post", "overrides": [], "trials": [
      {"name": "run", "overrides": {}, "workdir": "run", "command": "nplace train --workdir run",
       "status": "failed", "error": "ConfigError: model.n_head=3: must divide model.d_model=32", "summary": None}]}))
  report(tmp_path, "--out", tmp_path / "out", capsys=capsys)
  [row] = table((tmp_path / "out" / "report.md").read_text(), "| run | status |")
  assert (row["status"], row["outcome"]) == ("failed: ConfigError: model.n_head=3: must divide model.d_model=32", "-")


def test_a_folders_other_runs_are_named_and_a_report_replaces_only_its_own(tmp_path, capsys):
  """A folder's unfinished runs and its sweeps left the table unsaid; `--out` replaced a user's
  report.md and kept an earlier report's figures beside the new ones."""
  folder, out = tmp_path / "runs", tmp_path / "out"
  for name in ("done", "stopped"):
    writer = tensorboardX.SummaryWriter(str(folder / name))
    writer.add_scalar("train/loss", 3.0, 1)
    writer.close()
  (folder / "done" / "summary.json").write_text(Summary(step=1, val_loss=3.0).to_json())
  (folder / "grid").mkdir()
  (folder / "grid" / "sweep.json").write_text('{"config": null, "trials": []}')
  (folder / "empty").mkdir()
  (folder / "nested" / "run").mkdir(parents=True)
  (folder / "nested" / "run" / "summary.json").write_text(Summary(step=1, val_loss=3.0).to_json())
  (out / "figures").mkdir(parents=True)
  (out / "figures" / "9_runs_train_loss.png").write_bytes(b"an earlier report's")
  assert report(folder, "--out", out, capsys=capsys) == (f"report: {out / 'report.md'}\n  left out {folder / 'grid'}: a sweep: name its "
                                     f"directory\n  left out {folder / 'nested'}: a folder of runs: name its directory"
                                     f"\n  left out {folder / 'stopped'}: a run without summary.json: still "
                                     "training, or stopped; rerun it to finish\n")
  assert ("Not in this table: [grid](../runs/grid) (a sweep: name its directory); [nested](../runs/nested) (a folder "
          "of runs: name its directory); [stopped](../runs/stopped) (a run without summary.json: still training, or "
          "stopped; rerun it to finish).") in (out / "report.md").read_text()
  assert [p.name for p in (out / "figures").iterdir()] == ["0_runs_train_loss.png"]  # no eval/loss logged
  (out / "report.md").write_text("my notes\n")
  for argv in ([folder, "--out", out], [folder, f"{folder}/", "--out", tmp_path / "other"]):
    assert main.main(["report", *map(str, argv)]) == 2
  assert capsys.readouterr().err == (f"nplace report: {out}: holds a report.md that nplace report did not write; "
                                     f"refusing to replace it\nnplace report: '{folder}' and '{folder}/': the same "
                                     "directory, named twice\n")
  assert (out / "report.md").read_text() == "my notes\n"


@pytest.mark.parametrize("args", [("missing", "--out", "o"), ("empty", "--out", "o"), ("torn", "--out", "o"),
                                  ("empty",), ("--out", "o")])
def test_bad_input_is_one_line_exit_2(args, tmp_path, capsys, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "empty").mkdir()
  (tmp_path / "torn").mkdir()
  (tmp_path / "torn" / "sweep.json").write_text('{"config": "experiments/stability.py:cpu", "tri')
  assert main.main(["report", *args]) == 2
  err = capsys.readouterr().err
  assert err.startswith("nplace report: ") and len(err.strip().splitlines()) == 1, err


def blocks(values_RL):
  """A per-layer probe over steps: (tag suffixes layer_001..L, values)."""
  values_RL = np.asarray(values_RL, np.float64)
  return [f"layer_{l:03d}" for l in range(1, values_RL.shape[1] + 1)], values_RL


def sublayers(values_R2L):
  """A per-sublayer probe (norm factors): attn_001, mlp_001, attn_002, ..."""
  values_R2L = np.asarray(values_R2L, np.float64)
  return [f"{b}_{l:03d}" for l in range(1, values_R2L.shape[1] // 2 + 1) for b in ("attn", "mlp")], values_R2L


def write_probes(run_dir, steps, probes: dict):
  """Event files as training writes them: train/loss and `probe/<name>/<suffix>` scalars
  for probes {name: (suffixes, [R, Y] values)}."""
  writer = tensorboardX.SummaryWriter(str(run_dir))
  for i, step in enumerate(steps):
    writer.add_scalar("train/loss", 5.0 - i, step)
    for name, (labels, values) in probes.items():
      for label, value in zip(labels, values[i]):
        writer.add_scalar(f"probe/{name}/{label}", float(value), step)
  writer.close()


def write_sweep(root, config, trials: dict):
  """sweep.json for finished trials: name -> (overrides, summary)."""
  (root / "sweep.json").write_text(json.dumps({"config": config, "overrides": [], "trials": [
      {"name": name, "overrides": o, "workdir": name, "command": f"nplace train --workdir {name}",
       "status": s["status"], "error": None, "summary": s} for name, (o, s) in trials.items()]}))


SUMMARY = Summary(step=20, frequency_loss=4.48, entropy_rate=1.45).to_dict()
LAYERS = np.arange(1, 9)


def test_growth_section_fits_linear_and_exponential_profiles(tmp_path, capsys):
  profiles = {"peri": 1.0 + 0.5 * LAYERS, "pre": 0.1 * np.exp(0.6 * LAYERS)}
  for name, profile in profiles.items():
    write_probes(tmp_path / name, [0, 20], {q: blocks([profile, 2 * profile])
                                           for q in ("mean_abs", "var_entry", "var_data")})
  write_sweep(tmp_path, "experiments/growth.py:v3_cpu",
              {name: ({"model.placement": name}, SUMMARY | {"val_loss": 3.0}) for name in profiles})
  report(tmp_path, "--out", tmp_path / "out", capsys=capsys)
  text = (tmp_path / "out" / "report.md").read_text()
  assert len(figures(tmp_path / "out", text)) == 6  # 3 quantities x (first, last)
  rows = table(text, "| run | quantity |")
  assert len(rows) == 6
  for row in rows:
    want = "linear" if row["run"].startswith("[peri]") else "exponential"
    assert row["better (first)"] == row["better (last)"] == want, row


def test_study_b_section_verdicts_and_gradient_ratio(tmp_path, capsys):
  steps = [0, 10, 20]
  grad_h = {"post": [[1.0, 1.0], [1e-2, 1.0], [1e-4, 2.0]], "post_centered": [[1.0, 1.0]] * 3}
  for name, g in grad_h.items():
    factors = np.full((3, 4), 0.9)
    factors[:, 0] = 50.0  # the first site (it reads the embedding) is left out of the summary
    factors[2, 1:] = [0.5, 0.8, 1.1]
    write_probes(tmp_path / name, steps, {"grad_h": blocks(g), "similarity": blocks(np.full((3, 2), 0.5)),
                                          "norm_backward": sublayers(factors)})
  write_sweep(tmp_path, "experiments/collapse.py:cpu", {
      "post": ({"model.placement": "post"}, SUMMARY | {"val_loss": 4.5}),
      "post_centered": ({"model.attention": "centered"}, SUMMARY | {"val_loss": 3.0})})
  report(tmp_path, "--out", tmp_path / "out", capsys=capsys)
  text = (tmp_path / "out" / "report.md").read_text()
  assert len(figures(tmp_path / "out", text)) == 2 + 2 * 2  # loss, ratio, 2 heatmaps per run
  verdicts_b = table(text, "| run | overrides | status |")
  assert [r["collapsed"] for r in verdicts_b] == ["yes", "no"]
  assert [r["collapsed on the plateau"] for r in verdicts_b] == ["no", "no"]  # train loss 5, 4, 3: falling
  ratio = {r["run"].split("]")[0][1:]: r for r in table(text, "| run | overrides | ratio")}
  assert float(ratio["post"]["ratio, last probe"]) == pytest.approx(5e-5)
  assert float(ratio["post_centered"]["ratio, last probe"]) == 1.0
  backward = table(text, "| run | probe | steps |")[0]
  assert (backward["steps"], backward["mean factor"], backward["min factor"]) == (
      "0 → 20", "0.900 → 0.800", "0.900 → 0.500")
  assert backward["product"] == "0.73 → 0.44"


def test_fits_prefer_the_shape_the_data_has():
  x = np.arange(1.0, 13.0)
  assert fits.linear(x, 3 + 2 * x) == pytest.approx(1.0)
  assert fits.exponential(x, np.exp(0.5 * x)) == pytest.approx(1.0)
  assert fits.better(fits.linear(x, 3 + 2 * x), fits.exponential(x, 3 + 2 * x)) == "linear"
  assert fits.better(fits.linear(x, np.exp(0.5 * x)), fits.exponential(x, np.exp(0.5 * x))) == "exponential"
  assert np.isnan(fits.exponential(x, x - 5))  # not all positive: no exponential fit
  # the exponential's R² is on y itself, so it compares with the line's: against numpy on a line
  rate, log_scale = np.polyfit(x, np.log(3 + 2 * x), 1)
  residual = 3 + 2 * x - np.exp(log_scale + rate * x)
  want = 1 - np.sum(residual ** 2) / np.sum((2 * x - np.mean(2 * x)) ** 2)
  assert fits.exponential_fit(x, 3 + 2 * x) == pytest.approx((rate, want), rel=1e-12)
  assert fits.better(np.nan, 0.5) == "-"


def test_results_refuse_what_is_not_a_sweep_in_one_line(tmp_path, capsys):
  (tmp_path / "run").mkdir()
  (tmp_path / "run" / "summary.json").write_text(json.dumps(SUMMARY))
  (tmp_path / "results").mkdir()
  assert main.main(["report", "--results", str(tmp_path / "results"), str(tmp_path / "run")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "not a sweep" in err and str(tmp_path / "run") in err, err
  assert list((tmp_path / "results").iterdir()) == []  # nothing filed, no page written
  assert main.main(["report", "--results", str(tmp_path / "nowhere")]) == 2
  assert "--results" in capsys.readouterr().err


def snapshot(root: pathlib.Path) -> dict:
  """Every file and folder under `root` (its path relative to `root`) -> its bytes (None: a folder)."""
  return {p.relative_to(root): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def refused(capsys, *args) -> str:
  """`nplace report ARGS` fails in one line with exit code 2; the line."""
  assert main.main(["report", *map(str, args)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("nplace report: ") and err.count("\n") == 1, err
  return err


def test_a_failed_regeneration_leaves_every_file_under_results_as_it_was(tmp_path, capsys):
  copy = tmp_path / "results"
  shutil.copytree(ROOT / "results", copy)
  trials_file = copy / "peri_embedding_cpu" / "trials.jsonl"
  trials_file.write_text(trials_file.read_text()[:-400])  # a torn last line
  before = snapshot(copy)
  assert "trials.jsonl:" in refused(capsys, "--results", copy)
  assert snapshot(copy) == before


@pytest.mark.slow
def test_a_filing_whose_page_fails_says_nothing_was_filed(grid, tmp_path, capsys):
  """Its "filed 4 trials" line was printed before the page failed and the filing was undone."""
  results_dir = tmp_path / "results"
  shutil.copytree(ROOT / "results" / "peri_embedding_cpu", results_dir / "peri_embedding_cpu")
  trials_file = results_dir / "peri_embedding_cpu" / "trials.jsonl"
  trials_file.write_text(trials_file.read_text()[:-400])  # a torn last line in another grid's data
  before = snapshot(results_dir)
  assert main.main(["report", "--results", str(results_dir), str(grid)]) == 2
  out, err = capsys.readouterr()
  assert "filed " not in out and err.endswith("(nothing filed)\n") and "trials.jsonl:" in err, (out, err)
  assert snapshot(results_dir) == before


def test_a_sweep_keeps_no_trials_of_another_grid_filed_under_its_name(tmp_path):
  """results/NAME holds one grid's trials: filing a sweep of stability.py:cpu where a grid of
  another file of the same stem and ARG (so the same NAME) was filed keeps none of the other's."""
  from nplace.studies import grid as grid_lib, results
  spec = f"{ROOT / 'experiments' / 'stability.py'}:cpu"
  sweep = grid_lib.load_module(ROOT / "experiments" / "stability.py").get_sweep("cpu")[:2]
  summary = Summary(step=1000, val_loss=2.0, frequency_loss=4.48, entropy_rate=1.45).to_dict()
  record = [{"name": grid_lib.trial_name(o), "workdir": grid_lib.trial_name(o), "command": "nplace train",
             "overrides": o, "status": "completed", "summary": summary} for o in sweep]
  (tmp_path / "sweep").mkdir()
  (tmp_path / "sweep" / "sweep.json").write_text(json.dumps({"config": spec, "trials": record}))
  declared = results._declared(spec)
  other = results.Study(tmp_path / "results" / "stability_cpu", "experiments/archive/stability.py:cpu",
                        [results.Trial("lr=9,seed=0", {}, Summary(step=10), [], 0, 512)])
  filing = results.file_sweep(tmp_path / "sweep", tmp_path / "results", declared, {"stability_cpu": other})
  assert [t.name for t in filing.study.trials] == [t["name"] for t in record]
  assert (filing.added, filing.kept) == ([t["name"] for t in record], 0)


def test_results_on_an_empty_directory_is_one_line_and_writes_nothing(tmp_path, capsys):
  assert "nothing is filed here" in refused(capsys, "--results", tmp_path)
  assert list(tmp_path.iterdir()) == []


def _sweep_copy(grid, tmp_path, edit) -> pathlib.Path:
  """A copy of the grid's sweep directory, its sweep.json's trials changed by `edit(trials)`."""
  copy = tmp_path / "sweep"
  shutil.copytree(grid, copy, ignore=shutil.ignore_patterns("checkpoints", ".jax_cache"))
  record = json.loads((copy / "sweep.json").read_text())
  edit(record["trials"])
  (copy / "sweep.json").write_text(json.dumps(record))
  return copy


@pytest.mark.slow
def test_a_trial_trained_otherwise_than_its_grid_declares_is_refused(grid, tmp_path, capsys):
  results_dir = tmp_path / "results"
  results_dir.mkdir()
  report("--results", results_dir, grid, capsys=capsys)
  before = snapshot(results_dir)

  def thirty_steps(trials):  # the grid declares 4 steps
    trials[1]["command"] += " --config.train.steps=30"
  shorter = _sweep_copy(grid, tmp_path, thirty_steps)
  err = refused(capsys, "--results", results_dir, shorter)
  name = json.loads((grid / "sweep.json").read_text())["trials"][1]["name"]
  assert f"trial {name} trained train.steps=30, but its grid" in err and "declares train.steps=4" in err, err
  assert snapshot(results_dir) == before


@pytest.mark.slow
def test_a_filed_trial_is_replaced_only_with_replace_and_is_named(grid, tmp_path, capsys):
  results_dir = tmp_path / "results"
  results_dir.mkdir()
  out = report("--results", results_dir, grid, capsys=capsys)
  assert "filed 4 trials" in out and "(4 new)" in out and "wrote " in out
  assert "(4 unchanged)" in report("--results", results_dir, grid, capsys=capsys)  # filing it again changes nothing
  path = results_dir / "stability_test" / "trials.jsonl"
  filed = [json.loads(line) for line in path.read_text().splitlines()]
  filed[2]["summary"]["val_loss"] = 9.0  # another record of the same trial, filed before
  path.write_text("".join(json.dumps(t) + "\n" for t in filed))
  before = snapshot(results_dir)
  err = refused(capsys, "--results", results_dir, grid)
  assert f"1 of its trials are filed in {results_dir / 'stability_test'} with other results ({filed[2]['name']})" in err
  assert "--replace" in err and snapshot(results_dir) == before
  out = report("--results", results_dir, "--replace", grid, capsys=capsys)
  assert f"replaced 1 trials: {filed[2]['name']}\n" in out
  assert json.loads(path.read_text().splitlines()[2])["summary"]["val_loss"] != 9.0


def test_the_answers_carry_what_their_sections_say_beside_each_verdict():
  """A claim's answer keeps its section's cautions, the trials it read if they were seen before
  its version, and the other verdicts its protocol reaches on other trials; a continuation
  ("... and so") is shown where its verdict differs from the claim it continues."""
  lead = Claim("peri_higher_max_lr", "Peri-LN learns at higher rates", "max_stable_lr", "Peri-LN", "Pre-LN")
  more = Claim("peri_higher_max_lr_no_wd", "... and so without weight decay", "max_stable_lr", "Peri-LN", "Pre-LN")

  def judged(arg, own, verdicts, marks=None):
    grid = SimpleNamespace(config=lambda _: SimpleNamespace(data=SimpleNamespace(source="synthetic")))
    section = SimpleNamespace(protocol=SimpleNamespace(name="stability", version=4), own_version=own, arg=arg,
                              grid=grid, scale=([171_000], 1_024_000))
    return answers.Judged(section, f"## stability, protocol v4: `{arg}`",
                          [verdict.Verdict(c, found, (), None, "") for c, found in verdicts], marks or {})

  page = [judged("v4_embed", 4, [(lead, verdict.REPRODUCED), (more, verdict.REPRODUCED)], {lead.id: ["fragile"]}),
          judged("cpu_wide", 3, [(lead, verdict.INCONCLUSIVE), (more, verdict.INCONCLUSIVE)])]
  rows = answers.rows(page)
  assert [row[0] for row in rows] == ["Peri-LN learns at higher rates"]  # "..." agrees with its claim
  assert rows[0][1] == ("**reproduced** (fragile); **inconclusive** on `cpu_wide` (on protocol 3's trials, seen "
                        "before this version) ([section](#stability-protocol-v4-cpu_wide))")
  page[0].verdicts[1] = verdict.Verdict(more, verdict.INCONCLUSIVE, (), None, "")
  assert [row[0] for row in answers.rows(page)] == ["Peri-LN learns at higher rates", "... and so without weight decay"]
  best = Claim("peri_matches_best", "Peri-LN matches Pre-LN at its best rate", "final_loss", "Peri-LN", "Pre-LN")
  apart = [judged("v4_embed", 4, [(lead, verdict.REPRODUCED), (more, verdict.REPRODUCED)]),
           judged("cpu_wide", 3, [(best, verdict.REPRODUCED), (lead, verdict.INCONCLUSIVE), (more, verdict.REPRODUCED)])]
  assert [row[0] for row in answers.rows(apart)] == [  # a bare "..." read as continuing the row above
      "Peri-LN learns at higher rates",
      "Peri-LN matches Pre-LN at its best rate (on protocol 3's trials, seen before this version)",
      "Peri-LN learns at higher rates ... and so without weight decay (on protocol 3's trials, seen before this "
      "version)"]
  edge = Claim("pre_fails_more_at_edge", "At Pre-LN's edge rate Pre-LN fails more", "failed", "Pre-LN", "Peri-LN")
  page[0].verdicts.append(verdict.Verdict(edge, verdict.CONTRADICTED, (), None, ""))
  saying = answers.takeaway(page)
  assert ("Peri-LN learns at higher rates: **yes** (fragile), but **not shown** on `cpu_wide` (on protocol 3's "
          "trials, seen before this version). At Pre-LN's edge rate Pre-LN fails more: **no**.") in saying
