"""Train on one NVIDIA GPU: install the CUDA extra into .venv, then nplace train with the flags
that matter on one device. Python stdlib only; run it from anywhere on the GPU machine
(relative --workdir and --config paths are read from where you run it).

  python launch/gpu.py [--config experiments/gpt2.py:124m,peri] [--workdir runs/gpu]
      [--batch-size 64] [--microbatch 8] [--dry-run] [-- --config.KEY=VALUE ...]

bfloat16 compute (parameters and optimizer state stay float32); a global batch of
--batch-size sequences in microbatches of --microbatch (train.grad_accum = their ratio:
lower --microbatch when the first step runs out of memory); XLA_CLIENT_MEM_FRACTION=.90
lets JAX's allocator take 90% of the GPU instead of its default 75%. --dry-run prints
the commands, one per line, and runs none.
"""
import argparse
import pathlib
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def commands(a) -> list[list[str]]:
  return [
      [a.python, "-m", "venv", ".venv"],
      [".venv/bin/python", "-m", "pip", "install", "-e", ".[cuda]"],
      ["env", "XLA_CLIENT_MEM_FRACTION=.90", ".venv/bin/nplace", "train", "--config", a.config,
       "--workdir", a.workdir, "--config.model.dtype=bfloat16",
       f"--config.train.batch_size={a.batch_size}",
       f"--config.train.grad_accum={a.batch_size // a.microbatch}", *a.overrides],
  ]


def from_here(path: str) -> str:
  """A path the caller gave from their directory, as the commands, run in ROOT, read it."""
  if path.startswith("gs://"):
    return path
  absolute = pathlib.Path(path).expanduser().absolute()
  return str(absolute.relative_to(ROOT) if absolute.is_relative_to(ROOT) else absolute)


class Parser(argparse.ArgumentParser):
  def error(self, message):
    print(f"launch/gpu.py: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None) -> int:
  p = Parser(prog="launch/gpu.py", description=__doc__.split("\n\n")[0])
  p.add_argument("--config", default="experiments/gpt2.py:124m,peri", help="FILE[:ARG]")
  p.add_argument("--workdir", default="runs/gpu", help="run directory (checkpoints, TensorBoard)")
  p.add_argument("--batch-size", type=int, default=64, help="sequences per optimizer step")
  p.add_argument("--microbatch", type=int, default=8, help="sequences per forward/backward pass")
  p.add_argument("--python", default="python3", help="the Python >= 3.11 that makes .venv")
  p.add_argument("--dry-run", action="store_true", help="print the commands, run none")
  p.add_argument("overrides", nargs="*", help="after --: --config.KEY=VALUE")
  a = p.parse_args(sys.argv[1:] if argv is None else argv)
  if a.batch_size < 1:
    p.error(f"--batch-size {a.batch_size}: must be positive")
  if a.microbatch < 1 or a.batch_size % a.microbatch:
    p.error(f"--microbatch {a.microbatch}: must divide --batch-size {a.batch_size}")
  for x in a.overrides:
    if not x.startswith("--config."):
      p.error(f"override {x!r}: expected --config.KEY=VALUE after --")
  a.workdir = from_here(a.workdir)
  file, colon, arg = a.config.partition(":")
  if pathlib.Path(file).expanduser().exists():  # else nplace reads its installed experiments/, or names it
    a.config = from_here(file) + colon + arg
  for argv in commands(a):
    print(shlex.join(argv), flush=True)
    if not a.dry_run and subprocess.run(argv, cwd=ROOT).returncode:
      print(f"launch/gpu.py: failed: {shlex.join(argv)}", file=sys.stderr)
      return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
