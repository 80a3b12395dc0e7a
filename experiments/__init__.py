"""Experiment configs: `--config experiments/NAME.py:ARG` (installed with nplace as nplace.experiments).

`MODELS` is what the presets that take a placement's name (tiny.py, deep48.py, gpt2.py) set for
each name. A name is its placement, except that Peri-LN carries the embedding norm: `peri` is
the block's norms plus the norm on the embedding output (`model.embed_norm`), as the Peri-LN
paper trains it and OLMo-core's Peri-LN ladder offers it (docs/science.md, section 7.7), and
`peri_no_embed_norm` is the block alone, the ablation "Peri-LN, no embedding norm". The study
grids do not read it: their arms set their model keys themselves.
"""
from nplace.placements import PLACEMENTS

MODELS = {  # variant name -> model keys
    **{name: {"placement": name} for name in PLACEMENTS},
    "peri": {"placement": "peri", "embed_norm": True},
    "peri_no_embed_norm": {"placement": "peri", "embed_norm": False},
}
