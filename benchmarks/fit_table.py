"""The fit table of BUILD_NOTES.md: `nplace compile` for every GPT-2 preset, placement,
slice and compute dtype (train step only; the probe suite is compiled by `nplace compile`).

  JAX_PLATFORMS=cpu ALLOW_MULTIPLE_LIBTPU_LOAD=1 nice -n 10 .venv/bin/python benchmarks/fit_table.py --out fit.jsonl
  .venv/bin/python benchmarks/fit_table.py --out fit.jsonl --table   # the markdown table

Rows are appended as they finish (a rerun skips rows already in --out).
"""
import argparse
import json
import pathlib
import time

from nplace.train import fit
from nplace.config import experiment

SIZES = ("124m", "350m", "774m", "1.5b")
SLICES = ("v4-8", "v5litepod-16", "v5p-8", "v5litepod-64")


def cases():
  """The targets first: 1.5B on v5e-16 and its 4 -> 16 -> 64 scaling, then every preset on
  v5e-16 in bfloat16, then the rest, Peri-LN before Pre-LN (their memory differs by a few norms'
  activations, so a partial table still covers every preset, slice and dtype)."""
  scaling = [("1.5b", "peri", t, "bfloat16") for t in ("v5litepod-16", "v5litepod-4", "v5litepod-64")]
  v5e16 = [(s, p, "v5litepod-16", "bfloat16") for s in SIZES for p in ("pre", "peri")]
  rest = [(s, p, t, d) for p in ("peri", "pre") for d in ("bfloat16", "float32") for t in SLICES for s in SIZES]
  return list(dict.fromkeys(scaling + v5e16 + rest))


def run(size, placement, topology, dtype, batch_per_chip) -> dict:
  config = experiment("gpt2", f"{size},{placement}")
  config.model.dtype = dtype
  row = {"size": size, "placement": placement, "slice": topology, "dtype": dtype}
  start = time.perf_counter()
  try:
    report = fit.check(config, topology, batch_per_chip, probes=False)
    row |= {"fits": True, "gib": report["bytes"]["peak"] / fit.GiB, "bytes": report["bytes"], "mfu": report["mfu"],
            "mesh": report["mesh"], "remat": report["remat"], "chips": report["chips"]}
  except fit.DoesNotFit as e:
    row |= {"fits": False, "error": str(e), "remat": config.model.remat}
  return row | {"compile_s": time.perf_counter() - start}


def table(rows) -> str:
  lines = ["| preset | placement | slice | dtype | fits | GiB/chip | est. MFU | mesh (data,fsdp,tensor) | remat |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    mesh = ",".join(str(v) for v in r["mesh"].values()) if r.get("mesh") else "-"
    gib = f"{r['gib']:.2f}" if r["fits"] else r["error"].split("needs ")[1].split(" of")[0]
    mfu = f"{r['mfu']:.0%}" if r["fits"] else "-"
    lines.append(f"| {r['size']} | {r['placement']} | {r['slice']} | {r['dtype']} | "
                 f"{'yes' if r['fits'] else 'no'} | {gib} | {mfu} | {mesh} | {r['remat']} |")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", required=True)
  parser.add_argument("--batch-per-chip", type=int, default=8)
  parser.add_argument("--table", action="store_true", help="print the table from --out and exit")
  args = parser.parse_args()
  out = pathlib.Path(args.out)
  rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
  if args.table:
    print(table(rows))
    return
  done = {(r["size"], r["placement"], r["slice"], r["dtype"]) for r in rows}
  for case in cases():
    if case not in done:
      row = run(*case, args.batch_per_chip)
      print(json.dumps(row), flush=True)
      with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
  main()
