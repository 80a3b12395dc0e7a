"""What the eval's text scores tell apart, on models made to differ: an untrained one, one that
copies its input and the synthetic language's own rule; the KV cache's continuations against a
full forward per token; `nplace eval` on a tiny trained run: the same numbers training logged,
from the checkpoint's own config; per-step checkpoints; bad input in one line."""
import json
import math
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from nplace.commands import main
from nplace.config import ModelConfig
from nplace.data import prepare, synthetic
from nplace.logs import events
from nplace.model import decoder
from nplace.train import evaluation, steps
from nplace.train.loop import train
from nplace.train.summary import Summary
from test_model import random_params

NPLACE = pathlib.Path(sys.executable).parent / "nplace"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """4 steps of a tiny model, evaluated (and checkpointed) at steps 0, 2 and 4."""
  from conftest import tiny_config
  c = tiny_config()
  c.model.vocab_size = 256
  c.data.update(seq_len=16, synthetic_tokens=65536, cache_dir=str(tmp_path_factory.mktemp("cache")))
  c.train.update(steps=4, batch_size=8, eval_every=2, eval_batches=2)
  c.checkpoint.every = 2
  workdir = tmp_path_factory.mktemp("run")
  return workdir, c, train(c, workdir)


def eval_command(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([NPLACE, "eval", *map(str, args)], env=env, capture_output=True, text=True, timeout=300)


def copy_forward(vocab_size):
  """A model that predicts its input token at every position."""
  return lambda params, tokens_BT, dt: 10.0 * jax.nn.one_hot(tokens_BT, vocab_size)


def language_forward(data, vocab_size):
  """The synthetic language's own next-token law as a model: log p(next | key), the key being
  the last token and the groups of the order - 1 before it (nplace/data/synthetic.py); before
  position order - 1 the missing tokens count as token 0."""
  chain = synthetic.build(data.synthetic_vocab, data.synthetic_order, data.synthetic_seed)
  K, V = chain.succ_KM.shape[0], chain.vocab
  p_KV = np.tile(synthetic.RESTART * chain.zipf_V, (K, 1))
  np.add.at(p_KV, (np.arange(K)[:, None], chain.succ_KM), (1 - synthetic.RESTART) * chain.prob_KM)
  log_p_KV = jnp.asarray(np.log(p_KV), jnp.float32)
  group_V = jnp.asarray(chain.group_V)

  def forward(params, tokens_BT, dt):
    key_BT = tokens_BT
    for back in range(1, chain.order):  # the token `back` positions earlier: digit back - 1 of the groups
      earlier_BT = jnp.pad(tokens_BT, ((0, 0), (back, 0)))[:, :-back]
      key_BT = key_BT + V * synthetic.GROUPS ** (back - 1) * group_V[earlier_BT]
    return jnp.pad(log_p_KV[key_BT], ((0, 0), (0, 0), (0, vocab_size - V)), constant_values=-1e9)

  return forward


@pytest.fixture(scope="module")
def scored(run):
  """The eval's numbers, on the run's validation batches, of an untrained model (the run's own
  step-0 evaluation), a copying one and the language itself."""
  workdir, c, _ = run
  logged = {tag: series for tag, series in events.read_scalars(workdir).items() if tag.startswith("eval/")}
  assert all(steps_logged[0] == 0 for steps_logged, _ in logged.values())
  scores = {"untrained": {tag.removeprefix("eval/"): float(values[0]) for tag, (_, values) in logged.items()}}
  for name, forward in (("copy", copy_forward(c.model.vocab_size)),
                        ("language", language_forward(c.data, c.model.vocab_size))):
    evaluate = evaluation.Evaluator(c, jax.jit(steps.make_eval_step(c, forward)), lambda b: b, active=True)
    scores[name] = evaluate(params=None)  # these models have no parameters
  return scores


@pytest.mark.slow
def test_an_untrained_model_scores_high_teacher_forced_and_low_generated(scored):
  # its argmax is mostly its own input token, one position off the target: ROUGE's overlap forgives that
  untrained = scored["untrained"]
  assert untrained["teacher_forced_rougeL"] > 0.6 and untrained["gen_rougeL"] < 0.5, untrained


def test_a_model_that_copies_its_input_scores_the_copy_baseline_and_generates_nothing_right(scored):
  copy = scored["copy"]
  for n in ("1", "2", "L"):
    assert copy[f"teacher_forced_rouge{n}"] == copy[f"copy_rouge{n}"], n
  assert copy["copy_rougeL"] > 0.9 and copy["gen_rougeL"] < 0.2, copy


def test_the_language_itself_beats_both_on_generated_rouge_but_not_teacher_forced(scored, run):
  _, c, _ = run
  language = scored["language"]
  # it is the language's law: its loss is the entropy rate (but for the first token's missing context)
  entropy_rate = prepare.read_meta(prepare.prepared_dir(c.data))["entropy_rate"]
  assert language["loss"] == pytest.approx(entropy_rate, abs=0.3)
  assert language["gen_rougeL"] > 3 * max(scored["untrained"]["gen_rougeL"], scored["copy"]["gen_rougeL"], 0.02)
  assert language["gen_rouge1"] > max(scored["untrained"]["gen_rouge1"], scored["copy"]["gen_rouge1"])
  # what the copy baseline is there for: teacher-forced ROUGE ranks copying above knowing the language
  assert language["teacher_forced_rougeL"] < scored["copy"]["teacher_forced_rougeL"]


@pytest.mark.parametrize("model", [
    {"placement": "post"}, {"placement": "pre", "attention": "centered", "qk_norm": True},
    {"placement": "peri", "embed_norm": True, "norm": "dyt", "mlp": "swiglu"},
    {"placement": "hybrid", "attention_impl": "xla"},
    {"placement": "mix", "n_layer": 3, "mix_post_fraction": 0.5, "remat": "full", "dtype": "bfloat16"}])
@pytest.mark.slow
def test_the_kv_cache_generates_the_tokens_of_a_full_forward_per_token(make_config, model):
  """The eval step's continuations, decoder.generate's (a KV cache, both batches' rows in one
  loop), are those of a full forward per new token (steps.greedy_continuation: the decoding
  before the cache, which hand-made models still use). Beside the placements, the options that
  reach attention: the prefix average's row (centered), cached keys normed (qk_norm, hybrid's
  q, k, v), the einsum path (xla, centered) against the CPU's fused one (causal halves), DyT,
  mix's per-layer lax.cond under remat, bfloat16."""
  c = make_config(**model)
  cfg = ModelConfig.of(c.model)
  params = random_params(cfg, jax.random.key(0))
  batches_JBT1 = jax.random.randint(jax.random.key(1), (2, 4, c.data.seq_len + 1), 0, cfg.vocab_size)
  full_forward = lambda params, tokens_BT, dt: decoder.apply(cfg, params, tokens_BT, dt=dt)
  cached, reference = (jax.jit(steps.make_eval_step(c, forward))(params, batches_JBT1)
                       for forward in (None, full_forward))
  assert cached["gen_JBG"].shape == (2, c.eval.generate, c.data.seq_len - steps.prompt_length(c.data.seq_len))
  np.testing.assert_array_equal(cached["gen_JBG"], reference["gen_JBG"])


def test_training_summary_holds_the_eval_numbers(run):
  workdir, _, summary = run
  assert Summary.read(workdir / "summary.json") == summary
  assert summary.rouge_text == "token ids"
  assert summary.val_perplexity >= summary.val_perplexity_of_mean_loss  # Jensen
  assert summary.val_perplexity_of_mean_loss == pytest.approx(math.exp(summary.val_loss))
  assert all(0 <= getattr(summary, k) <= 1 for k in ("rouge1", "rouge2", "rougeL", "copy_rouge1", "gen_rouge1"))
  assert summary.copy_rougeL > 0.9 and summary.gen_rougeL < 0.5  # 4 steps: it copies, and generates nothing right
  assert summary.gen_decoding == "greedy, prompt 8 tokens, 8 generated, 8 sequences"  # 4 of each batch
  assert summary.bertscore_f1 is None and summary.gen_bertscore_f1 is None and summary.skipped_steps == 0
  acc = event_accumulator.EventAccumulator(str(workdir), size_guidance={"scalars": 0})
  acc.Reload()
  tags = set(acc.Tags()["scalars"])
  assert {"eval/teacher_forced_rougeL", "eval/copy_rougeL", "eval/gen_rougeL"} <= tags and "eval/rougeL" not in tags


@pytest.mark.slow
def test_eval_command_reproduces_training_eval_from_the_checkpoint_config(run, tmp_path):
  workdir, _, summary = run
  done = eval_command("--workdir", workdir, "--json", tmp_path / "eval.json")
  assert done.returncode == 0, done.stderr
  out = json.loads((tmp_path / "eval.json").read_text())
  assert out["step"] == 4 and out["rouge_text"] == "token ids" and out["gen_decoding"] == summary.gen_decoding
  for key in ("val_loss", "val_perplexity", "val_perplexity_of_mean_loss", "rouge1", "rouge2", "rougeL",
              "copy_rougeL", "gen_rouge1", "gen_rouge2", "gen_rougeL"):
    assert out[key] == pytest.approx(getattr(summary, key), rel=1e-5), key
    assert key in done.stdout
  assert "eval: BERTScore off" in done.stdout


def test_eval_command_at_a_step_with_an_overriding_config(run, tmp_path, capsys):
  workdir, config, _ = run
  acc = event_accumulator.EventAccumulator(str(workdir), size_guidance={"scalars": 0})
  acc.Reload()
  logged = {e.step: e.value for e in acc.Scalars("eval/perplexity")}
  experiment = tmp_path / "cfg.py"  # the run's config as an experiment file, ROUGE off
  experiment.write_text("import json\nfrom nplace.config import from_saved\n\n"
                        f"def get_config():\n  return from_saved(json.loads({config.to_json()!r}))\n")
  code = main.main(["eval", "--workdir", str(workdir), "--step", "2", "--config", str(experiment),
                   "--config.eval.rouge=False", "--json", str(tmp_path / "eval.json")])
  assert code == 0, capsys.readouterr().err
  out = json.loads((tmp_path / "eval.json").read_text())
  assert out["step"] == 2 and out["rouge_text"] is None and "rouge1" not in out
  assert out["gen_decoding"] is None and "gen_rouge1" not in out  # nothing to score a continuation with
  assert out["val_perplexity"] == pytest.approx(logged[2], rel=1e-5)


def test_eval_overrides_apply_to_the_checkpoint_config(run, tmp_path, capsys):
  workdir, _, summary = run
  code = main.main(["eval", "--workdir", str(workdir), "--config.train.eval_batches=1", "--config.eval.rouge=False",
                    "--json", str(tmp_path / "eval.json")])
  assert code == 0, capsys.readouterr().err
  out = json.loads((tmp_path / "eval.json").read_text())
  assert out["step"] == 4 and "rouge1" not in out
  assert out["val_loss"] != pytest.approx(summary.val_loss, rel=1e-6)  # one batch of the two the run evaluated
  assert main.main(["eval", "--workdir", str(workdir), "--config.no.such=1"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "--config.no.such=1" in err, err


@pytest.mark.parametrize("override,key", [("--config.eval.generate=-1", "eval.generate"),
                                          ("--config.data.seq_len=1", "eval.generate"),
                                          ("--config.train.eval_batches=100000", "train.eval_batches")])
def test_a_bad_eval_config_is_one_line(run, capsys, override, key):
  workdir, _, _ = run  # seq_len 1: no half a sequence to prompt with; more batches than the split holds
  assert main.main(["eval", "--workdir", str(workdir), override]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and f"config error: {key}=" in err, err


def test_eval_without_checkpoints_is_one_line(tmp_path, capsys):
  assert main.main(["eval", "--workdir", str(tmp_path)]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "no checkpoints" in err


@pytest.mark.parametrize("tokens,probe_rows,error", [
    (65, 8, None), (64, 0, "train.eval_batches"), (65, 9, "probe.batch_size")])
def test_the_validation_split_is_counted_in_windows_of_seq_len_plus_one(tokens, probe_rows, error):
  """A split of n tokens holds (n - 1) // seq_len windows (consecutive windows share a token):
  65 tokens are 8 windows of 9, 2 batches of 4 or 8 probe rows; 64 are 7."""
  from conftest import tiny_config
  from nplace.errors import ConfigError
  c = tiny_config()
  c.data.seq_len = 8
  c.train.update(batch_size=4, eval_batches=2)
  c.probe.update(every=int(probe_rows > 0), batch_size=max(probe_rows, 1))
  meta = {"shards": {"val": [["val_00000.bin", tokens]]}}
  if error is None:
    evaluation.check_validation_split(c, meta)
  else:
    with pytest.raises(ConfigError, match=error):
      evaluation.check_validation_split(c, meta)


def test_the_decoding_counts_the_global_batchs_rows_not_this_processs(make_config):
  """The eval step prompts the first eval.generate rows of each global batch: one of 2
  processes, loading 4 of its 8 rows, said summary.json's gen_decoding held half as many."""
  c = make_config()
  c.train.batch_size, c.train.eval_batches, c.eval.generate = 8, 2, 8
  one, two = (evaluation.Evaluator(c, eval_step=None, put_batch=None, active=True, share=share).decoding
              for share in ((0, 1), (0, 2)))
  assert one == two and one.endswith(", 16 sequences")
