"""`nplace lab` as a user runs it (the installed command on a 2-block model: scorecard, --json,
--rank on a sweep directory, bad input), and its new pure functions against references
(jax.jacfwd, closed forms)."""
import functools
import json
import math
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplace.commands import main
from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.model.block import Block
from nplace.studies import grid
from nplace.studies import judge, measures as measures_lib, ranking as ranking_lib, results
from nplace.studies.lab import checks as lab_checks, measure as lab, range_test
from nplace.studies.report import lab as report_lab
from nplace.config import experiment
from nplace.data import loader
from nplace.placements import PLACEMENTS
from nplace.probes import curvature, inputs, taps as taps_lib
from nplace.train import optim
from nplace.experiments.stability import LAB_PROTOCOL
from nplace.studies import runs as report_runs

NPLACE = pathlib.Path(sys.executable).parent / "nplace"
# 2 blocks of width 32 on 8 tokens, RMSNorm at the variance-preserving init: the branch
# outputs are far above norm_eps, so Peri-LN's invariance holds to rounding.
SMALL = ["--depth", "2", "--width", "32", "--config.data.seq_len=8", "--config.probe.batch_size=2",
         "--config.model.norm=rmsnorm", "--config.model.init=variance_preserving",
         "--config.data.synthetic_tokens=65536", "--config.train.batch_size=4"]  # the warmup's batches


@pytest.fixture(scope="module")
def scorecard(tmp_path_factory, env):
  """(stdout, --json contents) of the installed `nplace lab pre` on the small model."""
  tmp = tmp_path_factory.mktemp("lab")
  done = subprocess.run([NPLACE, "lab", "pre", *SMALL, "--json", tmp / "lab.json"], env=env,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout + done.stderr
  return done.stdout, json.loads((tmp / "lab.json").read_text())


def small_config(placement, cache_dir=None):
  """SMALL's model, its data prepared in `cache_dir`."""
  c = lab.lab_config(experiment("placements"), 2, 32, [("placement", placement), ("norm", "rmsnorm"),
                                                        ("init", "variance_preserving")])
  c.data.update(seq_len=8, synthetic_tokens=65536, cache_dir=cache_dir and str(cache_dir))
  c.probe.batch_size, c.train.batch_size = 2, 4
  return c


def test_scorecard_lists_the_placement_then_the_baselines(scorecard):
  stdout, got = scorecard
  assert list(got["cards"]) == ["pre", "post", "peri"]
  lines = stdout.splitlines()
  # each configuration announced before it is measured (nearly a minute each at depth 48)
  assert lines[:3] == [f"[{k}/3] measuring {name} at 2 x 32: probes at init, {lab_checks.WARMUP_STEPS} Adam "
                       "steps, sharpness..." for k, name in enumerate(("pre", "post", "peri"), 1)]
  assert lines[3].split() == ["pre", "post", "peri"] and lines[-1].startswith("wrote ")
  predicted = next(line for line in stdout.splitlines() if line.startswith("predicted max stable lr"))
  assert predicted.split()[4:] == [f"{card['predicted_max_lr']:.2g}" for card in got["cards"].values()]
  for name, card in got["cards"].items():
    assert f"{name}: {card['prediction']}" in stdout
    assert card["prediction"].startswith(f"predicted max stable lr {card['predicted_max_lr']:.1e} "
                                         f"(preconditioned sharpness {card['checks']['preconditioned_sharpness']:.1e} "
                                         f"after {lab_checks.WARMUP_STEPS} Adam steps")
  assert f"rule version 3: {got['rule']}" in stdout and got["rule"] == lab_checks.SHARPNESS_RULE


def test_json_holds_every_probe_and_the_checks_drawn_from_them(scorecard):
  _, got = scorecard
  assert (got["depth"], got["width"]) == (2, 32)
  for name, card in got["cards"].items():
    probes, c = card["probes"], card["checks"]
    assert card["placement"] == name
    assert {"grad_h", "rms", "similarity", "jacobian_frobenius", "local_sensitivity"} <= set(probes)
    assert c["rms_top"] == probes["rms"][-1] and c["top_similarity"] == probes["similarity"][-1]
    assert c["grad_ratio"] == pytest.approx(probes["grad_h"][0] / probes["grad_h"][-1])
    assert c["jacobian_0L"] == probes["jacobian_frobenius"][0]
    roles = {k.removesuffix("_backward") for k in probes if k.endswith("_backward") and len(probes[k]) == 4}
    assert set(c["backward_products"]) == roles
    for role in roles:
      assert c["backward_products"][role] == pytest.approx(np.prod(probes[f"{role}_backward"]))
    assert c["preconditioned_sharpness"] > 0 and c["sharpness_init"] > 0
    assert card["predicted_max_lr"] == c["predicted_max_lr"] == pytest.approx(
        curvature.adam_stability_threshold(0.9) / c["preconditioned_sharpness"])
    assert card["score"] == pytest.approx(-math.log10(card["predicted_max_lr"]))
    assert c["gd_max_lr"] == pytest.approx(2 / c["sharpness_init"])
    assert c["backward_stability"] == pytest.approx(np.sum(np.log10(1 + np.array(card["block_jacobian"][0]))))
  assert set(got["cards"]["peri"]["checks"]["backward_products"]) == {"norm_in", "norm_out"}


def test_the_warmup_is_constant_rate_adamw_on_the_training_batches(tmp_path, monkeypatch):
  """`adam_warmup` against AdamW written out (gradients clipped to the global norm, moments
  bias-corrected, decay decoupled on the decay mask) at LR_REF from the first step on, over
  the loader's first train batches of the seed; 3 steps."""
  monkeypatch.setattr(lab_checks, "WARMUP_STEPS", 3)
  config = small_config("pre", tmp_path)
  o, cfg = config.optim, ModelConfig.of(config.model)
  params = decoder.init(cfg, jax.random.key(config.seed))
  got_params, got_P = lab.adam_warmup(config, params)

  rows = loader.make_iterator(config.data, "train", config.train.batch_size, seed=config.seed, shuffle=True,
                              process_index=0, process_count=1)
  decays = optim.decay_mask(o, params)
  grad = jax.jit(jax.grad(functools.partial(decoder.loss, cfg)))
  p, m, v = params, jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params)
  for t in (1, 2, 3):
    g = grad(p, next(rows))
    norm = np.sqrt(sum(np.sum(np.square(x)) for x in jax.tree.leaves(g)))
    g = jax.tree.map(lambda x: x * min(1.0, o.clip_norm / norm), g)
    m = jax.tree.map(lambda m, g: o.b1 * m + (1 - o.b1) * g, m, g)
    v = jax.tree.map(lambda v, g: o.b2 * v + (1 - o.b2) * g * g, v, g)
    P = jax.tree.map(lambda v: np.sqrt(v / (1 - o.b2 ** t)) + o.eps, v)
    p = jax.tree.map(lambda p, m, P, d: p - lab_checks.LR_REF * (m / (1 - o.b1 ** t) / P + o.weight_decay * d * p),
                     p, m, P, decays)
  for got, want in ((got_P, P), (got_params, p)):
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)):
      # the key bias's gradient is rounding noise (softmax ignores a shift shared by all keys),
      # which Adam's normalised step turns into +-lr either way: its moments compare, not its step
      if got is got_params and jax.tree_util.keystr(path) == "['blocks']['attn']['k']['bias']":
        continue
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7, err_msg=jax.tree_util.keystr(path))


def test_output_projections_x10_sharpen_the_warmed_up_model(tmp_path):
  """Pre-LN's branches are linear in their output scale: x10 on every output projection gives a
  larger preconditioned sharpness, so a smaller predicted max stable lr."""
  config = small_config("pre", tmp_path)
  cfg = ModelConfig.of(config.model)
  params = decoder.init(cfg, jax.random.key(config.seed))
  batch_BT1, key = inputs.probe_batch(config, held_out=True), inputs.probe_key(config)
  base, scaled = (float(lab._sharpness(cfg, p, *lab.adam_warmup(config, p), batch_BT1, key)[1])
                  for p in (params, lab_checks.scale_outputs(params, 10.0)))
  assert scaled > 1.5 * base > 0
  assert lab_checks.max_stable_lr(scaled, 0.9) < lab_checks.max_stable_lr(base, 0.9)


@functools.partial(jax.jit, static_argnums=(0, 2))
def exact_block_jacobians(cfg, tokens_BT, seed):
  """|J_l - I|_F / sqrt(T d) per block from the full jax.jacfwd Jacobian at the block's input
  in the forward pass (per sequence, averaged in square), outputs as initialised and x SCALE."""
  params = decoder.init(cfg, jax.random.key(seed))
  _, inter = taps_lib.forward(cfg, params, tokens_BT, taps_lib.zero_taps(cfg, tokens_BT))
  h_in_LBTD = jnp.concatenate([taps_lib.sown(inter["h0"])[None], taps_lib.hidden_LBTD(inter)[:-1]])
  block = Block(cfg)

  def sq_norm(p_l, h_TD):
    J = jax.jacfwd(lambda x: block.apply({"params": p_l}, x[None], None)[0][0])(h_TD)
    return jnp.sum(jnp.square(J.reshape(h_TD.size, -1) - jnp.eye(h_TD.size))) / h_TD.size

  def per_block(p):
    sq_LB = jax.vmap(lambda p_l, h_BTD: jax.vmap(lambda h: sq_norm(p_l, h))(h_BTD))(p["blocks"], h_in_LBTD)
    return jnp.sqrt(jnp.mean(sq_LB, -1))
  return jnp.stack([per_block(params), per_block(lab_checks.scale_outputs(params, lab_checks.SCALE))])


def test_scale_check_matches_jacfwd(scorecard):
  """The lab's |J_l - I| (Hutchinson) at c = 1 and c = SCALE against the exact block
  Jacobians at the same inputs: Peri-LN exactly invariant, Pre-LN's branch ~ c."""
  _, got = scorecard
  for name in ("peri", "pre"):
    config = small_config(name)
    tokens_BT = inputs.probe_batch(config, held_out=False)[:, :-1]
    exact = np.asarray(exact_block_jacobians(ModelConfig.of(config.model), tokens_BT, config.seed))
    card = got["cards"][name]
    np.testing.assert_allclose(card["block_jacobian"], exact, rtol=0.2)  # 2 Hutchinson probes x 2 sequences
    if name == "peri":
      assert card["checks"]["scale_ratio"] == pytest.approx(1.0, abs=1e-4)
      np.testing.assert_allclose(exact[1], exact[0], rtol=1e-4)
    else:
      assert card["checks"]["scale_ratio"] == pytest.approx(lab_checks.scale_ratio(*exact), rel=0.1)
      assert card["checks"]["scale_ratio"] > 5


def test_rank_joins_scores_with_measured_outcomes(scorecard, probe_run, tmp_path, monkeypatch, capsys):
  """`nplace lab --rank` on a sweep of real summary.json files (probe_run's, with the outcomes
  set per trial): the measured ranking is failure rate then val loss, and rho is the ranks'
  correlation. The lab models it asks for are the scorecard's (same flags), so their cards are
  the ones `nplace lab pre` measured (saves three compiles)."""
  measured = scorecard[1]["cards"]

  def measure_all(configs):
    assert all((c.model.n_layer, c.model.d_model, c.model.norm) == (2, 32, "rmsnorm") for c in configs.values())
    return {m: measured[c.model.placement] for m, c in configs.items()}
  monkeypatch.setattr(lab, "measure_all", measure_all)
  real = json.loads((probe_run / "summary.json").read_text()) | {"max_loss_rebound": 0.0}
  freq = real["frequency_loss"]
  outcomes = {"post": [{"status": "diverged"}, {"val_loss": freq}],  # failure rate 1
              "pre": [{"val_loss": freq - 1.0}, {"val_loss": freq}],  # 0.5
              "peri": [{"val_loss": freq - 1.5}, {"val_loss": freq - 1.0}]}  # 0
  trials = []
  for placement, changes in outcomes.items():
    for seed, change in enumerate(changes):
      name = f"placement={placement},seed={seed}"
      (tmp_path / name).mkdir()
      summary = real | change
      (tmp_path / name / "summary.json").write_text(json.dumps(summary))
      trials.append({"name": name, "overrides": {"model.placement": placement, "seed": seed},
                     "workdir": name, "command": "nplace train ...", "status": summary["status"],
                     "error": None, "summary": summary})
  trials.append({"name": "pending", "overrides": {"model.placement": "post", "seed": 9}, "workdir": "pending",
                 "command": "nplace train ...", "status": "pending", "error": None, "summary": None})
  (tmp_path / "sweep.json").write_text(json.dumps({"config": "experiments/placements.py", "overrides": [],
                                                   "trials": trials}))
  assert main.main(["lab", "--rank", str(tmp_path), *SMALL, "--json", str(tmp_path / "rank.json")]) == 0
  stdout = capsys.readouterr().out
  got = json.loads((tmp_path / "rank.json").read_text())
  rows = {r["configuration"]: r for r in got["rows"]}
  assert {k: (r["failure_rate"], r["runs"]) for k, r in rows.items()} == {
      "placement=post": (1.0, 2), "placement=pre": (0.5, 2), "placement=peri": (0.0, 2)}
  assert rows["placement=peri"]["val_loss"] == pytest.approx(freq - 1.25)
  assert rows["placement=post"]["val_loss"] == pytest.approx(freq)  # the diverged run left out
  scores = {name: card["score"] for name, card in measured.items()}
  assert {k.split("=")[1]: r["score"] for k, r in rows.items()} == pytest.approx(scores)
  order = sorted(scores, key=scores.get)  # lab ranks of peri, pre, post vs measured 1, 2, 3
  d = np.array([order.index(p) for p in ("peri", "pre", "post")]) - np.arange(3)
  assert got["spearman"] == pytest.approx(1 - 6 * np.sum(d ** 2) / (3 * 8))
  assert "| configuration | lab score | lab rank |" in stdout and "Spearman's rho" in stdout


def test_spearman_against_closed_form_and_ties():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=20), rng.normal(size=20)
  d = ranking_lib.average_ranks(list(x)) - ranking_lib.average_ranks(list(y))
  assert ranking_lib.spearman(x, y) == pytest.approx(1 - 6 * np.sum(d ** 2) / (20 * (20 ** 2 - 1)))
  np.testing.assert_array_equal(ranking_lib.average_ranks([3, 1, 3, 2]), [3.5, 1, 3.5, 2])
  assert ranking_lib.spearman([1, 2, 2, 3], [(0, 1.0), (0.5, 2.0), (0.5, 2.0), (1, 0.0)]) == pytest.approx(1.0)
  assert math.isnan(ranking_lib.spearman([1, 1, 1], [1, 2, 3]))


def test_growth_fits_recover_slope_and_rate():
  layers = np.arange(1, 13)
  linear = lab_checks.growth(2.0 + 0.5 * layers)
  assert (linear["slope"], linear["r2_linear"], linear["better"]) == (pytest.approx(0.5), pytest.approx(1.0), "linear")
  exponential = lab_checks.growth(0.1 * np.exp(0.3 * layers))
  assert (exponential["rate"], exponential["better"]) == (pytest.approx(0.3), "exponential")


def test_scale_outputs_scales_only_the_output_projections(make_config):
  shapes = decoder.abstract_params(make_config().model)
  params = jax.tree.map(lambda s: np.random.default_rng(0).normal(size=s.shape), shapes)
  scaled = lab_checks.scale_outputs(params, 3.0)
  flat, flat_scaled = jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(scaled)
  hits = 0
  for (path, leaf), got in zip(flat, flat_scaled):
    names = [k.key for k in path]
    hit = names[1:3] in (["attn", "o"], ["mlp", "fc_out"])
    hits += hit
    np.testing.assert_array_equal(got, 3.0 * leaf if hit else leaf)
  assert hits == 4  # kernel and bias of each


def test_score_prediction_and_the_reported_terms():
  card = {"preconditioned_sharpness": 380.0, "predicted_max_lr": lab_checks.max_stable_lr(380.0, 0.9)}
  assert card["predicted_max_lr"] == pytest.approx(0.1) and lab_checks.score(card) == pytest.approx(1.0)
  assert lab_checks.prediction(card) == ("predicted max stable lr 1.0e-01 (preconditioned sharpness 3.8e+02 "
                                         "after 25 Adam steps at lr 1e-03)")
  assert lab_checks.max_stable_lr(4.0, 0.0) == 0.5  # gradient descent's 2 / sharpness
  for broken in (float("nan"), float("inf"), -1.0):
    assert lab_checks.max_stable_lr(broken, 0.9) == 0.0
  assert lab_checks.score({"predicted_max_lr": 0.0}) == math.inf
  assert lab_checks.backward_stability([0.0, 9.0, 0.0]) == pytest.approx(1.0)
  balanced = {"grad_ratio": 1.0, "jacobian_0L": 1.0, "rms_top": 2.0, "rms_h0": 2.0,
              "scale_ratio": 1.0, "top_similarity": 0.0}
  off = balanced | {"grad_ratio": 1e-3, "top_similarity": 0.99}
  assert lab_checks.terms(off)["gradients"] == pytest.approx(3) and lab_checks.terms(off)["clones"] == pytest.approx(2)


@pytest.mark.parametrize("argv,needle", [
    (["nosuch"], f"placement 'nosuch': expected one of {', '.join(PLACEMENTS)}"),
    ([], "name a PLACEMENT, --all or --rank SWEEP_DIR"),
    (["peri", "--width", "30"], "model.d_model=30"),
    (["peri", "--rank", "."], "--rank takes no PLACEMENT"),
    (["--rank", "/nonexistent"], "/nonexistent: no sweep.json"),
    (["--all", "pre"], "--all takes no PLACEMENT"),
    (["--all", "--depth", "4"], "--depth: --all range-tests each configuration at its grid's own shape"),
    (["--all", "--config.train.steps=50"], "config error: train.steps=50: the range test reads the first 100 steps"),
    (["--all", "--config.model.norm=nosuch"], "config error: model.norm='nosuch'"),
    (["--all", "--config", "experiments/stability.py:cpu"], "protocol stability v2 declares no blow_up_rise"),
])
def test_bad_input_is_one_line_before_any_compile(capsys, monkeypatch, argv, needle):
  monkeypatch.setattr(lab, "measure_all", lambda configs: pytest.fail("measured despite bad input"))
  monkeypatch.setattr(range_test, "run_all", lambda configurations, rise: pytest.fail("trained despite bad input"))
  assert main.main(["lab", *argv]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and needle in err, err


def test_placements_grid_covers_every_placement_and_reports_as_study_a(tmp_path):
  spec = str(pathlib.Path(__file__).resolve().parent.parent / "experiments/placements.py")
  trials = grid.expand(spec, experiment("placements"), [], tmp_path)
  assert sorted((t.config.model.placement, t.config.seed) for t in trials) == sorted(
      (p, s) for p in PLACEMENTS for s in range(3))
  stress = experiment("stability", "v0_stress")
  assert all(t.config.optim.lr == stress.optim.lr and t.config.model.n_layer == stress.model.n_layer
             for t in trials)
  assert report_runs.study_of("experiments/placements.py") == "stability"


def test_scale_ratio_counts_identity_blocks_as_invariant():
  """ReZero's blocks are the identity at init: |J_l - I| is 0 at any output scale."""
  assert lab_checks.scale_ratio([0.0, 0.0], [0.0, 0.0]) == 1.0
  np.testing.assert_allclose(lab_checks.scale_ratio([0.0, 2.0], [0.0, 8.0]), 2.0)  # sqrt(1 * 4)
  np.testing.assert_allclose(lab_checks.scale_ratio([1.0, 1.0], [10.0, 10.0]), 10.0)


GRID = '''
from nplace.config import base_config
from nplace.experiments.stability import LAB_PROTOCOL
from nplace.protocol import LR_SWEEP, Protocol, Threshold
ARMS = {"Pre": {"model.placement": "pre"}, "Peri": {"model.placement": "peri"}, "Post": {"model.placement": "post"}}
SEED_SETTING = "a test"
def protocol(arg="cpu"):
  return Protocol("g", 1, LR_SWEEP, "", 2, 100, 0, 0.95, (Threshold("min_effect", 0.05, ""),
                  Threshold("did_not_learn", 0.1, ""), Threshold("spike_rebound", 1.0, "")), (), lab=LAB_PROTOCOL)
def get_config(arg="cpu"):
  c = base_config()
  c.model.update(vocab_size=512, max_len=8, n_layer=2, d_model=32, n_head=2)
  c.data.seq_len, c.probe.batch_size = 8, 2
  return c
def get_sweep(arg="cpu"):
  return [{"model.n_layer": d, "model.placement": p, "optim.lr": lr, "seed": s}
          for p in ("pre", "peri", "post") for d in (2, 4) for s in (0, 1) for lr in (1e-3, 1e-2)]
'''
FREQ = 3.5


def results_study(tmp_path, losses):
  """tmp_path/results/g: a committed LR sweep of experiments/g.py (placement x depth 2/4 x seeds
  0, 1 x lrs 1e-3, 1e-2), `losses[placement]` its final val loss at the two rates."""
  from nplace.studies.results import Trial
  from nplace.train.summary import Summary
  (tmp_path / "experiments").mkdir()
  (tmp_path / "experiments" / "g.py").write_text(GRID)
  study = tmp_path / "results" / "g"
  study.mkdir(parents=True)
  (study / "grid.json").write_text(json.dumps({"config": "experiments/g.py:cpu"}))
  lines = []
  for placement, curve in losses.items():
    for depth in (2, 4):
      for seed in (0, 1):
        for lr, loss in zip((1e-3, 1e-2), curve):
          overrides = {"model.n_layer": depth, "model.placement": placement, "optim.lr": lr, "seed": seed}
          lines.append(Trial(grid.trial_name(overrides), overrides,
                             Summary(step=10, val_loss=loss + 0.01 * seed, frequency_loss=FREQ, entropy_rate=1.0),
                             [(10, loss)], 2, 512).to_json() + "\n")
  (study / "trials.jsonl").write_text("".join(lines))
  return study


def test_rank_scores_each_configuration_and_seed_at_its_trained_shape(tmp_path, monkeypatch, capsys):
  """`nplace lab --rank RESULTS/STUDY`: one lab model per (arm, shape, seed), built from the
  grid's config and the trial's overrides; lab.json holds the scores and the rule's version, and
  the results page ranks from it."""
  study = results_study(tmp_path, {"pre": (2.0, 3.0), "peri": (2.0, 2.2), "post": (2.0, 4.0)})
  asked = []

  def measure_all(configs):
    asked.extend((k, c.model.n_layer, c.model.placement, c.seed, c.model.d_model) for k, c in configs.items())
    scores = {k: {"peri": 0.5, "pre": 1.0, "post": 2.0}[c.model.placement] for k, c in configs.items()}
    return {k: {"score": s, "predicted_max_lr": 10 ** -s, "prediction": "p"} for k, s in scores.items()}
  monkeypatch.setattr(lab, "measure_all", measure_all)
  assert main.main(["lab", "--rank", str(study)]) == 0
  assert sorted(asked) == sorted(((a, f"depth {d}", s), d, a.lower(), s, 32)
                                 for a in ("Pre", "Peri", "Post") for d in (2, 4) for s in (0, 1))
  record = json.loads((study / "lab.json").read_text())
  assert record["rule_version"] == lab_checks.SHARPNESS_RULE_VERSION and record["rule"] == lab_checks.SHARPNESS_RULE
  assert len(record["scores"]) == 12
  assert all(r["predicted_max_lr"] == pytest.approx(10 ** -r["score"]) and r["rule_version"] == 3
             for r in record["scores"])
  out = capsys.readouterr().out
  assert "Spearman's rho 1.000 [1.000, 1.000] over 6 configurations" in out  # both orders: peri, pre, post

  from nplace.studies.report import page as results_page
  page = results_page.write(tmp_path / "results", repo=tmp_path).read_text()
  assert f"lab protocol v{LAB_PROTOCOL.version}, rule version {lab_checks.SHARPNESS_RULE_VERSION}" in page
  assert "| The lab's score ranks the configurations as their LR sensitivity does" in page
  assert "**reproduced** | Spearman's rho, lab score vs LR sensitivity: 6 configurations: 1.00 [1.00, 1.00]" in page
  assert all(f"| {v} | `{c}` |" in page for v, c, _ in lab_checks.RULE_HISTORY)



def test_a_grid_filed_in_parts_is_scored_in_parts(tmp_path, monkeypatch, capsys):
  """A second `--rank` scores only the configurations and seeds its lab.json lacks from the
  same rule version; a lab.json of another rule version is scored again from scratch."""
  study = results_study(tmp_path, {"pre": (2.0, 3.0), "peri": (2.0, 2.2), "post": (2.0, 4.0)})
  asked = []

  def measure_all(configs):
    asked.append(sorted(configs))
    return {k: {"score": 1.0 + c.seed, "predicted_max_lr": 0.1, "prediction": "p"} for k, c in configs.items()}
  monkeypatch.setattr(lab, "measure_all", measure_all)
  assert main.main(["lab", "--rank", str(study)]) == 0
  record = json.loads((study / "lab.json").read_text())
  record["scores"] = [r for r in record["scores"] if r["arm"] != "Post"]  # as if Post had been filed later
  (study / "lab.json").write_text(json.dumps(record))
  assert main.main(["lab", "--rank", str(study)]) == 0
  assert asked[1] == sorted(k for k in asked[0] if k[0] == "Post")
  assert "8 configurations and seeds already scored by rule version 3, kept; scoring the other 4" in capsys.readouterr().out
  assert len(json.loads((study / "lab.json").read_text())["scores"]) == 12
  record["rule_version"] = 2
  (study / "lab.json").write_text(json.dumps(record))
  assert main.main(["lab", "--rank", str(study)]) == 0
  assert asked[2] == asked[0]


WIDE = '''
_narrow_sweep = get_sweep
def get_sweep(arg="cpu"):
  wider = [dict(t, **{"optim.lr": 1e-1}) for t in _narrow_sweep() if t["optim.lr"] == 1e-3] if arg == "wide" else []
  return _narrow_sweep() + wider
def reuses(arg="cpu"):
  return "cpu" if arg == "wide" else None
'''


def test_a_widened_grid_is_ranked_on_the_trials_it_reuses_too(tmp_path, monkeypatch, capsys):
  """A grid that reuses another's filed trials (its `reuses`) and files only its new rate is
  ranked on every rate: its own trials alone (one rate, no sensitivity) would give no rho."""
  from nplace.studies.results import Trial
  from nplace.train.summary import Summary
  narrow = results_study(tmp_path, {"pre": (2.0, 3.0), "peri": (2.0, 2.2), "post": (2.0, 4.0)})
  narrow.rename(narrow.parent / "g_cpu")
  (tmp_path / "experiments" / "g.py").write_text(GRID + WIDE)
  wide = tmp_path / "results" / "g_wide"
  wide.mkdir()
  (wide / "grid.json").write_text(json.dumps({"config": "experiments/g.py:wide"}))
  module = grid.load_module(tmp_path / "experiments" / "g.py")
  new = [o for o in module.get_sweep("wide") if o["optim.lr"] == 1e-1]
  (wide / "trials.jsonl").write_text("".join(
      Trial(grid.trial_name(o), o, Summary(step=10, val_loss=5.0, frequency_loss=FREQ, entropy_rate=1.0),
            [(10, 5.0)], 2, 512).to_json() + "\n" for o in new))
  monkeypatch.setattr(lab, "measure_all", lambda configs: {
      k: {"score": {"peri": 0.5, "pre": 1.0, "post": 2.0}[c.model.placement], "predicted_max_lr": 0.1,
          "prediction": "p"} for k, c in configs.items()})
  assert main.main(["lab", "--rank", str(wide)]) == 0
  out = capsys.readouterr().out
  assert "Spearman's rho 1.000 [" in out and "] over 6 configurations" in out
  (wide.parent / "g_cpu" / "grid.json").unlink()
  assert main.main(["lab", "--rank", str(wide)]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "reuses g_cpu's trials, which are not filed" in err


def test_the_rank_bootstrap_resamples_seeds_in_pairs():
  """Two seeds per configuration that order it oppositely: the interval spans the disagreement;
  perfectly concordant seeds give [1, 1]."""

  class Sweep:
    arms, shapes, seeds = ["a", "b", "c"], ["s"], [0, 1]

    def __init__(self, sensitivity):
      self.sensitivity = sensitivity

    def per_seed(self, metric, arm, shape):
      return self.sensitivity[arm]
  scores = {(a, "s", seed): {"a": 1, "b": 2, "c": 3}[a] for a in "abc" for seed in (0, 1)}
  ranking = ranking_lib.Ranking(LAB_PROTOCOL, Sweep({"a": [0.1, 0.1], "b": [0.2, 0.2], "c": [0.3, 0.3]}), scores)
  assert ranking.rho() == (1.0, 1.0, 1.0)
  mixed = ranking_lib.Ranking(LAB_PROTOCOL, Sweep({"a": [0.1, 0.5], "b": [0.2, 0.2], "c": [0.3, 0.0]}), scores)
  rho, low, high = mixed.rho()
  assert low <= -0.5 and high == 1.0
  verdicts = {v.claim.id: v.verdict for v in judge.judge(LAB_PROTOCOL, mixed)}
  assert verdicts == {"lab_agrees": "not reproduced", "lab_meets_target": "not reproduced"}


def test_rank_of_a_results_study_refuses_the_lab_models_flags(tmp_path, monkeypatch, capsys):
  study = results_study(tmp_path, {"pre": (2.0, 3.0), "peri": (2.0, 2.2), "post": (2.0, 4.0)})
  monkeypatch.setattr(lab, "measure_all", lambda configs: pytest.fail("measured despite bad input"))
  for flag in (["--depth", "4"], ["--config.model.d_model=64"]):
    assert main.main(["lab", "--rank", str(study), *flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scored with its own grid's config" in err and flag[0].split("=")[0] in err


@pytest.mark.parametrize("grid_text,needle", [
    (GRID.replace("def protocol(", "def not_protocol("), "declares no protocol(arg) and ARMS"),
    (None, "is not a learning-rate sweep"),
])
def test_rank_of_a_results_study_it_cannot_judge_is_one_line(tmp_path, monkeypatch, capsys, grid_text, needle):
  study = results_study(tmp_path, {"pre": (2.0, 3.0), "peri": (2.0, 2.2), "post": (2.0, 4.0)})
  if grid_text:
    (tmp_path / "experiments" / "g.py").write_text(grid_text)
  else:  # one point per arm and seed: no learning-rate sweep
    lines = [line for line in (study / "trials.jsonl").read_text().splitlines() if '"optim.lr": 0.001' in line]
    (study / "trials.jsonl").write_text("".join(line.replace('"optim.lr": 0.001, ', "") + "\n" for line in lines))
  monkeypatch.setattr(lab, "measure_all", lambda configs: pytest.fail("measured despite bad input"))
  assert main.main(["lab", "--rank", str(study)]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and needle in err, err


# --- Rule version 4 (the range test) on a grid, and lab protocol 3's claims ---

STABILITY = grid.load_module(pathlib.Path(__file__).resolve().parent.parent / "experiments" / "stability.py")
SHAPE = "depth 12, width 32"  # the placements grid's


def swept_trial(overrides, stable, steps=1000):
  """A trial of a learning-rate sweep that learned (val loss 2.0) or stalled above the frequency loss."""
  from nplace.train.summary import Summary
  final = 2.0 if stable else FREQ - 0.05
  loss = [(s, 6.2 - (6.2 - final) * min(1.0, 2 * s / steps)) for s in range(0, steps + 1, steps // 100)]
  summary = Summary(step=steps, val_loss=final, frequency_loss=FREQ, entropy_rate=1.0)
  return results.Trial(grid.trial_name(overrides), overrides, summary, loss, steps // 20, 512,
                       val_loss=[(steps, final)])


def lab_record(config, predicted: dict, seeds) -> str:
  """lab.json of rule version 4: (arm, shape) -> its predicted rate, the same for each seed."""
  scores = [{"arm": arm, "shape": shape, "seed": seed, "score": -math.log10(rate), "predicted_max_lr": rate,
             "prediction": "p", "rule_version": 4} for (arm, shape), rate in predicted.items() for seed in seeds]
  return json.dumps({"config": config, "rule_version": 4, "rule": range_test.RULE, "scores": scores})


def placements_ranking(tmp_path, measured: dict, predicted: dict, filed=lambda overrides: True):
  """Lab protocol 3's Ranking of a constructed placements grid: `measured` arm -> log10 of its
  seeds' maximum stable rate (one for all seeds, or one per seed; None: stable at no rate; -1
  where not given), `predicted` arm -> log10 of the range test's prediction (default: measured, where one for all;
  None: none in lab.json); `filed`: whether a trial of the grid is filed."""
  trials = []
  for overrides in filter(filed, STABILITY.get_sweep("placements")):
    top = measured.get(results.arm_of(STABILITY.PLACEMENT_ARMS, overrides), -1.0)
    top = top[overrides["seed"]] if isinstance(top, tuple) else top
    trials.append(swept_trial(overrides, top is not None and math.log10(overrides["optim.lr"]) <= top + 1e-9))
  config = "experiments/stability.py:placements"
  study = results.Study(tmp_path, config, trials)
  logs = {arm: predicted.get(arm, measured.get(arm, -1.0)) for arm in STABILITY.PLACEMENT_ARMS}
  (tmp_path / "lab.json").write_text(lab_record(config, {
      (arm, SHAPE): 10 ** log for arm, log in logs.items() if log is not None}, STABILITY.PLACEMENT_SEEDS))
  return study, measures_lib.measures_for(STABILITY.LAB_PROTOCOL_V3, study, STABILITY, "placements",
                                          ranked=STABILITY.PROTOCOL_PLACEMENTS)


def lab_verdicts(ranking) -> dict:
  return {v.claim.id: v.verdict for v in judge.judge(STABILITY.LAB_PROTOCOL_V3, ranking)}


# The structural heuristic: half a decade over Pre-LN's 10^-1 for these four of the nine, 10^-1 for the rest
STREAM_NORMS = ("Post-LN", "Reorder (OLMo 2)", "DeepNorm", "HybridNorm")


def test_the_range_test_wins_where_it_predicts_each_rate_and_the_baselines_do_not(tmp_path):
  """Measured rates spread over the sweep, against the heuristic's grain (its four stream-norm
  placements measured lowest); the range test predicts each (DyT's seeds differ: geometric mean
  10^-0.83, predicted 10^-1, its majority's rate). Rule right 9 of 9, the heuristic 2, the
  constant 1; rho near 1 against the heuristic's negative rho, on the same draws."""
  measured = {"Post-LN": -3.0, "Reorder (OLMo 2)": -2.5, "DeepNorm": -2.0, "HybridNorm": -1.5, "Mix-LN": -1.0,
              "LayerNorm Scaling": -0.5, "ReZero": 0.0, "Pre-LN + QK-norm": 0.5, "Pre-LN, DyT": (-1.0, -1.0, -0.5)}
  study, ranking = placements_ranking(tmp_path, measured, {"Pre-LN, DyT": -1.0})
  assert lab_verdicts(ranking) == dict.fromkeys(
      ("lab_ranks_max_lr", "lab_beats_constant", "lab_right_more_than_structure", "lab_ranks_better_than_structure"),
      "reproduced")
  judged = list(STABILITY.NEW_PLACEMENTS)
  assert [sum(ranking.right(ranking.max_lrs(judged, b))) for b in (None, "constant", "structure")] == [9, 1, 2]
  rule, structure = (ranking.paired("max_stable_lr", judged, b) for b in (None, "structure"))
  assert ranking.rho(rule)[1] > 0.5 and ranking.rho(structure)[0] < 0
  difference = ranking.rho_difference(rule, structure)
  assert difference[0] == pytest.approx(ranking.rho(rule)[0] - ranking.rho(structure)[0]) and difference[1] > 0

  page = "\n\n".join(report_lab.lab_part(study, STABILITY, "placements", STABILITY.PROTOCOL_PLACEMENTS, "cpu"))
  assert "### The lab's predicted maximum stable rate: lab protocol v3, rule version 4" in page
  for row in ("Post-LN | 0.001 | 0.001, 0.001, 0.001 | 0.001 right (+0.00) | 0.32 wrong (+2.50) | 0.32 wrong (+2.50)",
              "Pre-LN, DyT | 0.15 | 0.1, 0.1, 0.32 | 0.1 right (-0.17) | 0.32 wrong (+0.33) | 0.1 right (-0.17)"):
    assert f"| {SHAPE} | {row} |" in page
  assert "| range test | " in page and "| 9 of 9: 1.00 [0.66, 1.00] | - | " in page  # Clopper-Pearson's interval
  assert "| constant | - (one rate for all) | 1 of 9: 0.11 [0.00, 0.48] | - | - |" in page
  assert "The configurations judged (9)" in page
  assert "Not judged: Pre-LN, Peri-LN, Pre-LN + embedding norm" in page and "all 12 configurations together" in page
  assert f"| 4 | `{lab_checks.RULE_HISTORY[-1][1]}` |" in page  # the rule's versions


def test_the_range_test_loses_to_the_heuristic_where_that_predicts_every_rate(tmp_path):
  """Measured rates exactly the heuristic's; the range test right for its five 10^-1 placements
  and a decade high for the four others: it ranks them as measured (rho 1), is right on five where
  the constant is right on the other four (a sign test's p 0.5: it does not beat the constant),
  predicts fewer right than the heuristic (9) and ranks no better (both rho 1: the difference's
  interval is [0, 0])."""
  measured = {arm: -0.5 if arm in STREAM_NORMS else -1.0 for arm in STABILITY.NEW_PLACEMENTS}
  _, ranking = placements_ranking(tmp_path, measured, {arm: 0.5 for arm in STREAM_NORMS})
  assert lab_verdicts(ranking) == {"lab_ranks_max_lr": "reproduced", "lab_beats_constant": "not reproduced",
                                   "lab_right_more_than_structure": "not reproduced",
                                   "lab_ranks_better_than_structure": "not reproduced"}
  verdict = next(v for v in judge.judge(STABILITY.LAB_PROTOCOL_V3, ranking) if v.claim.baseline == "structure"
                 and v.claim.metric == "right_more_than")
  assert verdict.effects[0].mean == 0 - 4 and "the lab (5 of 9 judged) − the structure (9)" in verdict.effects[0].what


def test_a_seed_stable_at_no_rate_leaves_the_claims_not_testable(tmp_path):
  study, ranking = placements_ranking(tmp_path, {"ReZero": (None, -1.0, -1.0)}, {"ReZero": -1.0})
  verdicts = judge.judge(STABILITY.LAB_PROTOCOL_V3, ranking)
  assert {v.verdict for v in verdicts} == {"not testable at this tier"}
  assert all(f"ReZero, {SHAPE} (a seed stable at no rate)" in v.would_change for v in verdicts)
  page = "\n\n".join(report_lab.lab_part(study, STABILITY, "placements", STABILITY.PROTOCOL_PLACEMENTS, "cpu"))
  assert f"| {SHAPE} | ReZero | none | none, 0.1, 0.1 | 0.1 |" in page


# --- Lab protocol 3 attacked with synthetic outcomes: what must never read as reproduced ---

# Rule version 4's predictions, seen before any outcome: 10^-0.5 for every configuration but ReZero's 10^-1.5
RULE_V4 = {arm: -1.5 if arm == "ReZero" else -0.5 for arm in STABILITY.PLACEMENT_ARMS}
CLAIMS_V3 = [c.id for c in STABILITY.LAB_PROTOCOL_V3.claims]
NOT_REPRODUCED = "not reproduced"
NOT_TESTABLE = "not testable at this tier"
FIVE = list(STABILITY.NEW_PLACEMENTS)[:5]  # five judged placements: a sign test over 5 of 5 reaches p = 1/32


def every_arm(log10_rate):
  return dict.fromkeys(STABILITY.PLACEMENT_ARMS, log10_rate)


@pytest.mark.parametrize("measured", [-1.0, -0.5])
def test_no_measured_difference_is_no_ranking_and_no_win_over_the_constant(tmp_path, measured):
  """Every placement at one maximum stable rate, rule version 4's predictions: the measured rates
  have no ranks, so the ranking claims are not testable, and the rule is right no more often than
  the constant."""
  _, ranking = placements_ranking(tmp_path, every_arm(measured), RULE_V4)
  verdicts = lab_verdicts(ranking)
  assert verdicts["lab_ranks_max_lr"] == verdicts["lab_ranks_better_than_structure"] == NOT_TESTABLE
  assert verdicts["lab_beats_constant"] == verdicts["lab_right_more_than_structure"] == NOT_REPRODUCED


def test_the_label_predicting_as_well_as_the_rule_is_not_beaten(tmp_path):
  """The rule predicting exactly the structural heuristic's rates, on outcomes that heuristic
  predicts: as many right (9 and 9), the same ranks on every draw (difference [0, 0])."""
  structure = {arm: -0.5 if arm in STREAM_NORMS else -1.0 for arm in STABILITY.PLACEMENT_ARMS}
  _, ranking = placements_ranking(tmp_path, structure, structure)
  verdicts = lab_verdicts(ranking)
  assert verdicts["lab_right_more_than_structure"] == verdicts["lab_ranks_better_than_structure"] == NOT_REPRODUCED


def test_a_partly_filed_grid_or_a_missing_prediction_is_not_testable(tmp_path):
  """One trial of a judged placement unfiled; or one placement without a prediction in lab.json."""
  unfiled = lambda o: not (o["model.placement"] == "deepnorm" and o["seed"] == 2 and o["optim.lr"] == 10)
  for i, (filed, predicted) in enumerate([(unfiled, RULE_V4), (lambda o: True, RULE_V4 | {"Mix-LN": None})]):
    (tmp_path / str(i)).mkdir()
    _, ranking = placements_ranking(tmp_path / str(i), every_arm(-0.5) | {"ReZero": -1.5}, predicted, filed)
    assert lab_verdicts(ranking) == dict.fromkeys(CLAIMS_V3, NOT_TESTABLE)


def test_the_tolerance_is_half_a_sweep_step_and_no_mean_of_three_seeds_lands_on_it(tmp_path):
  """The sweep's rates are half a decade apart and lr_tolerance is 0.25 decades, so a prediction on
  the sweep is right when it is the rate nearest the seeds' geometric mean: never a tie (a mean of
  three seeds is a multiple of 1/6 decade, 1/12 at least from the bound), the majority's rate
  where seeds span one step."""
  logs = np.log10(STABILITY.LRS_V3)
  assert np.allclose(np.diff(logs), 0.5) and STABILITY.LAB_PROTOCOL_V3.threshold("lr_tolerance") == 0.25
  means = {np.mean(seeds) for seeds in np.array(np.meshgrid(logs, logs, logs)).reshape(3, -1).T}
  assert min(abs(abs(m - p) - 0.25) for m in means for p in logs) > 1 / 12 - 1e-9
  for predicted, right in ((-1.0, True), (-0.5, False)):  # seeds at -1, -1, -0.5: the majority's rate is right
    (tmp_path / str(predicted)).mkdir()
    _, ranking = placements_ranking(tmp_path / str(predicted), {"Mix-LN": (-1.0, -1.0, -0.5)}, {"Mix-LN": predicted})
    assert ranking.right(ranking.max_lrs(["Mix-LN"])) == [right]


# Holes the review found, fixed before any run (LAB_PROTOCOL_V3's amendment): each failed before it.

@pytest.mark.parametrize("rezero", [-1.5, (-0.5, -0.5, -1.0)], ids=["one_configuration", "one_seed"])
def test_one_configuration_off_the_others_is_no_ranking(tmp_path, rezero):
  """Every placement measured at 10^-0.5 but ReZero, lower (all its seeds, or one of them): rule
  version 4's one non-constant prediction comes true, and is the whole ranking."""
  _, ranking = placements_ranking(tmp_path, every_arm(-0.5) | {"ReZero": rezero}, RULE_V4)
  assert lab_verdicts(ranking)["lab_ranks_max_lr"] != "reproduced"


def test_one_more_right_configuration_beats_no_baseline(tmp_path):
  """Rule version 4's predictions; every placement measured at 10^-1.5 (no difference between
  them), or all at 10^-0.5 but ReZero at 10^-1.5: the rule right once more than the constant
  (1 to 0, 9 to 8) and, on the first, than the heuristic (1 to 0)."""
  for i, measured in enumerate([every_arm(-1.5), every_arm(-0.5) | {"ReZero": -1.5}]):
    (tmp_path / str(i)).mkdir()
    verdicts = lab_verdicts(placements_ranking(tmp_path / str(i), measured, RULE_V4)[1])
    assert verdicts["lab_beats_constant"] != "reproduced"
    assert i == 1 or verdicts["lab_right_more_than_structure"] != "reproduced"


def test_a_rule_no_better_than_the_constant_does_not_beat_the_structure(tmp_path):
  """Every placement measured at 10^-0.5, the constant's rate, and the rule predicting it for all:
  it ties the constant (not reproduced), yet is said to predict more right than the heuristic."""
  verdicts = lab_verdicts(placements_ranking(tmp_path, every_arm(-0.5), every_arm(-0.5))[1])
  assert verdicts["lab_beats_constant"] == NOT_REPRODUCED
  assert verdicts["lab_right_more_than_structure"] != "reproduced"


def test_rates_censored_at_the_sweeps_top_are_not_counted_right(tmp_path):
  """Five placements stable at all nine rates, the rule predicting the top rate (10) for them and
  10^-0.5 elsewhere, as measured: right 9 to the constant's 4, five of them unverifiable."""
  top = math.log10(max(STABILITY.LRS_V3))
  _, ranking = placements_ranking(tmp_path, every_arm(-0.5) | dict.fromkeys(FIVE, top),
                                  every_arm(-0.5) | dict.fromkeys(FIVE, top))
  assert lab_verdicts(ranking)["lab_beats_constant"] in (NOT_REPRODUCED, NOT_TESTABLE)


def test_a_mean_of_seeds_that_disagree_is_not_a_right_prediction(tmp_path):
  """Five placements whose seeds' maximum stable rates span 2.5 decades, (-3, -1, -0.5), geometric
  mean 10^-1.5, which the rule predicts (the others measured and predicted at 10^-0.5): no seed is
  within 0.25 decades of the rule's prediction, one is the constant's, and the rule beats it 9 to 4."""
  _, ranking = placements_ranking(tmp_path, every_arm(-0.5) | dict.fromkeys(FIVE, (-3.0, -1.0, -0.5)),
                                  every_arm(-0.5) | dict.fromkeys(FIVE, -1.5))
  assert lab_verdicts(ranking)["lab_beats_constant"] != "reproduced"


def test_a_nan_prediction_is_no_prediction(tmp_path):
  _, ranking = placements_ranking(tmp_path, every_arm(-0.5) | {"ReZero": -1.5}, RULE_V4 | {"ReZero": math.nan})
  assert lab_verdicts(ranking) == dict.fromkeys(CLAIMS_V3, NOT_TESTABLE)


GRID_V4 = '''
import dataclasses
from nplace.config import base_config
from nplace.experiments.stability import LAB_BASELINES, LAB_PROTOCOL_V3, V4
from nplace.protocol import STABILITY_SWEEP, Protocol
ARMS = {"Pre": {"model.placement": "pre"}, "Post": {"model.placement": "post"}, "Peri": {"model.placement": "peri"}}
SEED_SETTING = "a test"
def protocol(arg="cpu"):
  return Protocol(**V4, kind=STABILITY_SWEEP, summary="", claims=(), arms=ARMS,
                  lab=dataclasses.replace(LAB_PROTOCOL_V3, arms={k: ARMS[k] for k in ("Post", "Peri")}))
def get_config(arg="cpu"):
  c = base_config()
  c.model.update(vocab_size=512, max_len=8, n_layer=2, d_model=32, n_head=2)
  c.data.update(seq_len=8, synthetic_tokens=65536)
  c.train.update(steps=200, batch_size=4, log_every=1, eval_every=100, eval_batches=1)
  c.optim.warmup_steps = 10
  return c
def get_sweep(arg="cpu"):
  return [{"model.placement": p, "optim.lr": lr, "seed": s} for p in ("pre", "post", "peri") for lr in (1e-3, 1e-2)
          for s in (0, 1)]
'''
V4_MAX_LR = {"pre": 1e-2, "post": 1e-3, "peri": 1e-2}  # each placement's measured maximum stable rate


def v4_study(root) -> pathlib.Path:
  """ROOT/experiments/g.py (GRID_V4) and its sweep filed as ROOT/results/g_cpu (no lab.json)."""
  (root / "experiments").mkdir(parents=True)
  (root / "experiments" / "g.py").write_text(GRID_V4)
  study = root / "results" / "g_cpu"
  study.mkdir(parents=True)
  (study / "grid.json").write_text(json.dumps({"config": "experiments/g.py:cpu"}))
  module = grid.load_module(root / "experiments" / "g.py")
  (study / "trials.jsonl").write_text("".join(
      swept_trial(o, o["optim.lr"] <= V4_MAX_LR[o["model.placement"]], steps=200).to_json() + "\n"
      for o in module.get_sweep()))
  return study


@pytest.fixture(scope="module")
def range_tested(tmp_path_factory, env):
  """(stdout, --json) of the installed `nplace lab --all` on GRID_V4 (3 placements x 2 rates),
  filed with a lab.json."""
  root = tmp_path_factory.mktemp("all")
  study = v4_study(root)
  (study / "lab.json").write_text(lab_record("experiments/g.py:cpu", {
      (arm, "as configured"): 1e-3 for arm in ("Pre", "Post", "Peri")}, (0, 1)))
  done = subprocess.run([NPLACE, "lab", "--all", "--config", "experiments/g.py:cpu", "--json", root / "all.json"],
                        cwd=root, env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout + done.stderr
  return done.stdout, json.loads((root / "all.json").read_text())


def test_all_prints_one_row_per_configuration_with_what_the_filed_grid_measured(range_tested):
  stdout, got = range_tested
  rows = [line for line in stdout.splitlines() if line.startswith("| as configured |")]
  assert [row.split(" | ")[1] for row in rows] == ["Pre", "Post", "Peri"]
  for row, card in zip(rows, got["configurations"]):
    cells = row.strip("| ").split(" | ")
    assert cells[2:4] == [f"{card['predicted_max_lr']:.2g}", f"{card['score']:.2f}"]
    assert [r["lr"] for r in card["range_test"]] == [1e-3, 1e-2] and len(cells) == 8
    assert cells[-2:] == [f"{V4_MAX_LR[card['arm'].lower()]:.2g}", "0.001"]  # measured; lab.json's
  assert ("| shape | arm | predicted max stable lr | score | L at 1.0e-03 | L at 1.0e-02 | measured max stable lr | "
          "lab.json's prediction |") in stdout
  assert f"rule version 4: {range_test.RULE}" in stdout and got["rule_version"] == 4
  assert "cost: 3 configurations x their rates x 100 steps of one seed: 600 steps, 1/4 of the 2,400 the grid" in stdout
  assert "wall time: " in stdout and got["wall_seconds"] > 0
  assert stdout.count("range test ") >= 3  # a line as each configuration ends
  # how far to trust it: the filed grid's blind scores and verdicts, as the page has them
  assert ("How far to trust it: its blind test, lab protocol v3 on the filed grid (results/g_cpu, results/README.md), "
          "over the 2 configurations it was not chosen on:") in stdout
  assert "| range test | - (one rate for all) | 1 of 2 (1 judged): 1.00 [0.03, 1.00] | - | - |" in stdout  # Post right
  assert "| constant | - (one rate for all) | 0 of 2 (1 judged): 0.00 [0.00, 0.97] | - | - |" in stdout
  assert "lab_ranks_max_lr: not testable at this tier; " in stdout


def test_rank_of_a_range_tested_grid_records_one_prediction_per_configuration(tmp_path, monkeypatch, capsys):
  """`nplace lab --rank` of a grid whose lab protocol judges rule version 4: one range test per
  configuration at the grid's config and rates, its card on each seed; a seed filed later takes
  its configuration's card; the page shows the predictions beside the baselines."""
  study = v4_study(tmp_path)
  asked = []

  def run_all(configurations, rise):
    asked.append(sorted(configurations))
    assert rise == 1.0
    assert all(c.seed == range_test.RANGE_SEED and c.train.steps == 200 for cs in configurations.values() for c in cs)
    assert all([c.optim.lr for c in cs] == [1e-3, 1e-2] for cs in configurations.values())
    flat = lambda level: [(s, level) for s in range(1, 101)]
    return {key: range_test.predict({1e-3: flat(3.0), 1e-2: flat(5.0 if key[0] == "Post" else 2.0)},
                                    math.log(512), 10, rise) for key in configurations}
  monkeypatch.setattr(range_test, "run_all", run_all)
  assert main.main(["lab", "--rank", str(study)]) == 0
  record = json.loads((study / "lab.json").read_text())
  assert (record["rule_version"], record["rule"]) == (4, range_test.RULE) and len(record["scores"]) == 6
  assert asked == [[(arm, "as configured") for arm in ("Peri", "Post", "Pre")]]
  for r in record["scores"]:
    assert r["predicted_max_lr"] == V4_MAX_LR[r["arm"].lower()] and len(r["range_test"]) == 2
  out = capsys.readouterr().out
  assert "The configurations judged (2)" in out and "Not judged: Pre" in out and "rule version 4: " in out
  assert ("lab_beats_constant: not reproduced; right within 0.25 decades of a majority of seeds, the lab (1 of 1 "
          "judged) − the constant (0); one-sided exact sign test p = 0.5: 1.00; p at most 0.05: 1 against 0 is too "
          "few") in out  # Peri's seeds stable at the sweep's top rate: not judged
  record["scores"] = [r for r in record["scores"] if (r["arm"], r["seed"]) != ("Post", 1)]
  (study / "lab.json").write_text(json.dumps(record))
  assert main.main(["lab", "--rank", str(study)]) == 0
  assert len(asked) == 1 and len(json.loads((study / "lab.json").read_text())["scores"]) == 6
  out = capsys.readouterr().out
  assert "6 configurations and seeds already scored by rule version 4, kept; scoring the other 0" in out

  from nplace.studies.report import page as results_page
  page = results_page.write(tmp_path / "results", repo=tmp_path).read_text()
  assert "### The lab's predicted maximum stable rate: lab protocol v3, rule version 4" in page
  assert ("| as configured | Post | 0.001 | 0.001, 0.001 | 0.001 right (+0.00) | 0.32 wrong (+2.50) | "
          "0.32 wrong (+2.50) |") in page
  assert "| The range test ranks the new placements as their measured maximum stable rates do" in page
  assert "**not testable at this tier** | - | 2 | at least 3 configurations scored and swept" in page
