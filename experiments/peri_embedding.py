"""Why plain Peri-LN learns nothing at GPT-2's init: the embedding, not the biases or eps.

At GPT-2's init the token embedding has std 0.02 while each of the 2L branch outputs leaves its
output norm at rms ~1, so the stream is the branches' sum and the token identity is drowned.
This grid varies what could restore it, on study A's CPU model (12 x 64, 300 steps, lr 3e-3,
3 seeds): the Peri-LN paper's norm on the embedding, Gemma's sqrt(d) embedding scale, and
what should not matter (biases, RMSNorm without biases, a larger eps), with Pre-LN beside.

  nplace sweep --config experiments/peri_embedding.py:cpu --workdir runs/peri_embedding --batch 3
  nplace report --results results/ runs/peri_embedding
"""
from nplace.config import base_config, experiment
from nplace.protocol import COMPARISON, Claim, Protocol, Threshold

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

PROTOCOL = Protocol(
    name="peri_embedding", version=1, kind=COMPARISON,
    summary="Final validation loss of Peri-LN variants at GPT-2's init after 300 steps at lr 3e-3, "
            "3 seeds. Fixed before any run of this version.",
    seeds=3, bootstrap_resamples=2000, bootstrap_seed=0, interval=0.95,
    thresholds=(
        Threshold("min_effect", 0.25, "nats of final validation loss that count as a difference"),
        Threshold("did_not_learn", 0.1, "fraction of the learnable nats gained below which a run did "
                                        "not learn"),
        Threshold("spike_rebound", 1.0, "nats above the running minimum that make a loss spike"),
    ),
    claims=(
        Claim("embed_norm_fixes", "the embedding norm makes Peri-LN learn", metric="final_loss",
              better="Peri-LN + embedding norm", worse="Peri-LN"),
        Claim("embed_scale_fixes", "scaling the embedding by sqrt(d) makes Peri-LN learn", metric="final_loss",
              better="Peri-LN, embedding x sqrt(d)", worse="Peri-LN"),
        Claim("biases_do_not", "removing the biases does not", metric="final_loss",
              better="Peri-LN", worse="Peri-LN, no biases", matches=True),
        Claim("rmsnorm_does_not", "RMSNorm without biases does not", metric="final_loss",
              better="Peri-LN", worse="Peri-LN, RMSNorm, no biases", matches=True),
        Claim("eps_does_not", "a larger eps does not", metric="final_loss",
              better="Peri-LN", worse="Peri-LN, eps 1e-3", matches=True),
        Claim("fixed_matches_pre", "Peri-LN with the embedding norm matches Pre-LN", metric="final_loss",
              better="Peri-LN + embedding norm", worse="Pre-LN", matches=True),
    ),
)


def protocol(arg: str = "cpu") -> Protocol:
  get_config(arg)
  return PROTOCOL


def get_config(arg: str = "cpu"):
  if arg != "cpu":
    raise ValueError(f"peri_embedding variant {arg!r}: expected cpu")
  c = experiment("stability", "cpu")  # study A's CPU model: 12 x 64, 300 steps of 16 x 64
  c.optim.lr = 3e-3
  return c


def get_sweep(arg: str = "cpu") -> list[dict]:
  get_config(arg)
  return [{**arm, "seed": seed} for arm in ARMS.values() for seed in SEEDS]
