"""`nplace lab` as a user runs it (the installed command on a 2-block model: the scorecard, --json,
--all on the committed results, bad input), and its pure functions against references
(jax.jacfwd, closed forms)."""
import functools
import json
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
from nplace.studies.lab import checks as lab_checks, measure as lab
from nplace.config import experiment
from nplace.data import loader
from nplace.placements import PLACEMENTS
from nplace.probes import curvature, inputs, taps as taps_lib
from nplace.train import optim

ROOT = pathlib.Path(__file__).resolve().parent.parent
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


@pytest.mark.slow
def test_scorecard_lists_the_placement_then_the_baselines_and_predicts_no_rate(scorecard):
  """Every row a measurement: no rule's predicted maximum stable rate, score or rule line (rule
  version 3 showed no skill against the grids)."""
  stdout, got = scorecard
  assert list(got["cards"]) == ["pre", "post", "peri"]
  lines = stdout.splitlines()
  # each configuration announced before it is measured (nearly a minute each at depth 48)
  assert lines[:3] == [f"[{k}/3] measuring {name} at 2 x 32: probes at init, {lab_checks.WARMUP_STEPS} Adam "
                       "steps, sharpness..." for k, name in enumerate(("pre", "post", "peri"), 1)]
  assert lines[-1].startswith("wrote ")
  lines = lines[3:-1]
  assert lines[0].split() == ["pre", "post", "peri"]
  assert len(lines) == 1 + len(lab.ROWS) and all(line.startswith(label) for line, (label, _) in zip(lines[1:], lab.ROWS))
  sharpness = next(line for line in lines if line.startswith(f"lambda_P after {lab_checks.WARMUP_STEPS} Adam steps"))
  assert sharpness.split()[5:] == [f"{card['checks']['preconditioned_sharpness']:.3g}"
                                   for card in got["cards"].values()]
  assert "predict" not in stdout and "score" not in stdout and "rule" not in stdout
  assert not any({"score", "prediction", "predicted_max_lr"} & set(card) | {"predicted_max_lr"} & set(card["checks"])
                 for card in got["cards"].values())


@pytest.mark.slow
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
    assert c["gd_max_lr"] == pytest.approx(2 / c["sharpness_init"])
    assert c["backward_stability"] == pytest.approx(np.sum(np.log10(1 + np.array(card["block_jacobian"][0]))))
  assert set(got["cards"]["peri"]["checks"]["backward_products"]) == {"norm_in", "norm_out"}


@pytest.mark.slow
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


@pytest.mark.slow
def test_output_projections_x10_sharpen_the_warmed_up_model(tmp_path):
  """Pre-LN's branches are linear in their output scale: x10 on every output projection gives a
  larger preconditioned sharpness after the warmup."""
  config = small_config("pre", tmp_path)
  cfg = ModelConfig.of(config.model)
  params = decoder.init(cfg, jax.random.key(config.seed))
  batch_BT1, key = inputs.probe_batch(config, held_out=True), inputs.probe_key(config)
  base, scaled = (float(lab._sharpness(cfg, p, *lab.adam_warmup(config, p), batch_BT1, key)[1])
                  for p in (params, lab_checks.scale_outputs(params, 10.0)))
  assert scaled > 1.5 * base > 0


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


@pytest.mark.slow
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


def test_gradient_descents_edge_and_the_backward_stability_bound():
  assert lab_checks.gd_max_lr(4.0) == 0.5 == curvature.adam_stability_threshold(0.0) / 4.0  # 2 / sharpness
  for broken in (float("nan"), float("inf"), -1.0):
    assert lab_checks.gd_max_lr(broken) == 0.0
  assert lab_checks.backward_stability([0.0, 9.0, 0.0]) == pytest.approx(1.0)


@pytest.mark.parametrize("argv,needle", [
    (["nosuch"], f"placement 'nosuch': expected one of {', '.join(PLACEMENTS)}"),
    ([], "name a PLACEMENT or --all"),
    (["peri", "--width", "30"], "model.d_model=30"),
    (["peri", "--rank", "."], "Unknown command line flag 'rank'"),
    (["--all", "pre"], "--all takes no PLACEMENT"),
    (["--all", "--depth", "4"], "--depth: --all reads the filed grids at their own depth"),
    (["--all", "--results", "/nonexistent"], "neither ladder_cpu/ nor stability_placements/ is filed there"),
    (["--all", "--width", "0"], "flag --width=0: 0 is not a positive integer"),  # was a math domain error
    # each was dropped unsaid: the lab sets these itself, and --all reads what the grids trained
    (["pre", "--config.model.placement=peri"], "--config.model.placement=peri: the lab sets model.placement"),
    (["pre", "--config.model.n_layer=3"], "--config.model.n_layer=3: the lab sets model.n_layer (--depth)"),
    (["pre", "--results", "results"], "--results: only --all reads the filed grids"),
    (["--all", "--config.model.n_layer=3"], "--config.model.n_layer=3: --all reads the filed grids"),
])
def test_bad_input_is_one_line_before_any_compile(capsys, monkeypatch, argv, needle):
  monkeypatch.setattr(lab, "measure_all", lambda configs: pytest.fail("measured despite bad input"))
  assert main.main(["lab", *argv]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and needle in err, err


@pytest.mark.slow
def test_all_prints_each_placements_measured_maximum_stable_rate(capsys, tmp_path):
  """`nplace lab --all` on the committed results: every configuration of the placements grid
  (its own and the ones it reuses), the median seed's maximum stable rate and each seed's,
  measured and never predicted; --json holds the same rows."""
  assert main.main(["lab", "--all", "--results", str(ROOT / "results"), "--json", str(tmp_path / "all.json")]) == 0
  stdout = capsys.readouterr().out
  assert "Maximum stable learning rate measured, median seed (each seed)" in stdout
  assert "| Pre-LN | synthetic (depth 12, width 32) | 0.1 (0.1, 0.1, 0.1) |" in stdout
  assert "| Peri-LN | synthetic (depth 12, width 32) | 0.32 (0.32, 0.32, 0.32) |" in stdout
  rows = [r for r in json.loads((tmp_path / "all.json").read_text())["measured"] if r["data"].startswith("synthetic")]
  assert len(rows) == 12 and rows[2]["configuration"] == "Post-LN"
  # the scale ladder's arms by width, on Tiny Shakespeare
  assert "| Peri-LN | shakespeare | " in stdout
  assert "predict" not in stdout


def test_scale_ratio_counts_identity_blocks_as_invariant():
  """ReZero's blocks are the identity at init: |J_l - I| is 0 at any output scale."""
  assert lab_checks.scale_ratio([0.0, 0.0], [0.0, 0.0]) == 1.0
  np.testing.assert_allclose(lab_checks.scale_ratio([0.0, 2.0], [0.0, 8.0]), 2.0)  # sqrt(1 * 4)
  np.testing.assert_allclose(lab_checks.scale_ratio([1.0, 1.0], [10.0, 10.0]), 10.0)
