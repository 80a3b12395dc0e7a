"""`prepare` and `nplace prepare`: round trips, meta.json, idempotence, bad input."""
import gzip
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import tensorflow_datasets as tfds

from nplace.commands import main
from nplace.config import base_config
from nplace.data import prepare as P
from nplace.data import tokenizers
from nplace.errors import DataError
from test_data_tokenizers import tiny_bpe

DOCS = ["first document\nwith two lines\n", "zweites Dokument: naïve — 東京", "3rd " * 40]


def data_config(tmp_path, source, **overrides):
  d = base_config().data
  d.update(source=source, cache_dir=str(tmp_path / "cache"), seq_len=8, val_fraction=0.25)
  d.update(**overrides)
  return d


def all_tokens(directory) -> np.ndarray:
  """Train then val tokens, straight from the shard files meta.json lists."""
  meta = P.read_meta(directory)
  return np.concatenate([np.fromfile(directory / name, meta["dtype"])
                         for split in ("train", "val") for name, _ in meta["shards"][split]])


def documents(tokens, tokenizer):
  cuts = np.flatnonzero(tokens == tokenizer.eos)
  assert cuts[-1] == len(tokens) - 1  # EOS ends the last document too
  return [tokenizer.decode(doc[:-1]) for doc in np.split(tokens, cuts + 1)[:-1]]


def write_corpus(root):
  """DOCS as a .txt file, a .jsonl and a .jsonl.gz (field "body"), in that file order."""
  root.mkdir()
  (root / "a.txt").write_text(DOCS[0])
  (root / "b.jsonl").write_text(json.dumps({"body": DOCS[1]}) + "\n\n")
  with gzip.open(root / "c.jsonl.gz", "wt") as f:
    f.write(json.dumps({"body": DOCS[2], "id": 3}) + "\n")
  return root


@pytest.mark.parametrize("tokenizer", ["byte", "gpt2"])
def test_text_round_trip(tmp_path, monkeypatch, tokenizer):
  monkeypatch.setattr(tokenizers, "gpt2", tiny_bpe)  # the gpt2 path, with a local BPE
  corpus = write_corpus(tmp_path / "corpus")
  d = data_config(tmp_path, f"text:{corpus}", tokenizer=tokenizer, text_field="body")
  out = P.prepared_dir(d)
  tok = tokenizers.make(tokenizer)
  tokens = all_tokens(out)
  assert documents(tokens, tok) == DOCS
  meta = P.read_meta(out)
  assert meta["tokens"]["val"] == round(len(tokens) * 0.25)
  assert sum(meta["tokens"].values()) == len(tokens) and meta["vocab_size"] == tok.vocab_size
  assert meta["documents"] == 3 and meta["entropy_rate"] is None


def test_frequency_loss_and_counts_match_the_shards(tmp_path):
  d = data_config(tmp_path, f"text:{write_corpus(tmp_path / 'corpus')}", text_field="body")
  out = P.prepared_dir(d)
  meta = P.read_meta(out)
  train, val = (np.concatenate([np.fromfile(out / n, np.uint16) for n, _ in meta["shards"][s]])
                for s in ("train", "val"))
  counts = np.bincount(train, minlength=257)
  assert meta["unigram_counts"] == counts.tolist()
  expected = -np.mean([np.log((counts[t] + 1) / (len(train) + 257)) for t in val])
  assert meta["frequency_loss"] == pytest.approx(expected, rel=1e-9)


def test_synthetic_meta_from_the_command_line(tmp_path, capsys):
  out = tmp_path / "syn"
  # without --config, a --config.KEY override applies to the base config (it was an unknown flag)
  argv = ["prepare", "--source", "synthetic", "--tokenizer", "byte", "--out", str(out),
          "--config.data.val_fraction=0.02"]
  assert main.main(argv) == 0
  meta = json.loads((out / "meta.json").read_text())
  assert meta["entropy_rate"] < meta["bigram_entropy"] < meta["unigram_entropy"]
  # The exact unigram entropy is the frequency loss of an infinite sample.
  assert meta["frequency_loss"] == pytest.approx(meta["unigram_entropy"], abs=0.02)
  assert sum(meta["tokens"].values()) == base_config().data.synthetic_tokens
  assert meta["tokens"]["val"] == pytest.approx(0.02 * base_config().data.synthetic_tokens, rel=0.01)
  out_text = capsys.readouterr().out
  assert "entropy_rate" in out_text
  assert "train on this source with --config.data.source=synthetic --config.data.tokenizer=byte:" in out_text


def test_rerun_is_a_no_op(tmp_path, monkeypatch):
  d = data_config(tmp_path, "synthetic", synthetic_tokens=5000)
  out = P.prepared_dir(d)
  monkeypatch.setattr(P, "_tokenize", lambda *a: pytest.fail("prepared twice"))
  assert P.prepared_dir(d) == out


def test_cache_root_from_environment(tmp_path, monkeypatch):
  monkeypatch.setenv("NPLACE_CACHE", str(tmp_path / "env"))
  d = data_config(tmp_path, "synthetic", synthetic_tokens=5000, cache_dir=None)
  assert P.prepared_dir(d).parent == tmp_path / "env"


def test_a_cache_that_cannot_be_written_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("NPLACE_CACHE", "/proc/none/cache")  # as root a read-only directory is writable; /proc is not
  code = main.main(["train", "--config", "experiments/tiny.py:pre", "--workdir", str(tmp_path / "run"),
                    "--config.data.synthetic_tokens=5000"])
  err = capsys.readouterr().err
  assert code == 2 and err.startswith("nplace train: /proc/none/cache: cannot prepare the data there (") and \
      err.endswith("set NPLACE_CACHE or data.cache_dir to a directory you can write\n"), err


def test_damaged_directory_is_redone_and_shards_without_meta_are_kept(tmp_path):
  d = data_config(tmp_path, "synthetic", synthetic_tokens=5000)
  reference = all_tokens(P.prepared_dir(d))
  out = tmp_path / "out"
  out.mkdir()
  (out / "train_00000.bin").write_bytes(b"\0" * 100)  # shards, but no meta.json: not ours, kept
  with pytest.raises(DataError, match=r"out: not a token directory \(holds 'train_00000.bin', no valid meta.json\); "
                     "refusing to overwrite it"):
    P.prepare(d, out)
  assert (out / "train_00000.bin").read_bytes() == b"\0" * 100
  (out / "train_00000.bin").unlink()
  P.prepare(d, out)  # an empty directory is prepared into
  np.testing.assert_array_equal(all_tokens(out), reference)
  with open(out / "train_00000.bin", "r+b") as f:  # finished, then damaged
    f.truncate(10)
  P.prepare(d, out)
  np.testing.assert_array_equal(all_tokens(out), reference)
  with open(out / "val_00000.bin", "ab") as f:  # or grown: a shard is exactly its meta.json's size
    f.write(b"\0\0")
  P.prepare(d, out)
  np.testing.assert_array_equal(all_tokens(out), reference)


@pytest.mark.slow
def test_killed_run_leaves_nothing_that_is_used(tmp_path):
  out = tmp_path / "out"
  cmd = [sys.executable, "-m", "nplace.commands.main", "prepare", "--config",
         "experiments/tiny.py", "--config.data.synthetic_tokens=50000000", "--out", str(out)]
  proc = subprocess.Popen(cmd, cwd=os.path.dirname(os.path.dirname(__file__)))
  tag = f".out.partial-{socket.gethostname()}-{proc.pid}"
  deadline = time.time() + 60
  while not list(tmp_path.glob(f"{tag}/train_*.bin")) and time.time() < deadline:
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert list(tmp_path.glob(f"{tag}/train_*.bin")) and not out.exists()
  d = data_config(tmp_path, "synthetic", synthetic_tokens=5000)
  P.prepare(d, out)  # clears the dead run's partial directory
  assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_directory_of_other_input_is_refused(tmp_path):
  out = tmp_path / "out"
  P.prepare(data_config(tmp_path, "synthetic", synthetic_tokens=5000), out)
  with pytest.raises(DataError, match="other input"):
    P.prepare(data_config(tmp_path, "synthetic", synthetic_tokens=6000), out)
  (tmp_path / "mine").mkdir()
  (tmp_path / "mine" / "notes.txt").write_text("keep me")
  with pytest.raises(DataError, match="refusing"):
    P.prepare(data_config(tmp_path, "synthetic", synthetic_tokens=5000), tmp_path / "mine")


class TinyDocs(tfds.core.GeneratorBasedBuilder):
  """A real TFDS dataset, built in ArrayRecord format (which needs no TensorFlow)."""
  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {"text": tfds.features.Text(), "id": np.int32}))

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    for i, doc in enumerate(DOCS):
      yield i, {"text": doc, "id": i}


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("tfds")
  TinyDocs(data_dir=root, file_format="array_record").download_and_prepare()
  return root


def test_tfds_round_trip(tmp_path, tfds_dir):
  d = data_config(tmp_path, "tfds:tiny_docs:train", tfds_data_dir=str(tfds_dir))
  docs = documents(all_tokens(P.prepared_dir(d)), tokenizers.ByteTokenizer())
  assert sorted(docs) == sorted(DOCS)  # TFDS stores examples in its own order


@pytest.mark.parametrize("source,needle", [
    ("tfds:tiny_docs:test", "bad split"),
    ("tfds:tiny_docs/nope:train", "nope"),
])
def test_tfds_bad_split_or_config(tmp_path, tfds_dir, source, needle):
  with pytest.raises(DataError, match=needle):
    P.prepared_dir(data_config(tmp_path, source, tfds_data_dir=str(tfds_dir)))


def test_tfds_unprepared_and_wrong_field(tmp_path, tfds_dir):
  with pytest.raises(DataError, match="not prepared"):
    P.prepared_dir(data_config(tmp_path, "tfds:tiny_docs:train", tfds_data_dir=str(tmp_path)))
  with pytest.raises(DataError, match="no feature 'body'.*text, id"):
    P.prepared_dir(data_config(tmp_path, "tfds:tiny_docs:train", tfds_data_dir=str(tfds_dir),
                               text_field="body"))


def test_openwebtext_streams_through_datasets(tmp_path, monkeypatch):
  calls = []

  def load_dataset(repo, split, streaming):
    calls.append((repo, split, streaming))
    return [{"text": doc} for doc in DOCS]

  monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
  docs = documents(all_tokens(P.prepared_dir(data_config(tmp_path, "openwebtext"))),
                   tokenizers.ByteTokenizer())
  assert docs == DOCS and calls == [("Skylion007/openwebtext", "train", True)]


def run_prepare(capsys, *argv):
  code = main.main(["prepare", "--seq-len", "8", "--val-fraction", "0.25", *argv])
  out, err = capsys.readouterr()
  return code, out, err


def test_undecodable_bytes_are_replaced_and_counted(tmp_path, capsys):
  f = tmp_path / "my corpus" / "bad.txt"
  f.parent.mkdir()
  f.write_bytes(b"valid text, then \xff\xfe and \xc3 more text to fill windows " * 2)
  code, out, err = run_prepare(capsys, "--source", f"text:{f}", "--out", str(tmp_path / "out"))
  assert code == 0 and "replaced 6 undecodable bytes" in err and str(f) in err
  # the flags it prints paste into a shell as they are, a path with a space included
  flags = shlex.split(out.splitlines()[-1].split(" with ", 1)[1].split(": training reads", 1)[0])
  assert flags == [f"--config.data.source=text:{f}", "--config.data.tokenizer=byte"]
  meta = P.read_meta(tmp_path / "out")
  assert meta["replaced_bytes"] == 6
  text = tokenizers.ByteTokenizer().decode(all_tokens(tmp_path / "out"))
  assert text.count("\ufffd") == 6


def bad_inputs(tmp_path):
  """(argv, text the one-line error must contain) for each kind of bad input."""
  (tmp_path / "empty.txt").write_text("")
  (tmp_path / "emptydir").mkdir()
  (tmp_path / "blanks").mkdir()
  (tmp_path / "blanks" / "a.txt").write_text("")
  (tmp_path / "short.txt").write_text("tiny")
  (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\nnot json\n')
  (tmp_path / "nofield.jsonl").write_text('{"body": "x"}\n')
  (tmp_path / "doc.pdf").write_text("x")
  (tmp_path / "notgzip.jsonl.gz").write_text('{"text": "ok"}\n')
  whole = gzip.compress("".join(f'{{"text": "line {i}"}}\n' for i in range(1000)).encode())
  (tmp_path / "cut.jsonl.gz").write_bytes(whole[:len(whole) // 2])
  tiny = "experiments/tiny.py"
  return [
      (["--source", f"text:{tmp_path}/empty.txt"], "empty.txt: empty file (0 bytes)"),
      (["--source", f"text:{tmp_path}/emptydir"], "emptydir: empty directory"),
      (["--source", f"text:{tmp_path}/blanks"], "all 1 files are empty"),
      (["--source", f"text:{tmp_path}/missing"], "missing: no such file"),
      (["--source", f"text:{tmp_path}/doc.pdf"], "doc.pdf: expected a .txt"),
      (["--source", f"text:{tmp_path}/short.txt"], "5 tokens, 4 train / 1 val"),
      (["--source", f"text:{tmp_path}/bad.jsonl"], "bad.jsonl:2: not a JSON line"),
      (["--source", f"text:{tmp_path}/nofield.jsonl"], "no string field 'text'"),
      (["--source", f"text:{tmp_path}/notgzip.jsonl.gz"], "notgzip.jsonl.gz: does not decompress (BadGzipFile: "),
      (["--source", f"text:{tmp_path}/cut.jsonl.gz"], "cut.jsonl.gz: does not decompress after line "),
      (["--source", "ftp:corpus"], "data.source='ftp:corpus'"),
      (["--source", "tfds:c4"], "expected tfds:NAME[/CONFIG]:SPLIT"),
      (["--source", "tfds:no_such_dataset:train"], "no TFDS dataset 'no_such_dataset'"),
      (["--source", "text:x", "--tokenizer", "sentencepiece"], "data.tokenizer='sentencepiece'"),
      (["--val-fraction", "1.5"], "data.val_fraction=1.5"),
      (["--config", tiny, "--config.model.vocab_size=100000",
        "--config.data.synthetic_vocab=70000"], "vocab 70000 exceeds its 65536 ids"),
      (["--config", tiny, "--config.data.synthetic_vocab=600"], "exceed model.vocab_size=512"),
      (["--source", "text:x", "--config", tiny, "--config.model.vocab_size=100"],
       "257 tokens exceed model.vocab_size=100"),
  ]


def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys):
  for argv, needle in bad_inputs(tmp_path):
    code, out, err = run_prepare(capsys, *argv, "--out", str(tmp_path / "out"))
    assert (code, out, err.count("\n")) == (2, "", 1) and needle in err, (argv, err)
    assert not (tmp_path / "out").exists()


def test_synthetic_tokens_that_cannot_fit_the_disk_are_one_line_before_anything_is_written(tmp_path, capsys,
                                                                                             monkeypatch):
  monkeypatch.setattr(P.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=9_999))
  code, out, err = run_prepare(capsys, "--source", "synthetic", "--config.data.synthetic_tokens=5000",
                               "--out", str(tmp_path / "out"))  # 5,000 uint16 ids: 10,000 bytes
  assert (code, out) == (2, "") and err == (
      "nplace prepare: config error: data.synthetic_tokens=5000: its 10,000 bytes of uint16 token ids need more "
      f"than the 9,999 bytes free where they are prepared ({tmp_path})\n"), err
  assert sorted(tmp_path.iterdir()) == []  # no partial directory left behind


def test_vocab_larger_than_dtype_when_called_directly(tmp_path):
  d = data_config(tmp_path, "synthetic", synthetic_vocab=70000)
  with pytest.raises(DataError, match="synthetic: vocab 70000 does not fit token dtype uint16"):
    P.prepared_dir(d)


@pytest.mark.slow
def test_shakespeare_ships_prepares_offline_and_trains(tmp_path, capsys, monkeypatch):
  """The shipped corpus is Tiny Shakespeare byte for byte; `nplace prepare --source shakespeare`
  needs no network (sockets refused), its validation split is the text's end, and a run trains on it."""
  import hashlib
  from nplace.data import sources
  text = (sources.CORPORA_DIR / sources.CORPORA["shakespeare"]).read_bytes()
  assert len(text) == 1_115_394 and hashlib.md5(text).hexdigest() == "6fb458f1232090904fb40fe944165e91"
  with monkeypatch.context() as offline:
    offline.setattr(socket, "socket", lambda *a, **k: (_ for _ in ()).throw(OSError("no network in this test")))
    code, out, _ = run_prepare(capsys, "--source", "shakespeare", "--val-fraction", "0.1", "--out",
                               str(tmp_path / "s"))
  meta = P.read_meta(tmp_path / "s")
  assert code == 0 and "frequency_loss 3.3476" in out
  assert meta["tokens"] == {"train": 1_003_855, "val": 111_540}  # bytes + EOS, the last tenth held out
  tokens = all_tokens(tmp_path / "s")
  assert bytes(tokens[-200:-1].astype(np.uint8)) == text[-199:]
  run = ["train", "--workdir", str(tmp_path / "run"), "--config", "experiments/tiny.py:pre",
         "--config.data.source=shakespeare", f"--config.data.cache_dir={tmp_path}", "--config.data.seq_len=16",
         "--config.model.n_layer=1", "--config.model.d_model=16", "--config.model.n_head=1", "--config.model.remat=none",
         "--config.train.steps=3", "--config.train.batch_size=4", "--config.train.eval_every=3",
         "--config.train.eval_batches=1", "--config.checkpoint.every=3", "--config.eval.generate=0"]
  assert main.main(run) == 0
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert summary["status"] == "completed" and summary["frequency_loss"] > 3 and np.isfinite(summary["val_loss"])


def test_each_split_needs_one_window_of_seq_len_plus_one_tokens():
  meta = {"tokens": {"train": 100, "val": 9}, "identity": {"val_fraction": 0.1}}
  P.check_windows(meta, 8, "here")  # 9 tokens: 8 inputs and their 8 targets
  with pytest.raises(DataError, match=r"100 train / 9 val .* seq_len\+1=10 tokens"):
    P.check_windows(meta, 9, "here")
