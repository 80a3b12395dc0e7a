"""Model FLOPs utilisation of the GPT-2 presets' train step on one accelerator.

    python benchmarks/gpu_mfu.py [--runs 124m:16:none:auto,1.5b:8:full:auto] [--dtype bfloat16]
        [--steps 10] [--peak-tflops 989] [--json OUT.jsonl] [--profile DIR]
        [--torch compile|regional|eager]

A run is SIZE:BATCH:REMAT:ATTENTION[:SECTION.KEY=VALUE...] (experiments/gpt2.py:SIZE,PLACEMENT;
BATCH sequences of 1024 tokens; model.remat; model.attention_impl; more config fields, e.g.
`124m:16:none:auto:model.loss_chunks=8`). Each compiles `nplace train`'s own jitted
step (nplace.train.steps: AdamW, clipping, donation) and times `--steps` steps three times
on a fixed random batch, taking the median. MFU = tokens/s x (6N + 12 L T d) / peak, the
formula nanoGPT's `estimate_mfu` and MaxText use (remat's recompute is not counted), against
both the datasheet peak (`--peak-tflops`; H100/H200 SXM dense bf16: 989) and a bf16 matmul
peak measured here. When two runs differ only in ATTENTION their first-step losses are
printed side by side: the fused kernel must agree with the einsum path. `--profile DIR` traces
3 steps of the first run into DIR (TensorBoard's profile plugin opens it) and prints where the
device time went, op by op.

`--torch compile` first times benchmarks/torch_gpt.py's GPT of each run's shape and placement as
nanoGPT trains it on a GPU: torch.compile of the whole model, bf16 autocast (a bfloat16 run),
fused AdamW, clipping (`regional`: each block compiled alone, one compile all reuse, which
bounds a deep model's compile time; `eager`: no torch.compile), `--steps` steps three times as
nplace's, in a child process that exits before JAX takes the device's memory; its rows print
as they come, then nplace's table, then nplace / torch in tokens/s for each run. torch has no
remat: it keeps every activation, whatever REMAT says; its head is the vocabulary unpadded.
"""
import argparse
import ast
import collections
import gzip
import importlib.util
import json
import multiprocessing
import pathlib
import platform
import time

import jax
import jax.numpy as jnp

import _harness
from nplace.config import experiment, validate
from nplace.model.size import model_info
from nplace.studies import grid
from nplace.train import fit

DEFAULT_RUNS = "124m:16:none:xla,124m:16:none:auto,124m:16:dots:auto,1.5b:16:dots:auto,1.5b:32:dots:auto"  # BUILD_NOTES' GPU tables


def matmul_peak(n=8192, dtype=jnp.bfloat16):
  """FLOP/s of one n^3 matrix product on the default device (median of 10)."""
  a = jnp.ones((n, n), dtype)
  matmul = jax.jit(lambda x: x @ x)
  jax.block_until_ready(matmul(a))
  return 2 * n ** 3 / _harness.median_seconds(lambda: matmul(a), 10)


def run_config(spec, placement, dtype):
  size, batch, remat, attention, *overrides = spec.split(":")
  config = experiment("gpt2", f"{size},{placement}")
  config.train.batch_size = int(batch)
  config.model.update(remat=remat, attention_impl=attention, dtype=dtype)
  config = grid.apply(config, dict(map(_key_and_value, overrides)), spec)
  validate(config)
  return config


def _key_and_value(override):
  key, value = override.split("=", 1)
  try:
    return key, ast.literal_eval(value)
  except (ValueError, SyntaxError):  # a bare word is a string
    return key, value


def device_time_by_op(trace_dir, top=25):
  """Device time in a trace's newest trace.json.gz (the processes named /device:...): the
  milliseconds per trace line, and the `top` ops as (milliseconds, calls, line, name)."""
  trace_file = max(pathlib.Path(trace_dir).glob("plugins/profile/*/*.trace.json.gz"), key=lambda f: f.stat().st_mtime)
  events = json.load(gzip.open(trace_file))["traceEvents"]
  devices = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
             and e["args"]["name"].startswith("/device:")}
  threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
  totals, calls = collections.Counter(), collections.Counter()
  for e in events:
    if e.get("ph") == "X" and e["pid"] in devices:
      key = (threads.get((e["pid"], e["tid"]), "?"), e["name"])
      totals[key] += e["dur"] / 1e3
      calls[key] += 1
  by_line = collections.Counter()
  for (line, _), ms in totals.items():
    by_line[line] += ms
  return by_line, [(ms, calls[key], *key) for key, ms in totals.most_common(top)]


def profile(step, state, batch, trace_dir, steps=3):
  """Trace `steps` steps into trace_dir and print the device time by op."""
  jax.profiler.start_trace(trace_dir)
  for i in range(steps):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
      state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  jax.profiler.stop_trace()
  by_line, ops = device_time_by_op(trace_dir)
  print(f"device time over {steps} steps, by trace line: " +
        ", ".join(f"{line} {ms:.1f} ms" for line, ms in by_line.most_common()))
  for ms, n, line, name in ops:
    print(f"  {ms / steps:8.2f} ms/step  {n // steps:4d} calls/step  [{line}] {name[:110]}")
  return state


def measure(config, steps, trace_dir=None):
  """Compile seconds, first-step loss, median step seconds and the executable's bytes."""
  start = time.perf_counter()
  state, jitted = _harness.compiled_step(config)
  batch = _harness.random_batch(config)
  step = jitted.lower(state, batch).compile()
  peak_bytes = fit.chip_bytes(step)["peak"]
  state, metrics = step(state, batch)
  first_loss = float(metrics["loss"])
  compile_s = time.perf_counter() - start
  holder = {"state": state}

  def run():
    for _ in range(steps):
      holder["state"], out = step(holder["state"], batch)
    return out

  jax.block_until_ready(run())  # warm
  step_s = _harness.median_seconds(run, 3) / steps
  if trace_dir:
    holder["state"] = profile(step, holder["state"], batch, trace_dir)
  return {"compile_s": compile_s, "first_loss": first_loss, "step_s": step_s, "peak_bytes": peak_bytes}


def _torch_worker(conn, runs, mode, steps):
  """Each run's torch step, timed as `measure` times nplace's; a row a run back, then None."""
  import torch

  import torch_gpt
  cuda = torch.cuda.is_available()
  for spec, model_cfg, optim_cfg, batch_shape, dtype in runs:
    row = {"run": spec, "contender": f"torch ({mode})"}
    try:
      if cuda:
        torch.cuda.reset_peak_memory_stats()
      start = time.perf_counter()
      _, step = torch_gpt.make_step(model_cfg, optim_cfg, device="cuda" if cuda else "cpu",
                                    autocast=torch.bfloat16 if dtype == "bfloat16" else None,
                                    compile={"compile": "model", "regional": "blocks"}.get(mode))
      batch = torch.randint(0, model_cfg["vocab_size"], batch_shape, generator=torch.Generator().manual_seed(1))
      batch = batch.to("cuda" if cuda else "cpu")
      row["first_loss"] = step(batch).item()  # the first call compiles
      row["compile_s"] = time.perf_counter() - start

      def run():  # .item() waits for the device: the loss is read after the last update is queued
        for _ in range(steps):
          loss = step(batch)
        return loss.item()

      run()  # warm
      times = []
      for _ in range(3):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
      row["step_s"] = sorted(times)[1] / steps
      row["peak_bytes"] = torch.cuda.max_memory_allocated() if cuda else None
    except Exception as e:  # e.g. out of memory: report it and go on to the next run
      row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
    step = batch = None
    if mode != "eager":
      torch._dynamo.reset()  # the compiled graphs hold the model: free it before the next run
    if cuda:
      torch.cuda.empty_cache()
    conn.send(row)
  conn.send(None)


def torch_rows(configs, mode, steps, peak_tflops, json_path):
  """{run: torch's row}, measured in a child process (its rows printed as they come)."""
  runs = [(spec, c.model.to_dict(), c.optim.to_dict(), (c.train.batch_size, c.data.seq_len + 1), c.model.dtype)
          for spec, c in configs]
  proc, conn = _harness.start_worker(multiprocessing.get_context("spawn"), _torch_worker, runs, mode, steps)
  print(f"torch ({mode}; benchmarks/torch_gpt.py: fused AdamW, bf16 autocast for a bfloat16 run, no remat):\n"
        "| run | tokens/s | step ms | model TFLOP/s | MFU (datasheet) | compile s | peak GiB | first loss |\n"
        "|---|---|---|---|---|---|---|---|", flush=True)
  rows, config = {}, dict(configs)
  while True:
    try:
      row = conn.recv()
    except EOFError:  # the process died (its traceback is on stderr): nplace's runs go on
      proc.join()
      print(f"| torch's process ended with exit code {proc.exitcode} |", flush=True)
      return rows
    if row is None:
      break
    spec = row["run"]
    if "error" in row:
      print(f"| {spec} | failed: {row['error']} |", flush=True)
    else:
      c = config[spec]
      tokens = c.train.batch_size * c.data.seq_len
      flops = model_info(c)["flops_per_token"] * tokens / row["step_s"]
      row.update(tokens_per_s=tokens / row["step_s"], model_flops_per_s=flops, mfu=flops / (peak_tflops * 1e12))
      peak = f"{row['peak_bytes'] / 2**30:.1f}" if row["peak_bytes"] else "-"
      print(f"| {spec} | {row['tokens_per_s']:,.0f} | {1e3 * row['step_s']:.1f} | {flops / 1e12:.0f} | "
            f"{row['mfu']:.1%} | {row['compile_s']:.0f} | {peak} | {row['first_loss']:.5f} |", flush=True)
      rows[spec] = row
    if json_path:
      with open(json_path, "a") as f:
        f.write(json.dumps(row) + "\n")
  proc.join()
  return rows


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--runs", default=DEFAULT_RUNS)
  parser.add_argument("--placement", default="pre")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--peak-tflops", type=float, default=989.0, help="datasheet dense peak of the device")
  parser.add_argument("--json", help="append one JSON line per run here")
  parser.add_argument("--profile", help="trace 3 steps of the first run into this directory")
  parser.add_argument("--matmul-size", type=int, default=8192, help="side of the peak-measuring matmul")
  parser.add_argument("--torch", choices=("compile", "regional", "eager"),
                      help="also time torch_gpt.py's GPT of each run: torch.compile'd whole, by block, or eager")
  args = parser.parse_args()
  if args.torch and importlib.util.find_spec("torch") is None:
    parser.exit(2, "gpu_mfu: --torch needs torch (the GPU image has it; here: pip install torch)\n")
  configs = [(spec, run_config(spec, args.placement, args.dtype)) for spec in args.runs.split(",")]
  # before JAX starts: it takes most of the device's memory for the whole process
  torch_by_run = torch_rows(configs, args.torch, args.steps, args.peak_tflops, args.json) if args.torch else {}
  device = jax.devices()[0]
  measured_peak = matmul_peak(args.matmul_size)
  print(f"{device.device_kind} ({device.platform}); jax {jax.__version__}; python {platform.python_version()}; "
        f"bf16 matmul {args.matmul_size}^3: {measured_peak / 1e12:.0f} TFLOP/s measured, {args.peak_tflops:.0f} datasheet")
  print("| run | tokens/s | step ms | model TFLOP/s | MFU (datasheet) | MFU (measured peak) | "
        "compile s | peak GiB | first loss |\n|---|---|---|---|---|---|---|---|---|")
  losses, ratios = {}, {}
  for i, (spec, config) in enumerate(configs):
    try:
      row = measure(config, args.steps, args.profile if i == 0 else None)
    except Exception as e:  # e.g. out of memory: report it and go on to the next run
      print(f"| {spec} | failed: {type(e).__name__}: {str(e).splitlines()[0][:160]} |", flush=True)
      continue
    tokens = config.train.batch_size * config.data.seq_len
    flops = model_info(config)["flops_per_token"] * tokens / row["step_s"]
    row.update(run=spec, placement=args.placement, dtype=args.dtype, device=device.device_kind,
               jax=jax.__version__, tokens_per_s=tokens / row["step_s"], model_flops_per_s=flops,
               mfu=flops / (args.peak_tflops * 1e12), mfu_measured_peak=flops / measured_peak,
               measured_peak=measured_peak)
    print(f"| {spec} | {row['tokens_per_s']:,.0f} | {1e3 * row['step_s']:.1f} | {flops / 1e12:.0f} | "
          f"{row['mfu']:.1%} | {row['mfu_measured_peak']:.1%} | {row['compile_s']:.0f} | {row['peak_bytes'] / 2**30:.1f} | "
          f"{row['first_loss']:.5f} |", flush=True)
    if spec in torch_by_run:
      row["vs_torch"] = ratios[spec] = row["tokens_per_s"] / torch_by_run[spec]["tokens_per_s"]
    shape, attention = spec.rsplit(":", 1)
    losses.setdefault(shape, {})[attention] = row["first_loss"]
    if args.json:
      with open(args.json, "a") as f:
        f.write(json.dumps(row) + "\n")
  for key, by_impl in losses.items():
    if len(by_impl) > 1:
      print(f"first-step loss by attention_impl for {key}: {by_impl}")
  for spec, ratio in ratios.items():
    print(f"nplace / torch ({args.torch}), tokens/s, {spec}: {ratio:.2f}x")


if __name__ == "__main__":
  main()
