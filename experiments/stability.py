"""Study A (Kan et al. 2025): does Peri-LN train where Pre-LN fails, and does dt=0.1 help?

`experiments/stability.py:VARIANT`, VARIANT one of
  cpu          placement {pre, peri, peri dt=0.1, peri with embed_norm} x weight decay
               {0.1, 0} x 3 seeds at the stress learning rate (the default)
  lr_scan      those placements and post x learning rate, one seed
  paper[,SIZE] the paper's grid (5 seeds) on GPT-2 SIZE (124m | 350m | 774m | 1.5b) and OpenWebText
  paper_lr_scan[,SIZE]

`nplace sweep --config experiments/stability.py:cpu --workdir runs/stability` runs a grid;
`nplace report runs/stability --out ...` tabulates it (failure kinds: nplace/studies/outcomes.py).
"""
import ml_collections

from nplace.config import base_config


def _model(placement, dt=1.0, embed_norm=False) -> dict:
  # every key always set, so trial names line up
  return {"model.placement": placement, "model.dt": dt, "model.embed_norm": embed_norm}


PLACEMENTS = (
    _model("pre"),
    _model("peri"),
    _model("peri", dt=0.1),
    # The Peri-LN paper's embedding norm: at GPT-2's init the token embedding (std 0.02) is
    # otherwise drowned by 2L unit-rms branch outputs (see results/README.md).
    _model("peri", embed_norm=True),
)
ALL_PLACEMENTS = PLACEMENTS + (_model("post"),)  # the cpu grid leaves Post-LN to the scan
WEIGHT_DECAYS = (0.1, 0.0)
SEEDS = {"cpu": range(3), "paper": range(5)}  # 3 here: the grid fits an hour of 2 shared cores
# The CPU stress rate: the lowest rate of the lr_scan at which Pre-LN stops learning
# (see results/README.md for the scan that chose it).
CPU_STRESS_LR = 3e-2
CPU_SCAN_LRS = (1e-3, 3e-3, 1e-2, 3e-2)
PAPER_SCAN_LRS = (3e-4, 6e-4, 1.2e-3, 2.4e-3)


def _cpu() -> ml_collections.ConfigDict:
  """12 layers of width 64: deep enough for Pre-LN's stream to grow, ~40 s a trial on 2 cores."""
  c = base_config()
  c.model.update(vocab_size=512, max_len=64, n_layer=12, n_head=4, d_model=64, remat="none")
  c.data.seq_len = 64
  c.train.update(steps=150, batch_size=16, log_every=10, eval_every=150, eval_batches=4,
                 spike_window=20, peak_flops=2e11)
  c.optim.update(lr=CPU_STRESS_LR, warmup_steps=10)
  c.checkpoint.every = 150
  return c


def _paper(size: str) -> ml_collections.ConfigDict:
  """GPT-2 SIZE on OpenWebText with nanoGPT's recipe (docs/science.md, reference numbers):
  0.5M-token batches, lr 6e-4 cosine to 6e-5, warmup 2000, AdamW (0.9, 0.95), clip 1."""
  from nplace.config import experiment
  c = experiment("gpt2", size)
  c.data.update(source="openwebtext", tokenizer="gpt2")
  c.train.update(steps=50_000, batch_size=512, grad_accum=8, eval_every=1000, eval_batches=20)
  c.optim.update(lr=6e-4, min_lr_ratio=0.1, warmup_steps=2000)
  c.checkpoint.every = 1000
  c.model.update(dtype="bfloat16", remat="full")
  return c


def _split(arg: str) -> tuple[str, str]:
  variant, _, size = arg.partition(",")
  if variant not in ("cpu", "lr_scan", "paper", "paper_lr_scan"):
    raise ValueError(f"stability variant {arg!r}: expected cpu | lr_scan | paper[,SIZE] | paper_lr_scan[,SIZE]")
  if size and not variant.startswith("paper"):
    raise ValueError(f"stability variant {arg!r}: only paper variants take a SIZE")
  return variant, size or "124m"


def get_config(arg: str = "cpu"):
  variant, size = _split(arg)
  return _paper(size) if variant.startswith("paper") else _cpu()


def get_sweep(arg: str = "cpu") -> list[dict]:
  variant, _ = _split(arg)
  if variant.endswith("lr_scan"):
    lrs = PAPER_SCAN_LRS if variant.startswith("paper") else CPU_SCAN_LRS
    return [{**model, "optim.lr": lr} for model in ALL_PLACEMENTS for lr in lrs]
  return [{**model, "optim.weight_decay": wd, "seed": seed}
          for model in (PLACEMENTS if variant == "cpu" else ALL_PLACEMENTS)
          for wd in WEIGHT_DECAYS for seed in SEEDS[variant]]
