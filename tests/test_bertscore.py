"""BERTScore for real: `nplace train` on a small byte-level text corpus, then `nplace eval` with
eval.bertscore_model set to a local all-MiniLM-L6-v2, as a user runs them. Needs the
`bertscore-model` extra (bert-score, torch and the packaged model), which `make test`'s venv
lacks: there it skips."""
import importlib.util
import json
import math
import os
import pathlib
import random
import subprocess
import sys
import zipfile

import pytest

from nplace.train import scores

ROOT = pathlib.Path(__file__).resolve().parent.parent
NPLACE = pathlib.Path(sys.executable).parent / "nplace"
MODEL_PACKAGE = importlib.util.find_spec("all_minilm_l6_v2")  # found, not imported: its import prints

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("bert_score") is None or MODEL_PACKAGE is None,
    reason="needs bert-score and the packaged all-MiniLM-L6-v2: pip install 'nplace[bertscore-model]'")

WORDS = {"subject": ["the cat", "a dog", "the old man", "my sister", "the teacher", "a small bird"],
         "verb": ["sat on", "looked at", "walked past", "painted", "found", "carried"],
         "object": ["the mat", "a red door", "the river", "an apple", "the garden", "a letter"]}
TRAIN = [  # the tiny preset, smaller (bytes: vocab 257 fits its 512); past the all-space argmax
    # of the unigram stage (a blank prediction scores 0) to misspelt words, in ~2 s of steps
    "--config", str(ROOT / "experiments/tiny.py:peri"),
    "--config.model.n_layer=2", "--config.model.d_model=64", "--config.data.tokenizer=byte",
    "--config.data.seq_len=32", "--config.data.val_fraction=0.1", "--config.train.steps=300",
    "--config.train.batch_size=16", "--config.train.log_every=100", "--config.train.eval_every=300",
    "--config.train.eval_batches=1", "--config.checkpoint.every=300", "--config.optim.lr=1e-2",
    "--config.optim.warmup_steps=10",
]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> pathlib.Path:
  """The model directory (config, tokenizer, safetensors), unzipped from the package's model.zip."""
  out = tmp_path_factory.mktemp("models") / "all-MiniLM-L6-v2"
  with zipfile.ZipFile(pathlib.Path(MODEL_PACKAGE.origin).parent / "model.zip") as z:
    z.extractall(out)
  return out


def corpus(path: pathlib.Path) -> pathlib.Path:
  """~25 KB of seeded English sentences from a few words: learnable in a few hundred steps."""
  rng = random.Random(0)
  lines = [" ".join(rng.choice(WORDS[k]) for k in ("subject", "verb", "object")) + "." for _ in range(1000)]
  path.write_text("\n".join(lines) + "\n")
  return path


def nplace(*args, env):
  done = subprocess.run([NPLACE, *map(str, args)], env=env, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stdout + done.stderr
  return done


def test_eval_command_computes_bertscore_with_a_local_model(minilm, tmp_path):
  env = dict(os.environ, NPLACE_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu")
  config = [*TRAIN, f"--config.data.source=text:{corpus(tmp_path / 'corpus.txt')}"]
  nplace("train", "--workdir", tmp_path / "run", *config, env=env)
  done = nplace("eval", "--workdir", tmp_path / "run", "--json", tmp_path / "eval.json", *config,
                f"--config.eval.bertscore_model={minilm}", env=env)
  out = json.loads((tmp_path / "eval.json").read_text())
  assert out["step"] == 300 and out["rouge_text"] == "text (byte tokenizer)"
  for key in ("bertscore_p", "bertscore_r", "bertscore_f1"):
    assert math.isfinite(out[key]) and 0 < out[key] <= 1, (key, out[key])
    assert key in done.stdout
  assert "BERTScore" not in done.stdout  # no note: it ran


def test_identical_strings_score_one_and_a_blank_pair_zero(minilm):
  # Pair 1 identical (P = R = F1 = 1), pair 2 a blank prediction (0, bert-score's rule): mean 0.5.
  got = scores.bertscore(["the cat sat on the mat.", "   "], ["the cat sat on the mat.", "a dog found a letter."],
                         str(minilm), None)
  assert got == pytest.approx({"bertscore_p": 0.5, "bertscore_r": 0.5, "bertscore_f1": 0.5}, abs=1e-3)
