"""Tokenizes a data source once into token shards plus meta.json (frequency loss, entropy rate).
Flags override config.data (of --config, else the base config). Without --out the tokens go to
the cache directory the trainer reads (config.data.cache_dir, else $NPLACE_CACHE or
~/.cache/nplace/data); `nplace prepare --config experiments/tiny.py` prepares a run's data
ahead of it. A run names the source, never a directory: the command prints the flags that train
on it."""
import shlex

from absl import flags

from nplace.commands.flags import Command, names_config
from nplace.config import base_config, validate
from nplace.data import prepare

_FLAGS = {  # flag -> config.data field it overrides
    "source": "source",
    "tokenizer": "tokenizer",
    "val-fraction": "val_fraction",
    "seq-len": "seq_len",
}


def _define(fv):
  flags.DEFINE_string("source", None, "synthetic | shakespeare | text:PATH | tfds:NAME[/CONFIG]:SPLIT | "
                      "openwebtext (default: config.data.source)", flag_values=fv)
  flags.DEFINE_string("tokenizer", None, "byte | gpt2; ignored by synthetic, which emits its "
                      "own ids (default: config.data.tokenizer)", flag_values=fv)
  flags.DEFINE_string("out", None, "directory to write (default: the config's cache directory)",
                      flag_values=fv)
  flags.DEFINE_float("val-fraction", None, "share of the tokens held out for validation "
                     "(default: config.data.val_fraction)", flag_values=fv)
  flags.DEFINE_integer("seq-len", None, "each split must hold one window of seq-len + 1 tokens "
                       "(default: config.data.seq_len)", flag_values=fv)


COMMAND = Command("nplace prepare [--config FILE[:ARG]] [--source SRC] [--tokenizer TOK] [--out DIR] "
                  "[--val-fraction F] [--seq-len L]", __doc__, _define, config="optional",
                  output_dirs=("out",), bucket_outputs=False)


def main(argv):
  fv, _ = COMMAND.parse(argv, config=None if names_config(argv) else base_config())
  config = fv.config
  for flag, field in _FLAGS.items():
    if fv[flag].value is not None:
      config.data[field] = fv[flag].value
  validate(config)
  if fv.out:
    out, meta = fv.out, prepare.prepare(config.data, fv.out)
  else:
    out = prepare.prepared_dir(config.data)
    meta = prepare.read_meta(out)
  line = (f"{out}: {meta['tokens']['train']:,} train + {meta['tokens']['val']:,} val tokens, "
          f"vocab {meta['vocab_size']}, frequency_loss {meta['frequency_loss']:.4f}")
  if meta["entropy_rate"] is not None:
    line += f", entropy_rate {meta['entropy_rate']:.4f}"
  print(line)
  print(_how_to_train(config.data, bool(fv.out)))


def _how_to_train(data, out: bool) -> str:
  """The flags that train on these tokens: a run names the source, not a directory (the trainer
  reads the cache, keyed by the source and tokenizer)."""
  flags = shlex.join([f"--config.data.source={data.source}", f"--config.data.tokenizer={data.tokenizer}",
                      *([f"--config.data.cache_dir={data.cache_dir}"] if data.cache_dir else [])])
  if out:
    return (f"train on this source with {flags}: training reads it from the cache (prepared there on first use, or "
            "ahead of it by `nplace prepare` without --out), not from --out")
  return f"train on it with {flags}"
