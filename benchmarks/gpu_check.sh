#!/bin/bash
# The GPU check of issue 58, one device call on one H200 in at most 6 minutes of wall: the bf16
# matmul peak; nplace's train step against torch.compile's (benchmarks/torch_gpt.py: bf16 autocast,
# fused AdamW; benchmarks/gpu_mfu.py --torch) at 124M (the whole model compiled, as nanoGPT does)
# and 1.5B (each block compiled, one compile all 48 reuse: the whole model's would take minutes);
# and one stability.py:gpu cell of 35 trials at depth 12 for 200 steps: where its wall goes, and
# the projected time of the whole gpu tier, 350 trials (benchmarks/cell_overhead.py). Each stage
# prints as it goes; one table of whatever finished comes last.
#
#   .whl/: Python 3.12 x86-64 wheels of what the GPU image lacks (grain, ml_collections, tensorboardX,
#     rouge_score, nltk, array_record, dm-tree, portpicker; `pip download --only-binary=:all:
#     --python-version 3.12 -d .whl PKG==VERSION`, the versions of .venv), made once, carried along
#   bash benchmarks/gpu_check.sh                 # on the GPU machine, from the project root
#   GPU_CHECK_SMOKE=1 PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh       # the plumbing, on a CPU
#
# Stages, each under `timeout` (its cap, or what is left of the 350 s when less; a stage with
# under 20 s left is skipped). Expected wall on one H200, estimated from BUILD_NOTES' H200
# figures (the stages have not run together yet):
#   install  the .whl/ wheels (device-bundle's preamble)                           ~15 s
#   124m     torch.compile (~60 s of compile), then nplace (~30 s), nplace with
#            model.head_loss=one_hot, scan_unroll=12, qkv_projection=fused and
#            train.update_guard=cond (~30 s) and the matmul
#            peak, 124M 16 x 1024, remat none                                      ~130 s (cap 150)
#   cell     stability.py:gpu, 35 trials at depth 12 x 256, 200 steps: compiles
#            ~60 s, steps and host ~30 s, 3 evaluations, 3 saves of 35 runs        ~120 s (cap 170)
#   1.5b     torch.compile by block (~30 s), then nplace (~60 s of compile), 1.5B
#            16 x 1024, nplace at remat dots, 5 steps a timing                     ~110 s (the rest)
# The cell runs before 1.5B: the issue's question is the grid's time, and 1.5B's compiles are
# the likeliest to run long (its torch row prints before nplace compiles). GPU_CHECK_SMOKE=1 runs
# every stage at toy sizes on the CPU (torch eager where torch is installed, skipped where not),
# 33 s on 2 idle cores (~1.5 min busy): the plumbing, not the numbers.
# Results: $OUT/gpu_check/ (a temporary directory without $OUT): each stage's stdout, stderr and JSON.
set -u
cd "$(dirname "$0")/.."
start=$SECONDS
budget=350
res=${OUT:-$(mktemp -d)}/gpu_check
mkdir -p "$res"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1  # a stage cut by its timeout keeps what it printed

# the second 124M row: the levers not yet measured on a GPU, together (a scatter-free head loss,
# the layers unrolled, one q/k/v product, the update skipped in a conditional: no moment copies);
# kept where faster, then measured apart
levers=model.head_loss=one_hot:model.qkv_projection=fused:train.update_guard=cond
if [[ ${GPU_CHECK_SMOKE:-} == 1 ]]; then
  export JAX_PLATFORMS=cpu PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  toy=model.n_layer=2:model.d_model=64:model.n_head=2:data.seq_len=64:model.max_len=64
  runs_124m=124m:2:none:auto:$toy,124m:2:none:auto:$toy:$levers:model.scan_unroll=2
  runs_15b=1.5b:2:dots:auto:$toy
  mfu_124m=(--steps 2 --matmul-size 256) mfu_15b=(--steps 2 --matmul-size 256)
  cell=(--config experiments/stability.py:cpu --trials 2 --steps 4)
  torch_124m=eager torch_15b=eager
else
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "gpu_check: no .whl/: the wheels the GPU image lacks (this script's header), beside it"; exit 1
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && ln -sfn ../experiments nplace/experiments && export PYTHONPATH=/tmp/site:$PWD || exit 1
  runs_124m=124m:16:none:auto,124m:16:none:auto:$levers:model.scan_unroll=12
  runs_15b=1.5b:16:dots:auto
  mfu_124m=(--steps 10) mfu_15b=(--steps 5)
  cell=(--config experiments/stability.py:gpu --trials 35 --steps 200)
  torch_124m=compile torch_15b=regional
fi
if ! $PY -c "import torch" 2>/dev/null; then echo "gpu_check: no torch: nplace alone"; torch_124m= torch_15b=; fi
echo "gpu_check: install done at $((SECONDS - start)) s; results in $res"

stage() {  # NAME CAP COMMAND...: COMMAND under timeout, its stdout shown and kept, its stderr kept
  local name=$1 cap=$2 left=$((budget - (SECONDS - start)))
  shift 2
  ((left < cap)) && cap=$left
  if ((cap < 20)); then
    echo "$name skipped 0" >> "$res/stages"; echo "== $name: skipped, ${left} s left"; return
  fi
  echo "== $name (cap ${cap} s): $*"
  local began=$SECONDS
  timeout -k 10 "$cap" "$@" 2> "$res/$name.err" | tee "$res/$name.out"
  local rc=${PIPESTATUS[0]}
  echo "$name $rc $((SECONDS - began))" >> "$res/stages"
  if ((rc != 0)); then
    ((rc == 124 || rc == 137)) && rc="$rc (timed out)"
    echo "== $name: exit $rc after $((SECONDS - began)) s; its stderr ends:"
    tail -n 5 "$res/$name.err"
  fi
}

stage 124m 150 $PY benchmarks/gpu_mfu.py --runs "$runs_124m" "${mfu_124m[@]}" ${torch_124m:+--torch $torch_124m} \
  --json "$res/mfu.jsonl"
stage cell 170 $PY benchmarks/cell_overhead.py "${cell[@]}" --json "$res/cell.json"
stage 1.5b 600 $PY benchmarks/gpu_mfu.py --runs "$runs_15b" "${mfu_15b[@]}" ${torch_15b:+--torch $torch_15b} \
  --json "$res/mfu.jsonl"

echo "== summary, $((SECONDS - start)) s in all"
$PY - "$res" <<'EOF'
import json, pathlib, sys

res = pathlib.Path(sys.argv[1])
rows = [("stage", "result")]
mfu = res / "mfu.jsonl"
for line in mfu.read_text().splitlines() if mfu.exists() else ():
  r = json.loads(line)
  who = r.get("contender", "nplace")
  if who == "nplace" and not any(k == "bf16 matmul peak" for k, _ in rows):
    rows.insert(1, ("bf16 matmul peak", f"{r['measured_peak'] / 1e12:.0f} TFLOP/s on {r['device']}, jax {r['jax']}"))
  if "error" in r:
    rows.append((f"{r['run']}, {who}", f"failed: {r['error']}"))
    continue
  ratio = f"; nplace / torch {r['vs_torch']:.2f}x" if "vs_torch" in r else ""
  rows.append((f"{r['run']}, {who}", f"{r['tokens_per_s']:,.0f} tokens/s, {1e3 * r['step_s']:.1f} ms a step, MFU "
                                     f"{r['mfu']:.1%} of 989, compile {r['compile_s']:.0f} s{ratio}"))
cell = res / "cell.json"
if cell.exists():
  c = json.loads(cell.read_text())
  groups = {}  # the compiles as one, the host's per-step parts as one
  for part, s in c["seconds"].items():
    name = part.split(" (")[0]
    name = name.split(":")[0] if name.startswith(("compile", "host per step")) else name
    groups[name] = groups.get(name, 0.0) + s
  split = ", ".join(f"{name} {s:.1f} s ({s / c['wall_s']:.0%})" for name, s in groups.items()
                    if s >= 0.01 * c["wall_s"])
  rows.append((f"cell: {c['trials']} trials x {c['measured']['step']} steps ({c['config']})",
               f"{c['wall_s']:.0f} s: {split}; a step {1e3 * c['step_s']:.0f} ms, train steps alone "
               f"{1e3 * c['train_step_s']:.0f} ms"))
  if "full_s" in c:
    rows.append((f"the cell at {c['full']['step']} steps", f"{c['full_s'] / 60:.1f} min projected"))
  if "grid_s" in c:
    rows.append((f"the grid: {c['grid_trials']} trials, {c['grid_cells']} cells",
                 f"{c['grid_s'] / 3600:.2f} h projected"))
for line in (res / "stages").read_text().splitlines():
  name, rc, seconds = line.split()
  if rc == "skipped":
    rows.append((f"stage {name}", "skipped: no time left"))
  elif rc != "0":
    rows.append((f"stage {name}", f"exit {rc} after {seconds} s" + (" (timed out)" if rc in ("124", "137") else "")))
for i, (a, b) in enumerate(rows):
  print(f"| {a} | {b} |" + ("\n|---|---|" if i == 0 else ""))
EOF
