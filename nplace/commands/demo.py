"""Trains the tiny preset (experiments/tiny.py) on the synthetic language with each placement,
post, pre, peri and peri with dt 0.1, one after another (a few minutes on two CPU cores), logs
under --logdir/<name>/, prints each run's validation loss against the language's frequency
loss (what a collapsed model gets) and entropy rate (the best any model can get), and writes a
report of the runs (--logdir/report/report.md). Both peri runs are Peri-LN with the embedding
norm (tiny.py:peri). `make demo` runs it."""
import pathlib

from absl import flags

from nplace.commands.flags import Command
from nplace.config import experiment, validate
from nplace.errors import ConfigError, UsageError
from nplace.studies.report import build
from nplace.train.loop import train

RUNS = {  # name -> (experiments/tiny.py variant, dt)
    "post": ("post", 1.0),
    "pre": ("pre", 1.0),
    "peri": ("peri", 1.0),
    "peri_dt0.1": ("peri", 0.1),
}

PERI = ("peri runs: Peri-LN with the embedding norm (model.embed_norm=True); the block alone, "
        "the ablation: tiny.py:peri_no_embed_norm")


def _define(fv):
  flags.DEFINE_string("logdir", "runs/demo", "where the runs' workdirs go", flag_values=fv)
  flags.DEFINE_integer("steps", 150, "train steps per run", flag_values=fv)


COMMAND = Command("nplace demo [--logdir runs/demo] [--steps N]", __doc__, _define, config="none",
                  output_dirs=("logdir",), bucket_outputs=False)


def run(logdir: pathlib.Path, steps: int) -> dict:
  summaries = {}
  for name, (variant, dt) in RUNS.items():
    config = experiment("tiny", variant)
    config.model.dt = dt
    config.train.steps = steps
    validate(config)
    print(f"== {name}: tiny.py:{variant} placement={config.model.placement} "
          f"embed_norm={config.model.embed_norm} dt={dt}", flush=True)
    try:
      summaries[name] = train(config, logdir / name)
    except ConfigError as e:  # train's advice (`nplace train --extend`) is not the demo's
      if e.key != "train.steps":
        raise
      raise UsageError(f"--logdir {logdir}: holds demo runs of another --steps than {steps}: remove it, "
                       "or give another --logdir") from None
  return summaries


def table(summaries: dict) -> str:
  rows = [f"{'run':12s} {'status':10s} {'val loss':>9s} {'freq loss':>9s} {'entropy rate':>12s} {'tok/s':>8s}"]
  number = lambda x, width, spec=".4f": f"{x:{width}{spec}}" if x is not None else f"{'-':>{width}}"
  for name, s in summaries.items():
    rows.append(f"{name:12s} {s.status:10s} {number(s.val_loss, 9)} "
                f"{number(s.frequency_loss, 9)} {number(s.entropy_rate, 12)} "
                f"{number(s.tokens_per_sec, 8, ',.0f')}")  # 11,893, as the progress lines print it
  return "\n".join(rows)


def main(argv=()):
  fv, _ = COMMAND.parse(list(argv))
  logdir = pathlib.Path(fv.logdir)
  print(table(run(logdir, fv.steps)))
  # "peri" alone would read as the block, which without this norm learns slowly at GPT-2's init
  print(PERI)
  print(f"\nreport: {build.write([logdir], logdir / 'report')[0]}")
  print(f"curves: tensorboard --logdir {logdir}")
