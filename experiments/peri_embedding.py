"""Why plain Peri-LN learns slowly at GPT-2's init: the embedding, not the biases or eps.

At GPT-2's init the token embedding has std 0.02 while each of the 2L branch outputs leaves its
output norm at rms ~1, so the stream is the branches' sum and the token identity is drowned.
This grid varies what could restore it, on study A's first CPU model (12 x 64, 300 steps of
16 x 64 tokens, lr 3e-3, 3 seeds): the Peri-LN paper's norm on the embedding, Gemma's sqrt(d)
embedding scale, and what should not matter (biases, RMSNorm without biases, a larger eps), with
Pre-LN beside. Judged by `PROTOCOL` (version 2): study A's protocol 4 rules on the trials version
1 ran and judged (its section archived, results/archive/), seen data.

  nplace sweep --config experiments/peri_embedding.py:cpu --workdir runs/peri_embedding --batch 3
  nplace report --results results/ runs/peri_embedding
"""
from nplace.config import base_config
from nplace.protocol import COMPARISON, THREE_WAY, WELCH_T, Claim, Grid, Protocol, Threshold
SEED_SETTING = "GPT-2 (124M to 1.5B) on OpenWebText"  # where the seed's claims were made

KEYS = ("placement", "embed_norm", "embed_scale", "use_bias", "norm", "norm_eps")


def _model(**changes) -> dict:
  """Every key of KEYS set (the base config's value unless changed), so arms and names line up."""
  base = base_config().model
  return {f"model.{key}": changes.get(key, base[key]) for key in KEYS}


ARMS = {
    "Pre-LN": _model(placement="pre"),
    "Peri-LN": _model(placement="peri"),
    "Peri-LN + embedding norm": _model(placement="peri", embed_norm=True),
    "Peri-LN, embedding x sqrt(d)": _model(placement="peri", embed_scale=8.0),
    "Peri-LN, no biases": _model(placement="peri", use_bias=False),
    "Peri-LN, RMSNorm, no biases": _model(placement="peri", norm="rmsnorm", use_bias=False),
    "Peri-LN, eps 1e-3": _model(placement="peri", norm_eps=1e-3),
}
SEEDS = range(3)

# Version 2 (issue 66): study A's protocol 4 rules for a comparison of final losses, on version 1's
# 21 filed trials, seen before these rules were written. The final validation loss per seed,
# compared by Welch's t-interval of worse - better against `min_effect` (-`min_effect` for a
# "does not" claim, which holds when the variant is no worse by that much), three-way
# (nplace/studies/three_way.py), with protocol 4's outcome rules (blow-ups read from the logged
# loss). Each claim's power is stated at twice the margin for a claim that a change makes
# Peri-LN learn, and at no difference for one that a change does not matter. Version 1's
# thresholds, claims and wording, unchanged.
MAKES_IT_LEARN, NO_DIFFERENCE = 0.5, 0.0  # nats, worse - better: the effects the power is stated at
PROTOCOL = Protocol(
    name="peri_embedding", version=2, kind=COMPARISON,
    summary="Study A's protocol 4 rules on protocol 1's filed trials, which were seen before these rules were "
            "written: the final validation loss of Peri-LN variants at GPT-2's init after 300 steps at lr 3e-3, "
            "3 seeds, compared by Welch t-intervals against min_effect.",
    seeds=3, bootstrap_resamples=0, bootstrap_seed=0, interval=0.95, interval_method=WELCH_T,
    verdicts=THREE_WAY, blow_ups=True, diverged_at_cap=True,
    thresholds=(
        Threshold("min_effect", 0.25, "nats of final validation loss that count as a difference"),
        Threshold("did_not_learn", 0.1, "fraction of the learnable nats gained below which a run did "
                                        "not learn"),
        Threshold("spike_rebound", 1.0, "nats above the running minimum that make a loss spike"),
    ),
    claims=(
        Claim("embed_norm_fixes", "the embedding norm makes Peri-LN learn", metric="final_loss",
              better="Peri-LN + embedding norm", worse="Peri-LN", power_at=MAKES_IT_LEARN),
        Claim("embed_scale_fixes", "scaling the embedding by sqrt(d) makes Peri-LN learn", metric="final_loss",
              better="Peri-LN, embedding x sqrt(d)", worse="Peri-LN", power_at=MAKES_IT_LEARN),
        Claim("biases_do_not", "removing the biases does not", metric="final_loss",
              better="Peri-LN", worse="Peri-LN, no biases", matches=True, power_at=NO_DIFFERENCE),
        Claim("rmsnorm_does_not", "RMSNorm without biases does not", metric="final_loss",
              better="Peri-LN", worse="Peri-LN, RMSNorm, no biases", matches=True, power_at=NO_DIFFERENCE),
        Claim("eps_does_not", "a larger eps does not", metric="final_loss",
              better="Peri-LN", worse="Peri-LN, eps 1e-3", matches=True, power_at=NO_DIFFERENCE),
        Claim("fixed_matches_pre", "Peri-LN with the embedding norm matches Pre-LN", metric="final_loss",
              better="Peri-LN + embedding norm", worse="Pre-LN", matches=True, power_at=NO_DIFFERENCE),
    ),
)


def protocol(arg: str = "cpu") -> Protocol:
  get_config(arg)
  return PROTOCOL


def declared(arg: str = "cpu") -> int:
  """The version the grid was declared and run under (the page's section names it): version 1,
  whose section is archived; version 2 re-judges its trials."""
  get_config(arg)
  return 1


def get_config(arg: str = "cpu"):
  """Study A's protocol-1 CPU model as these trials ran (that tier has since moved to 1,000
  steps), at lr 3e-3."""
  if arg != "cpu":
    raise ValueError(f"peri_embedding variant {arg!r}: expected cpu")
  c = base_config()
  c.model.update(vocab_size=512, max_len=64, n_layer=12, n_head=4, d_model=64, remat="none")
  c.data.seq_len = 64
  c.train.update(steps=300, batch_size=16, log_every=10, eval_every=300, eval_batches=4, spike_window=20,
                 peak_flops=2e11)
  c.optim.update(lr=3e-3, warmup_steps=15)
  c.checkpoint.every = 300
  return c


def get_sweep(arg: str = "cpu") -> list[dict]:
  get_config(arg)
  return [{**arm, "seed": seed} for arm in ARMS.values() for seed in SEEDS]


GRID = Grid(config=get_config, sweep=get_sweep, seed_setting=SEED_SETTING, arms=ARMS,
            judged_by=lambda arg: (protocol(arg),), declared=declared)
