"""`nplace convert` against Hugging Face's own GPT-2 (transformers 4.x FlaxGPT2LMHeadModel,
offline): logits and loss both ways on GPT-2's 50257-token vocabulary, bad input as one line
(exit 2), and `nplace probe` / `nplace train` on a converted checkpoint."""
import contextlib
import io
import json
import os
import pathlib
import shutil
import stat

import jax
import ml_collections
import numpy as np
import pytest
from flax import traverse_util
from safetensors.numpy import load_file, save_file
from transformers import GPT2Config, FlaxGPT2LMHeadModel

from nplace import hf
from nplace.commands import main, train as train_command
from nplace.config import ModelConfig
from nplace.model import decoder
from nplace.train import checkpoint, state as train_state
from nplace.config import experiment

ROOT = pathlib.Path(__file__).resolve().parent.parent
SIZES = dict(n_positions=16, n_embd=32, n_layer=2, n_head=4)
SMALL_RUN = [  # probe and train settings for a converted 2-layer d=32 model
    "--config.data.synthetic_tokens=65536", "--config.model.remat=none",
    "--config.probe.batch_size=2", "--config.probe.hutchinson_probes=1", "--config.probe.power_iters=0",
    "--config.train.steps=3", "--config.train.batch_size=4", "--config.train.log_every=1",
    "--config.train.eval_every=3", "--config.train.eval_batches=1", "--config.checkpoint.every=3",
    "--config.checkpoint.async_save=False", "--config.optim.warmup_steps=1", "--config.optim.lr=1e-3",
]


def write_hf_gpt2(directory, vocab_size, seed=0):
  """A random HF GPT-2 (every weight random, LayerNorm gains near 1) as HF writes it for
  PyTorch: config.json from GPT2Config.save_pretrained, model.safetensors under the names
  and [in, out] layouts transformers' PyTorch->Flax loader maps back (checked below)."""
  hf_model = FlaxGPT2LMHeadModel(GPT2Config(vocab_size=vocab_size, **SIZES), _do_init=False)
  rng = np.random.default_rng(seed)

  def draw(path, shape):
    noise = 0.2 * rng.standard_normal(shape.shape).astype(np.float32)
    return noise + 1 if path[-1].key == "scale" else noise

  params = jax.tree_util.tree_map_with_path(draw, hf_model.params_shape_tree)
  hf_model.config.save_pretrained(directory)
  torch_layout = {}
  for name, value in traverse_util.flatten_dict(params, sep=".").items():
    base, leaf = name.rsplit(".", 1)
    torch_layout[name if leaf == "bias" else f"{base}.weight"] = value.T if leaf == "kernel" else value
  save_file({k: np.ascontiguousarray(v) for k, v in torch_layout.items()}, directory / "model.safetensors",
            metadata={"format": "pt"})
  return hf_model, params


def run(*argv):
  """nplace.commands.main in-process: (exit code, stdout, stderr)."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = main.main([str(a) for a in argv])
  return code, out.getvalue(), err.getvalue()


def convert_from_hf(directory, workdir):
  """Converts; returns the config the printed flags give."""
  code, out, err = run("convert", "--from-hf", directory, "--out", workdir)
  assert code == 0, err
  flags = out.splitlines()[-1].split()
  assert flags[:2] == ["--config", "experiments/gpt2.py:124m"], out
  return train_command.COMMAND.parse(["--config", f"{ROOT / 'experiments/gpt2.py'}:124m", *flags[2:]])[0].config, flags


def assert_close(actual, expected, rtol=1e-5):
  err = np.max(np.abs(np.asarray(actual, np.float64) - expected)) / np.max(np.abs(expected))
  assert err < rtol, err


def cross_entropy(logits_BTV, targets_BT):
  logits = np.asarray(logits_BTV, np.float64)
  logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  return float(np.mean(logz - np.take_along_axis(logits, targets_BT[..., None], -1)[..., 0]))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
  """A random HF GPT-2 with the real vocabulary, its logits, and its conversion to nplace."""
  directory = tmp_path_factory.mktemp("hf")
  hf_model, params = write_hf_gpt2(directory, vocab_size=50257)
  batch = np.random.default_rng(1).integers(0, 50257, (2, 13))
  logits = np.asarray(hf_model(batch[:, :-1], params=params).logits)
  workdir = tmp_path_factory.mktemp("run")
  config, flags = convert_from_hf(directory, workdir)
  return dict(dir=directory, params=params, batch=batch, logits=logits, workdir=workdir,
              config=config, flags=flags)


@pytest.mark.slow
def test_the_test_checkpoint_is_what_transformers_reads(gpt2):
  """transformers' own loader maps the written file back to exactly the drawn weights."""
  loaded = FlaxGPT2LMHeadModel.from_pretrained(gpt2["dir"]).params
  assert jax.tree.all(jax.tree.map(np.array_equal, loaded, gpt2["params"]))


def test_from_hf_reproduces_logits_and_loss(gpt2):
  config = gpt2["config"]
  assert config.model.vocab_size == 50257 and config.model.placement == "pre"
  params, step = checkpoint.restore_params(config, gpt2["workdir"])
  assert step == 0
  batch = gpt2["batch"]
  m = ModelConfig.of(config.model)
  assert_close(decoder.apply(m, params, batch[:, :-1]), gpt2["logits"])
  loss = float(decoder.loss(m, params, batch))
  assert abs(loss - cross_entropy(gpt2["logits"], batch[:, 1:])) < 1e-5 * loss


def test_round_trip_to_hf_loads_in_transformers(gpt2, tmp_path):
  code, _, err = run("convert", "--to-hf", "--workdir", gpt2["workdir"], "--out", tmp_path)
  assert code == 0, err
  hf_model = FlaxGPT2LMHeadModel.from_pretrained(tmp_path)
  assert (hf_model.config.n_embd, hf_model.config.n_layer, hf_model.config.vocab_size) == (32, 2, 50257)
  assert_close(hf_model(gpt2["batch"][:, :-1]).logits, gpt2["logits"])
  source, written = load_file(gpt2["dir"] / "model.safetensors"), load_file(tmp_path / "model.safetensors")
  assert sorted(source) == sorted(written)
  assert all(np.array_equal(source[k], written[k]) for k in source)
  umask = os.umask(0)
  os.umask(umask)
  assert stat.S_IMODE((tmp_path / "model.safetensors").stat().st_mode) == 0o666 & ~umask  # not safetensors' 0600
  # a checkpoint there is not replaced: a sharded one's index would be read before the new file
  (tmp_path / "model.safetensors").rename(tmp_path / "model-00001-of-00001.safetensors")
  code, _, err = run("convert", "--to-hf", "--workdir", gpt2["workdir"], "--out", tmp_path)
  assert code == 2 and err == (f"nplace convert: --out {tmp_path}: already holds config.json (a Hugging Face "
                               "checkpoint); give a new or empty directory\n"), err
  assert not (tmp_path / "model.safetensors").exists()


def test_real_gpt2_sizes_print_their_preset():
  for size, hf_config in (("124m", GPT2Config()), ("350m", GPT2Config(n_layer=24, n_head=16, n_embd=1024))):
    config, line = hf.config_from_hf(hf_config.to_dict(), "config.json")
    assert line == f"--config experiments/gpt2.py:{size}"
    assert config.model == experiment("gpt2", size).model


@pytest.fixture(scope="module")
def small(tmp_path_factory):
  """A converted HF GPT-2 of 320 tokens: probe and train run on it in seconds."""
  directory = tmp_path_factory.mktemp("hf_small")
  write_hf_gpt2(directory, vocab_size=320, seed=2)
  workdir = tmp_path_factory.mktemp("small_run")
  _, flags = convert_from_hf(directory, workdir)
  data = f"--config.data.cache_dir={tmp_path_factory.mktemp('data')}"  # prepared once
  return dict(dir=directory, workdir=workdir,
              flags=["--config", f"{ROOT / 'experiments/gpt2.py'}:124m", *flags[2:], *SMALL_RUN, data])


def broken(source, target, edit):
  shutil.copytree(source, target)
  edit(target)
  return target


def edit_config(**changes):
  def edit(d):
    hf_config = json.loads((d / "config.json").read_text()) | changes
    (d / "config.json").write_text(json.dumps({k: v for k, v in hf_config.items() if v is not None}))
  return edit


def edit_tensors(change):
  def edit(d):
    tensors = load_file(d / "model.safetensors")
    change(tensors)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
  return edit


@pytest.mark.parametrize("edit,needle", [
    (edit_config(model_type="llama"), "model_type='llama'"),
    (edit_config(activation_function="relu"), "activation_function='relu'"),
    (edit_config(n_embd=None), "'n_embd'"),
    (edit_config(tie_word_embeddings=False), "tie_word_embeddings"),
    (edit_config(n_head="four"), "Could not override field 'n_head'"),
    (lambda d: (d / "config.json").write_text("[1, 2]"), "config.json: holds a JSON list, not an object"),
    (edit_tensors(lambda t: t.pop("transformer.h.1.mlp.c_fc.bias")), "'h.1.mlp.c_fc.bias'"),
    (edit_tensors(lambda t: t.update({"transformer.h.0.attn.c_attn.weight": np.zeros((32, 32), np.float32)})),
     "'transformer.h.0.attn.c_attn.weight' has shape (32, 32), config.json implies (32, 96)"),
    (edit_tensors(lambda t: t.update({"transformer.h.2.ln_1.weight": np.ones(32, np.float32)})),
     "'transformer.h.2.ln_1.weight'"),
    (edit_tensors(lambda t: t.update({"lm_head.weight": np.zeros((320, 32), np.float32)})), "lm_head.weight"),
    (lambda d: (d / "model.safetensors").unlink(), "model.safetensors: not found"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:-100]),
     "model.safetensors: not a whole safetensors file ("),
    (lambda d: (d / "config.json").unlink(), "config.json"),
])
def test_bad_hf_input_is_one_line(small, tmp_path, edit, needle):
  source = broken(small["dir"], tmp_path / "hf", edit)
  code, out, err = run("convert", "--from-hf", source, "--out", tmp_path / "run")
  assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err
  assert not (tmp_path / "run").exists()


def test_to_hf_refuses_a_placement_hf_has_not(make_config, tmp_path):
  config = make_config(placement="peri")
  zeros = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), decoder.abstract_params(config.model))
  state = train_state.start_from(config, zeros)  # a peri run's checkpoint (weights don't matter)
  mngr = checkpoint.manager(tmp_path, ml_collections.ConfigDict(dict(every=1, keep=1, async_save=False)))
  checkpoint.save(mngr, 5, state, None, config)
  code, _, err = run("convert", "--to-hf", "--workdir", tmp_path, "--out", tmp_path / "hf")
  assert code == 2 and err.count("\n") == 1 and "model.placement='peri'" in err, err
  assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("argv,needle", [
    (["--out", "x"], "one of --from-hf"),
    (["--to-hf", "--out", "x"], "--workdir"),
    (["--to-hf", "--workdir", "no/such/run", "--out", "x"], "no/such/run"),
    (["--from-hf", "d", "--to-hf", "--out", "x"], "one of --from-hf"),
])
def test_convert_usage_errors_are_one_line(argv, needle):
  code, _, err = run("convert", *argv)
  assert code == 2 and err.count("\n") == 1 and needle in err, err


@pytest.mark.slow
def test_probe_runs_on_a_converted_checkpoint(small, tmp_path):
  code, _, err = run("probe", *small["flags"], "--workdir", small["workdir"], "--json", tmp_path / "p.json")
  assert code == 0, err
  out = json.loads((tmp_path / "p.json").read_text())
  assert out["step"] == 0 and len(out["rms"]) == 2 and len(out["jacobian_frobenius"]) == 2
  assert np.all(np.isfinite(out["similarity"]))
  code, _, err = run("probe", *small["flags"], "--config.model.n_head=8", "--workdir", small["workdir"],
                     "--json", tmp_path / "q.json")
  assert code == 2 and err.count("\n") == 1 and "model.n_head=8" in err, err


@pytest.mark.slow
def test_train_fine_tunes_a_converted_checkpoint(small, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(small["workdir"], workdir)
  code, _, err = run("train", *small["flags"], "--workdir", workdir)
  assert code == 0, err
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["status"] == "completed" and summary["step"] == 3 and np.isfinite(summary["val_loss"])
  config = train_command.COMMAND.parse(small["flags"])[0].config
  start, _ = checkpoint.restore_params(config, workdir, 0)
  tuned, _ = checkpoint.restore_params(config, workdir, 3)
  # Three AdamW steps of lr <= 1e-3 move each weight by a few 1e-3; a fresh init would differ by ~0.2.
  moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), tuned, start))
  assert 0 < max(moved) < 5e-3


def test_a_vocabulary_under_the_synthetic_languages_converts_and_an_interrupted_conversion_reruns(tmp_path):
  """A character-level GPT-2 (nanoGPT's shakespeare_char has 65 tokens) gets a synthetic
  language it can read; a conversion killed mid-save left only orbax's unfinished step."""
  (tmp_path / "hf").mkdir()
  write_hf_gpt2(tmp_path / "hf", vocab_size=65)
  (tmp_path / "run/checkpoints/0.orbax-checkpoint-tmp").mkdir(parents=True)
  config, flags = convert_from_hf(tmp_path / "hf", tmp_path / "run")
  assert "--config.data.synthetic_vocab=65" in flags and config.data.synthetic_vocab == 65
  assert checkpoint.held_steps(tmp_path / "run") == {0}


def test_base_model_names_and_mask_buffers_read_the_same(small, tmp_path):
  """The released checkpoints name tensors without `transformer.` and may carry attn.bias buffers."""
  def strip(tensors):
    for key in list(tensors):
      tensors[key.removeprefix("transformer.")] = tensors.pop(key)
    tensors["h.0.attn.bias"] = np.tril(np.ones((1, 1, 16, 16), np.float32))
  source = broken(small["dir"], tmp_path / "hf", edit_tensors(strip))
  config = train_command.COMMAND.parse(small["flags"])[0].config
  m = ModelConfig.of(config.model)
  plain, prefixed = hf.read_tensors(source, m), hf.read_tensors(small["dir"], m)
  assert sorted(plain) == sorted(prefixed) and all(np.array_equal(plain[k], prefixed[k]) for k in plain)
