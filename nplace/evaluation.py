"""Evaluation as in study A, during training and as `nplace eval --workdir DIR [--step N]
[--json OUT] [--config CFG]`: validation loss, perplexity both ways, ROUGE-1/2/L of the
teacher-forced argmax predictions and, when configured, BERTScore (nplace/scores.py)."""
import json
import pathlib

import jax
import numpy as np
from absl import flags

from nplace import data, scores

SUMMARY_NAMES = {"loss": "val_loss", "perplexity": "val_perplexity",
                 "perplexity_of_mean_loss": "val_perplexity_of_mean_loss"}  # others keep their name


class Evaluator:
  """params -> {name: value} over the first `train.eval_batches` validation batches (always
  the same ones). Text scores are computed where `active` (process 0: the one that writes)."""

  def __init__(self, config, eval_step, put_batch, local_batch: int, active: bool):
    self.config, self.eval_step, self.put_batch = config, eval_step, put_batch
    self.local_batch, self.active = local_batch, active
    self.decode, text = scores.text_decoder(config.data)
    self.rouge_text = text if config.eval.rouge else None  # what ROUGE compares
    self.bertscore_note = scores.bertscore_unavailable(config.eval.bertscore_model)

  def notes(self) -> list[str]:
    """What the scores are computed on, once per run."""
    rouge = f"ROUGE on {self.rouge_text}" if self.rouge_text else "ROUGE off (eval.rouge=False)"
    return [f"eval: {rouge}"] + ([f"eval: {self.bertscore_note}"] if self.bertscore_note else [])

  def __call__(self, params) -> dict:
    val = data.make_iterator(self.config.data, "val", self.local_batch, seed=self.config.seed, shuffle=False)
    outs = [jax.device_get(self.eval_step(params, self.put_batch(next(val))))
            for _ in range(self.config.train.eval_batches)]
    loss_B = np.concatenate([o["loss_B"] for o in outs])
    results = {"loss": float(loss_B.mean()), **scores.perplexities(loss_B)}
    if self.active and (self.rouge_text or not self.bertscore_note):
      pred = [self.decode(row) for o in outs for row in o["pred_BT"]]
      target = [self.decode(row) for o in outs for row in o["target_BT"]]
      if self.rouge_text:
        results |= scores.rouge(pred, target)
      if not self.bertscore_note:
        results |= scores.bertscore(pred, target, self.config.eval.bertscore_model,
                                    self.config.eval.bertscore_layers)
    return results


def summary_fields(results: dict) -> dict:
  """eval results under their summary.json names."""
  return {SUMMARY_NAMES.get(name, name): value for name, value in results.items()}


def evaluate_checkpoint(config, workdir, step=None) -> dict:
  """The summary-named eval numbers of a checkpoint, on one device; plus `step`, `rouge_text`."""
  from nplace import checkpoint, train_state
  params, step = checkpoint.restore_params(config, workdir, step)
  evaluator = Evaluator(config, jax.jit(train_state.make_eval_step(config)), lambda b: b,
                        config.train.batch_size, active=True)
  for note in evaluator.notes():
    print(note, flush=True)
  return {"step": int(step), "rouge_text": evaluator.rouge_text} | summary_fields(evaluator(params))


def _define(fv):
  flags.DEFINE_string("workdir", None, "training run directory", flag_values=fv)
  flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)", flag_values=fv)
  flags.DEFINE_string("json", None, "also write the numbers to this JSON file", flag_values=fv)


def main(argv):
  from nplace import checkpoint
  from nplace.cli import UsageError, parse_flags
  from nplace.config import validate
  fv = parse_flags(argv, _define, need_config=False)
  if not fv.workdir:
    raise UsageError("--workdir is required")
  try:
    config = fv.config if fv.config is not None else checkpoint.restore_config(fv.workdir, fv.step)
    validate(config)
    out = evaluate_checkpoint(config, fv.workdir, fv.step)
  except FileNotFoundError as e:
    raise UsageError(str(e)) from None
  for name, value in out.items():
    print(f"{name:28s} {value:.6g}" if isinstance(value, float) else f"{name:28s} {value}")
  if fv.json:
    pathlib.Path(fv.json).write_text(json.dumps(out, indent=2) + "\n")
