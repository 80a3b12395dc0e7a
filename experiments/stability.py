"""Study A (Kan et al. 2025): is Peri-LN less sensitive to the learning rate than Pre-LN, and does
dt=0.1 help? Judged by the pre-registered protocol below (`PROTOCOL`, version 1).

`experiments/stability.py:VARIANT`, VARIANT one of
  cpu          the learning-rate sensitivity grid of `PROTOCOL` on this machine's tier: Pre-LN,
               Peri-LN and Peri-LN dt=0.1 x depth {6, 12} x width {32, 64} x 5 learning rates
               (1e-3 .. 1e-1, half-decade steps) x 3 seeds, 300 steps of 16 x 64 tokens
  gpu          the same grid for one H100/H200-class card: depth {12, 24} x width {128, 256},
               2,000 steps of 16 x 256 tokens in bfloat16, 5 seeds (run it with --batch 15);
               sized by estimate (~1e17 FLOP in all), not yet run
  paper[,SIZE] the same arms on GPT-2 SIZE (124m | 350m | 774m | 1.5b) and OpenWebText, 5 seeds
  v0_stress    protocol 0: the stress grid the first results came from (placement x weight decay
               {0.1, 0} x 3 seeds at lr 3e-2, 150 steps), kept beside version 1
  v0_lr_scan   protocol 0's one-seed learning-rate scan
  v0_paper[,SIZE], v0_paper_lr_scan[,SIZE]   protocol 0's paper grids

`nplace sweep --config experiments/stability.py:cpu --workdir runs/stability --batch 15` runs
the grid; `nplace report --results results/ runs/stability` files it into results/ and
regenerates results/README.md, which judges it by `PROTOCOL`.
"""
import ml_collections

from nplace.config import base_config
from nplace.studies.protocol import Claim, Protocol, Threshold


def _model(placement, dt=1.0, embed_norm=False) -> dict:
  # every key always set, so trial names line up
  return {"model.placement": placement, "model.dt": dt, "model.embed_norm": embed_norm}


# The arms. Peri-LN carries the Peri-LN paper's norm on the embedding output: at GPT-2's init
# the 0.02-std token embedding is otherwise drowned by 2L unit-rms branch outputs, so plain
# `peri` learns nothing in short runs (protocol 0's results) -- a property of that init.
ARMS = {
    "Pre-LN": _model("pre"),
    "Peri-LN": _model("peri", embed_norm=True),
    "Peri-LN, dt 0.1": _model("peri", dt=0.1, embed_norm=True),
}
LRS = (1e-3, 10 ** -2.5, 1e-2, 10 ** -1.5, 1e-1)  # 2 decades, half-decade steps
PAPER_LRS = (1e-4, 10 ** -3.5, 1e-3, 10 ** -2.5, 1e-2)
TIERS = {  # tier -> (depths, widths, seeds)
    "cpu": ((6, 12), (32, 64), range(3)),
    "gpu": ((12, 24), (128, 256), range(5)),
    "paper": ((None,), (None,), range(5)),  # the GPT-2 size's own depth and width
}

PROTOCOL = Protocol(
    name="stability", version=1,
    summary="Learning-rate sensitivity (Wortsman et al. 2023, arXiv 2309.14322) of Pre-LN and "
            "Peri-LN: per arm and model shape, the final validation loss over a 2-decade "
            "learning-rate sweep, 3 seeds (cpu tier). Fixed before any run of this version.",
    seeds=3, bootstrap_resamples=2000, bootstrap_seed=0, interval=0.95,
    thresholds=(
        Threshold("min_effect", 0.05, "nats: the smallest difference in LR sensitivity (or best loss) "
                                      "that counts; an interval must clear it"),
        Threshold("did_not_learn", 0.1, "fraction of the learnable nats gained below which a run did "
                                        "not learn"),
        Threshold("spike_rebound", 1.0, "nats above the running minimum of the train loss that make a "
                                        "loss spike (reported, never a failure)"),
    ),
    claims=(
        Claim("peri_flatter", "Peri-LN is less sensitive to the learning rate than Pre-LN",
              metric="lr_sensitivity", better="Peri-LN", worse="Pre-LN"),
        Claim("dt_flatter", "dt 0.1 makes Peri-LN less sensitive to the learning rate still",
              metric="lr_sensitivity", better="Peri-LN, dt 0.1", worse="Peri-LN"),
        Claim("peri_matches_best", "Peri-LN matches or beats Pre-LN at each one's best learning rate",
              metric="best_loss", better="Peri-LN", worse="Pre-LN", matches=True),
        Claim("pre_diverges_more", "Pre-LN diverges more often than Peri-LN over the sweep",
              metric="divergences", better="Peri-LN", worse="Pre-LN"),
    ),
)

PROTOCOL_V0 = Protocol(
    name="stability", version=0,
    summary="Failures counted at one stress learning rate after 150 steps. Its failure margin "
            "(0.25 nats) was chosen after the pilot runs, so its verdicts are not evidence; kept "
            "so its committed results stay readable (nplace/studies/outcomes.py: `failures`).",
    seeds=3, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95,
    thresholds=(Threshold("failure_margin", 0.25, "nats below the frequency loss a run must reach"),
                Threshold("spike_rebound", 1.0, "nats above the running minimum of the train loss")),
    claims=(),
)

V0_WEIGHT_DECAYS = (0.1, 0.0)
V0_PLACEMENTS = (_model("pre"), _model("peri"), _model("peri", dt=0.1), _model("peri", embed_norm=True))
V0_STRESS_LR = 3e-2  # protocol 0: the lowest rate of its scan at which Pre-LN stopped learning
V0_SCAN_LRS = (1e-3, 3e-3, 1e-2, 3e-2)
V0_PAPER_SCAN_LRS = (3e-4, 6e-4, 1.2e-3, 2.4e-3)
VARIANTS = ("cpu", "gpu", "paper", "v0_stress", "v0_lr_scan", "v0_paper", "v0_paper_lr_scan")


def _small(steps: int, batch_size: int, seq_len: int) -> ml_collections.ConfigDict:
  c = base_config()
  c.model.update(vocab_size=512, max_len=seq_len, n_layer=12, n_head=4, d_model=64, remat="none")
  c.data.seq_len = seq_len
  c.train.update(steps=steps, batch_size=batch_size, log_every=10, eval_every=steps, eval_batches=4,
                 spike_window=20, peak_flops=2e11)
  c.optim.update(lr=1e-2, warmup_steps=max(10, steps // 20))
  c.checkpoint.every = steps
  return c


def _v0_stress() -> ml_collections.ConfigDict:
  """Protocol 0's model: 12 layers of width 64, ~40 s a trial on 2 cores."""
  c = _small(150, 16, 64)
  c.optim.lr = V0_STRESS_LR
  return c


def _gpu() -> ml_collections.ConfigDict:
  c = _small(2000, 16, 256)
  c.model.update(vocab_size=2048, dtype="bfloat16")
  c.data.synthetic_tokens = 2 ** 24
  c.train.update(eval_batches=8, peak_flops=9.9e14)
  return c


def _paper(size: str) -> ml_collections.ConfigDict:
  """GPT-2 SIZE on OpenWebText with nanoGPT's recipe (docs/science.md, reference numbers):
  0.5M-token batches, lr 6e-4 cosine to 6e-5, warmup 2000, AdamW (0.9, 0.95), clip 1."""
  from nplace.config import experiment  # nplace.config imports experiment files lazily too
  c = experiment("gpt2", size)
  c.data.update(source="openwebtext", tokenizer="gpt2")
  c.train.update(steps=50_000, batch_size=512, grad_accum=8, eval_every=1000, eval_batches=20)
  c.optim.update(lr=6e-4, min_lr_ratio=0.1, warmup_steps=2000)
  c.checkpoint.every = 1000
  c.model.update(dtype="bfloat16", remat="full")
  return c


def _split(arg: str) -> tuple[str, str]:
  variant, _, size = arg.partition(",")
  if variant not in VARIANTS:
    raise ValueError(f"stability variant {arg!r}: expected one of {', '.join(VARIANTS)} "
                     "(paper variants take ,SIZE)")
  if size and "paper" not in variant:
    raise ValueError(f"stability variant {arg!r}: only paper variants take a SIZE")
  return variant, size or "124m"


def protocol(arg: str = "cpu") -> Protocol:
  """The protocol a variant's results are judged by."""
  variant, _ = _split(arg)
  return PROTOCOL_V0 if variant.startswith("v0") else PROTOCOL


def get_config(arg: str = "cpu"):
  variant, size = _split(arg)
  if "paper" in variant:
    return _paper(size)
  return {"cpu": lambda: _small(300, 16, 64), "gpu": _gpu}.get(variant, _v0_stress)()


def get_sweep(arg: str = "cpu") -> list[dict]:
  variant, _ = _split(arg)
  if variant in TIERS:
    depths, widths, seeds = TIERS[variant]
    lrs = PAPER_LRS if variant == "paper" else LRS
    shapes = [{}] if variant == "paper" else [{"model.n_layer": d, "model.d_model": w}
                                              for d in depths for w in widths]
    return [{**shape, **arm, "optim.lr": lr, "seed": seed}
            for shape in shapes for arm in ARMS.values() for lr in lrs for seed in seeds]
  if variant.endswith("lr_scan"):
    lrs = V0_PAPER_SCAN_LRS if "paper" in variant else V0_SCAN_LRS
    return [{**model, "optim.lr": lr} for model in V0_PLACEMENTS + (_model("post"),) for lr in lrs]
  placements = V0_PLACEMENTS if variant == "v0_stress" else V0_PLACEMENTS + (_model("post"),)
  return [{**model, "optim.weight_decay": wd, "seed": seed}
          for model in placements for wd in V0_WEIGHT_DECAYS for seed in (range(3) if variant == "v0_stress" else range(5))]
