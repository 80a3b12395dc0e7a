"""`nplace eval` on a tiny trained run: the same numbers training logged, from the checkpoint's
own config; per-step checkpoints; bad input in one line."""
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing import event_accumulator

from nplace.commands import main
from nplace.train.loop import train

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


def test_training_summary_holds_the_eval_numbers(run):
  _, _, summary = run
  assert summary.rouge_text == "token ids"
  assert summary.val_perplexity >= summary.val_perplexity_of_mean_loss  # Jensen
  assert summary.val_perplexity_of_mean_loss == pytest.approx(math.exp(summary.val_loss))
  assert all(0 <= getattr(summary, k) <= 1 for k in ("rouge1", "rouge2", "rougeL"))
  assert summary.bertscore_f1 is None and summary.skipped_steps == 0


def test_eval_command_reproduces_training_eval_from_the_checkpoint_config(run, tmp_path):
  workdir, _, summary = run
  done = eval_command("--workdir", workdir, "--json", tmp_path / "eval.json")
  assert done.returncode == 0, done.stderr
  out = json.loads((tmp_path / "eval.json").read_text())
  assert out["step"] == 4 and out["rouge_text"] == "token ids"
  for key in ("val_loss", "val_perplexity", "val_perplexity_of_mean_loss", "rouge1", "rouge2", "rougeL"):
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


def test_eval_without_checkpoints_is_one_line(tmp_path, capsys):
  assert main.main(["eval", "--workdir", str(tmp_path)]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "no checkpoints" in err
