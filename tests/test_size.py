"""Parameter counts against GPT-2's published sizes (docs/science.md's reference numbers)."""
import pytest

from nplace.config import experiment
from nplace.model.size import model_info, placements_info

GPT2_PARAMS = {"124m": 124_439_808, "350m": 354_823_168, "774m": 774_030_080, "1.5b": 1_557_611_200}


@pytest.mark.parametrize("size", GPT2_PARAMS)
def test_gpt2_parameter_counts(size):
  pre = model_info(experiment("gpt2", size))
  assert pre["params"] == GPT2_PARAMS[size]
  block = experiment("gpt2", f"{size},peri_no_embed_norm")
  d, L = block.model.d_model, block.model.n_layer
  assert model_info(block)["params"] == GPT2_PARAMS[size] + 4 * d * L
  # Peri-LN proper adds the embedding norm's gain and bias.
  assert model_info(experiment("gpt2", f"{size},peri"))["params"] == GPT2_PARAMS[size] + 4 * d * L + 2 * d
  # Post-LN has no final norm (its last op is already a norm): 2d fewer.
  assert model_info(experiment("gpt2", f"{size},post"))["params"] == GPT2_PARAMS[size] - 2 * d


def test_flops_and_state_bytes():
  info = model_info(experiment("gpt2", "124m"))
  n_matmul = GPT2_PARAMS["124m"] - 1024 * 768  # the position table does no multiply
  assert info["flops_per_token"] == 6 * n_matmul + 12 * 12 * 1024 * 768
  assert info["state_bytes"] == 3 * 4 * GPT2_PARAMS["124m"] + 4  # f32 params, mu, nu; int32 count


def test_rmsnorm_and_swiglu_change_counts():
  c = experiment("gpt2", "124m,peri")
  c.model.norm = "rmsnorm"
  d, L = 768, 12
  # RMSNorm drops every norm's bias: 4 norms per layer, the embedding's and the final one, d each.
  assert model_info(c)["params"] == GPT2_PARAMS["124m"] + 4 * d * L + 2 * d - (4 * L + 2) * d
  c = experiment("gpt2", "124m")
  c.model.mlp = "swiglu"
  assert model_info(c)["params"] == GPT2_PARAMS["124m"] + L * (d * 4 * d + 4 * d)


def test_placement_parameter_counts():
  """Against pre (2 LayerNorms of 2d per layer, a final one): which norms each placement
  adds or drops, per head q/k/v norms of 2K, ReZero's 2 scalars per layer, DyT's alpha."""
  c = experiment("gpt2", "124m")
  c.model.n_layer = L = 4
  d, K = 768, 64
  rows = {r["name"]: r["params"] for r in placements_info(c)["placements"]}
  pre = rows["pre"]
  assert rows["reorder"] == rows["mix"] == rows["lns"] == pre
  assert rows["post"] == rows["deepnorm"] == pre - 2 * d
  assert rows["peri"] == pre + 4 * d * L
  assert rows["rezero"] == pre - 4 * d * L - 2 * d + 2 * L
  assert rows["hybrid"] == pre - 2 * d * L + 3 * 2 * K * L
  c.model.update(qk_norm=True, norm="dyt")
  dyt_qk = {r["name"]: r["params"] for r in placements_info(c)["placements"]}
  assert dyt_qk["pre"] == pre + 2 * L + 1 + 2 * (2 * K + 1) * L  # alphas, then q/k norms
  assert dyt_qk["hybrid"] == rows["hybrid"] + 4 * L + 1  # q/k norms there already
