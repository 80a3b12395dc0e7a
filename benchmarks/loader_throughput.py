"""Loader tokens/s next to the tiny model's training tokens/s; the loader must win by 10x.

  .venv/bin/python benchmarks/loader_throughput.py [--batches 2000] [--steps 30]

Both count target tokens (batch * seq_len) per second on experiments/tiny.py:pre with
its default synthetic source (prepared into the cache on first use). The training step
is the trainer's own (nplace.train.steps), timed on batches already in memory, after
compilation.
"""
import argparse
import time

import jax

from nplace.data import loader, prepare
from nplace.config import experiment, validate
from _harness import compiled_step


def loader_rate(config, batches: int) -> float:
  it = loader.make_iterator(config.data, "train", config.train.batch_size, seed=0, shuffle=True,
                          process_index=0, process_count=1)
  next(it)
  start = time.perf_counter()
  for _ in range(batches):
    next(it)
  return batches * config.train.batch_size * config.data.seq_len / (time.perf_counter() - start)


def train_rate(config, steps: int):
  state, step = compiled_step(config)
  it = loader.make_iterator(config.data, "train", config.train.batch_size, seed=0, shuffle=True,
                          process_index=0, process_count=1)
  batches = [next(it) for _ in range(steps + 1)]
  state, metrics = step(state, batches[0])  # compiles
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  for batch in batches[1:]:
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  return steps * config.train.batch_size * config.data.seq_len / (time.perf_counter() - start)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batches", type=int, default=2000, help="loader batches timed")
  parser.add_argument("--steps", type=int, default=30, help="training steps timed")
  args = parser.parse_args()
  config = experiment("tiny", "pre")
  validate(config)
  prepare.prepared_dir(config.data)
  loader, train = loader_rate(config, args.batches), train_rate(config, args.steps)
  print(f"loader   {loader:12,.0f} tokens/s  ({args.batches} batches of "
        f"{config.train.batch_size}x{config.data.seq_len + 1})")
  print(f"training {train:12,.0f} tokens/s  ({args.steps} steps, tiny:pre, "
        f"{jax.devices()[0].platform})")
  print(f"ratio    {loader / train:12,.1f}x  (needs >= 10)")


if __name__ == "__main__":
  main()
