"""Hidden-state growth over depth (study A's bound): does the top layer's mean |h| of a trained
Pre-LN model grow exponentially in the depth D, and Peri-LN's at most linearly? Judged by the
pre-registered protocol below (`PROTOCOL`, version 1).

`experiments/growth.py:VARIANT`, VARIANT one of
  cpu     protocol 1: depths 6, 12, 24, 48 at width 32, each trained for the same 300 steps of
          16 x 64 tokens (lr 3e-3), with and without weight decay; Pre-LN and Peri-LN (with the
          embedding norm) at dt 1 and 0.1; probed at init and at the end (32 trials)
  gpu     the same arms and depths for one H100/H200-class card: width 256, 2,000 steps of
          16 x 256 tokens in bfloat16 (~3e16 FLOP in all; run it with --batch 4); not yet run
  paper   the same arms and depths at GPT-2 124M's width (768) on OpenWebText
  v0_cpu  protocol 0: depths 12, 24, 48 after 50 steps, plain Peri-LN, fitted over the layers
          of each model (kept beside version 1)
  v0_paper

  nplace sweep --config experiments/growth.py:cpu --workdir runs/growth --batch 4
  nplace report --results results/ runs/growth      # fits over D, judged by PROTOCOL
  nplace report runs/growth --out report            # the per-layer fits within each model
"""
from nplace.config import base_config, variant
from nplace.studies.protocol import Claim, Protocol, Threshold

DEPTHS = (6, 12, 24, 48)
WEIGHT_DECAYS = (0.1, 0.0)
ARMS = {
    "Pre-LN": {"model.placement": "pre", "model.dt": 1.0, "model.embed_norm": False},
    "Pre-LN, dt 0.1": {"model.placement": "pre", "model.dt": 0.1, "model.embed_norm": False},
    "Peri-LN": {"model.placement": "peri", "model.dt": 1.0, "model.embed_norm": True},
    "Peri-LN, dt 0.1": {"model.placement": "peri", "model.dt": 0.1, "model.embed_norm": True},
}
V0_DEPTHS = (12, 24, 48)
V0_MODELS = (("pre", 1.0), ("pre", 0.1), ("peri", 1.0), ("peri", 0.1))

PROTOCOL = Protocol(
    name="growth", version=1,
    summary="Top-layer hidden-state moments of trained models against their depth D (6, 12, 24, 48; "
            "the same tokens each), one seed per point; intervals are the fits' 95% t-intervals over "
            "the four depths. Fixed before any run of this version.",
    seeds=1, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95,
    thresholds=(
        Threshold("min_r2_gap", 0.05, "R² by which one fit over D must beat the other to decide"),
    ),
    claims=(
        Claim("pre_exponential", "Pre-LN's top-layer mean |h| grows exponentially in D",
              metric="exponential_over_linear", better="Pre-LN", worse="Pre-LN"),
        Claim("peri_at_most_linear", "Peri-LN's top-layer mean |h| grows at most linearly in D",
              metric="power_at_most_one", better="Peri-LN", worse="Peri-LN"),
        Claim("dt_tightens_pre", "dt 0.1 lowers Pre-LN's top-layer mean |h| at every depth",
              metric="lower_at_every_depth", better="Pre-LN, dt 0.1", worse="Pre-LN"),
        Claim("dt_tightens_peri", "dt 0.1 lowers Peri-LN's top-layer mean |h| at every depth",
              metric="lower_at_every_depth", better="Peri-LN, dt 0.1", worse="Peri-LN"),
    ),
)


def protocol(arg: str = "cpu") -> Protocol:
  get_config(arg)
  return PROTOCOL


def _cpu():
  """Width 32: the four depths (360 layers in all, x 8 arms) fit ~20 minutes of 2 cores."""
  c = base_config()
  c.model.update(vocab_size=512, max_len=64, n_head=4, d_model=32, remat="none")
  c.data.seq_len = 64
  c.train.update(steps=300, batch_size=16, log_every=10, eval_every=300, eval_batches=4, peak_flops=2e11)
  c.optim.update(lr=3e-3, warmup_steps=15)
  c.probe.update(every=300, power_iters=0, hutchinson_probes=2)
  c.checkpoint.every = 300
  return c


def _gpu():
  c = _cpu()
  c.model.update(vocab_size=2048, max_len=256, d_model=256, dtype="bfloat16")
  c.data.update(seq_len=256, synthetic_tokens=2 ** 24)
  c.train.update(steps=2000, eval_every=2000, eval_batches=8, peak_flops=9.9e14)
  c.optim.update(lr=1e-3, warmup_steps=100)
  c.probe.every = 2000
  c.checkpoint.every = 1000
  return c


def _v0_cpu():
  c = _cpu()
  c.model.d_model = 64
  c.train.update(steps=50, eval_every=50)
  c.optim.warmup_steps = 10
  c.probe.every = 50
  c.checkpoint.every = 50
  return c


def _paper():
  c = base_config()
  c.data.update(source="openwebtext", tokenizer="gpt2")
  c.model.update(dtype="bfloat16", remat="full")
  c.train.update(steps=20_000, batch_size=256, eval_every=1000, eval_batches=20)
  c.optim.update(lr=6e-4, warmup_steps=2000)
  c.probe.update(every=20_000, power_iters=0)
  c.checkpoint.every = 1000
  return c


def get_config(arg: str = "cpu"):
  return variant("growth", arg, {"cpu": _cpu, "gpu": _gpu, "paper": _paper, "v0_cpu": _v0_cpu,
                                 "v0_paper": _paper})


def get_sweep(arg: str = "cpu") -> list[dict]:
  get_config(arg)
  if arg.startswith("v0"):
    return [{"model.placement": placement, "model.dt": dt, "model.n_layer": depth}
            for placement, dt in V0_MODELS for depth in V0_DEPTHS]
  return [{"model.n_layer": depth, **arm, "optim.weight_decay": wd}
          for depth in DEPTHS for arm in ARMS.values() for wd in WEIGHT_DECAYS]
