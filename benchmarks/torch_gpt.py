"""A PyTorch GPT of the same shape and placement as nplace's model: the eager baseline of
benchmarks/step_vs_torch.py (needs the `bench` extra), and on a GPU gpu_mfu.py's `--torch`
contender (bf16 autocast, torch.compile).

nanoGPT's layout (one fused q/k/v matmul, `scaled_dot_product_attention`, tied LM head,
float32 logits) with nplace's placements (`post` | `pre` | `peri`), norms (`layernorm` with
bias | `rmsnorm`), residual step `dt` and bias switch; GELU (tanh) MLP only. The train step
is AdamW with nplace's decay groups (matmul kernels decay; embeddings, norms and biases per
`config.optim`) after global-norm clipping, as nplace.optim does.
"""
import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn


class Norm(nn.Module):
  def __init__(self, m):
    super().__init__()
    self.rms, self.eps = m["norm"] == "rmsnorm", m["norm_eps"]
    self.weight = nn.Parameter(torch.ones(m["d_model"]))
    self.bias = None if self.rms else nn.Parameter(torch.zeros(m["d_model"]))

  def forward(self, x):
    if self.rms:
      return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
    return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class Attention(nn.Module):
  def __init__(self, m):
    super().__init__()
    D, self.H = m["d_model"], m["n_head"]
    self.qkv = nn.Linear(D, 3 * D, bias=m["use_bias"])
    self.o = nn.Linear(D, D, bias=m["use_bias"])

  def forward(self, x_BTD):
    B, T, D = x_BTD.shape
    q, k, v = (t.view(B, T, self.H, D // self.H).transpose(1, 2)
               for t in self.qkv(x_BTD).split(D, dim=2))
    out_BHTK = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.o(out_BHTK.transpose(1, 2).reshape(B, T, D))


class Mlp(nn.Module):
  def __init__(self, m):
    super().__init__()
    D = m["d_model"]
    F_ = m["d_ff"] or 4 * D
    self.fc_in, self.fc_out = nn.Linear(D, F_, bias=m["use_bias"]), nn.Linear(F_, D, bias=m["use_bias"])

  def forward(self, x):
    return self.fc_out(F.gelu(self.fc_in(x), approximate="tanh"))


class Block(nn.Module):
  def __init__(self, m):
    super().__init__()
    self.placement, self.dt = m["placement"], m["dt"]
    self.branches = nn.ModuleList([Attention(m), Mlp(m)])
    n_norms = 2 if self.placement == "peri" else 1
    self.norms = nn.ModuleList([nn.ModuleList([Norm(m) for _ in range(n_norms)]) for _ in range(2)])

  def forward(self, h):
    for branch, norms in zip(self.branches, self.norms):
      if self.placement == "post":
        h = norms[0](h + self.dt * branch(h))
      elif self.placement == "pre":
        h = h + self.dt * branch(norms[0](h))
      else:
        h = h + self.dt * norms[1](branch(norms[0](h)))
    return h


class GPT(nn.Module):
  """`m`: nplace's `config.model` as a dict."""

  def __init__(self, m):
    super().__init__()
    self.wte = nn.Embedding(m["vocab_size"], m["d_model"])
    self.wpe = nn.Embedding(m["max_len"], m["d_model"])
    self.embed_norm = Norm(m) if m["embed_norm"] else None
    self.blocks = nn.ModuleList([Block(m) for _ in range(m["n_layer"])])
    self.final_norm = None if m["placement"] == "post" else Norm(m)
    std = m["init_std"]
    for name, p in self.named_parameters():
      if p.dim() == 2:
        nn.init.normal_(p, std=std / math.sqrt(2 * m["n_layer"]) if name.endswith(("o.weight", "fc_out.weight")) else std)
      elif name.endswith("bias"):
        nn.init.zeros_(p)

  def forward(self, tokens_BT):
    h = self.wte(tokens_BT) + self.wpe(torch.arange(tokens_BT.shape[1], device=tokens_BT.device))
    if self.embed_norm is not None:
      h = self.embed_norm(h)
    for block in self.blocks:
      h = block(h)
    if self.final_norm is not None:
      h = self.final_norm(h)
    return h @ self.wte.weight.T


def _groups(model, o):
  """nplace.optim.decay_mask's groups: which parameters take weight decay."""
  decay, no_decay = [], []
  for name, p in model.named_parameters():
    if name.startswith(("wte", "wpe")):
      decays = o["decay_embeddings"]
    elif "norm" in name:
      decays = o["decay_norms"]
    elif name.endswith("bias"):
      decays = o["decay_biases"]
    else:
      decays = True
    (decay if decays else no_decay).append(p)
  return [{"params": decay, "weight_decay": o["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]


def make_step(m, o, seed=0, device="cpu", autocast=None, compile=None):
  """step(batch_BT1) -> loss: one AdamW step with clipping, parameters and optimizer in float32
  on `device`; the forward and backward eager, or torch.compile'd: the whole model (`compile`
  "model", nanoGPT's) or each block alone ("blocks": PyTorch's regional compilation, one compile
  that every block reuses, for a deep model's cold start); in `autocast` (a torch dtype:
  nanoGPT's bf16 recipe) where given."""
  torch.manual_seed(seed)
  model = GPT(m).to(device)
  opt = torch.optim.AdamW(_groups(model, o), lr=o["lr"], betas=(o["b1"], o["b2"]), eps=o["eps"],
                          fused=True)
  forward = torch.compile(model) if compile == "model" else model
  if compile == "blocks":
    for block in model.blocks:
      block.compile()
  cast = (lambda: torch.autocast(torch.device(device).type, dtype=autocast)) if autocast else contextlib.nullcontext

  def step(batch_BT1):
    with cast():
      logits = forward(batch_BT1[:, :-1])
      loss = F.cross_entropy(logits.flatten(0, 1), batch_BT1[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if o["clip_norm"] > 0:
      nn.utils.clip_grad_norm_(model.parameters(), o["clip_norm"])
    opt.step()
    return loss

  return model, step
