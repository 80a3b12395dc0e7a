"""Evaluation as in study A, during training and on a checkpoint (`nplace eval`): validation
loss, perplexity both ways, ROUGE-1/2/L of the teacher-forced argmax predictions and, when
configured, BERTScore (nplace/train/scores.py)."""
import jax
import numpy as np

from nplace.data import loader
from nplace.train import checkpoint, scores, steps
from nplace.train.summary import eval_fields


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
    return self.results(self.outputs(params))

  def outputs(self, params) -> list[dict]:
    """The eval step's outputs (on the host) for each validation batch."""
    val = loader.make_iterator(self.config.data, "val", self.local_batch, seed=self.config.seed, shuffle=False)
    return [jax.device_get(self.eval_step(params, self.put_batch(next(val))))
            for _ in range(self.config.train.eval_batches)]

  def results(self, outs) -> dict:
    """name -> value from one run's outputs."""
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


def evaluate_checkpoint(config, workdir, step=None) -> dict:
  """The summary-named eval numbers of a checkpoint, on one device; plus `step`, `rouge_text`."""
  params, step = checkpoint.restore_params(config, workdir, step)
  evaluator = Evaluator(config, jax.jit(steps.make_eval_step(config)), lambda b: b,
                        config.train.batch_size, active=True)
  for note in evaluator.notes():
    print(note, flush=True)
  return {"step": int(step), "rouge_text": evaluator.rouge_text} | eval_fields(evaluator(params))

