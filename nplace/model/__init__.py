"""The decoder: `decoder.py` (embedding, scanned blocks, tied head, loss), `block.py` (the one
Block, any placement of nplace/placements.py), `layers.py` (norm, attention, MLP),
`fused_attention.py` (the attention kernels per platform), `size.py` (parameters and FLOPs).

Rule: model imports only the config, the placements and runtime (the layout of its arrays);
training, probes and studies read the model, never the other way round.

Shape legend. An array's name ends in its axes, one letter each (`h_BTD`, `q_BTHK`); every
letter has one meaning across the package:

  B  sequences in a batch              T  positions of a sequence (queries)
  S  positions attended to (keys)      D  model width (the residual stream)
  H  attention heads                   K  head width, D / H
  F  MLP hidden width                  V  vocabulary
  P  vocabulary padded to the head's tile multiple
  L  layers (blocks); `2L` the 2L norm sites, attn_1, mlp_1, attn_2, ...
  N  tokens of a batch, B * T          C  loss chunks of a sequence; W positions in one, T / C
  E  independent estimates stacked (Hutchinson probe vectors, power iterations)
  R  recorded probe steps of a run     Y  a probe's values at one step (its layers or sites)
  X  any leading axes                  T1 T + 1 positions: a window of inputs and their targets
  J  an evaluation's validation batches, stacked
  I  attention's input projections q, k, v, stacked (model.qkv_projection=fused)
The synthetic language (nplace/data/synthetic.py): Z its contexts (the chain's state), M the
successors of a context, U a token's candidate successors, G chains generated side by side,
Q the group histories of a context, A the slots of a context's sampling table.
"""
