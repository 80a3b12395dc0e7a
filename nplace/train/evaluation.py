"""Evaluation as in study A, during training and on a checkpoint (`nplace eval`): validation
loss, perplexity both ways and, scored with ROUGE-1/2/L and (when configured) BERTScore
(nplace/train/scores.py):
- `teacher_forced_*`: the argmax prediction at each position given the true tokens before it,
  against the targets (the paper's number). An untrained model's argmax is mostly its own input
  token, and ROUGE forgives the one-token shift, so these start high;
- `copy_rouge*`: the input tokens themselves against the targets, the teacher-forced score of a
  model that only copies (ROUGE only: the baseline the teacher-forced numbers must beat);
- `gen_*`: greedy continuations of each sequence's first half against its second half
  (eval.generate; `decoding` says how), where copying earns nothing.
One eval step call per evaluation, on all its batches: their continuations decode together.
"""
import jax
import numpy as np

from nplace.data import loader, prepare
from nplace.errors import ConfigError
from nplace.train import checkpoint, scores, steps
from nplace.train.summary import eval_fields


class Evaluator:
  """params -> {name: value} over the first `train.eval_batches` validation batches (always
  the same ones). Text scores are computed where `active` (process 0: the one that writes).
  `share` (i, n): this process loads the i-th of n shares of each batch (sharding.process_share;
  one process's whole batch by default)."""

  def __init__(self, config, eval_step, put_batch, active: bool, share: tuple[int, int] = (0, 1)):
    self.config, self.eval_step, self.put_batch = config, eval_step, put_batch
    self.active, self.share = active, share
    self.decode, text = scores.text_decoder(config.data)
    self.rouge_text = text if config.eval.rouge else None  # what ROUGE compares
    self.rouge = scores.rouge_of_rows(config.data, self.decode)
    self.bertscore_note = scores.bertscore_unavailable(config.eval.bertscore_model)
    self.scored = bool(self.rouge_text) or not self.bertscore_note
    self.decoding = None  # how the eval step's continuations are decoded (summary.gen_decoding)
    if steps.generates(config) and self.scored:
      # the eval step prompts the first rows of each global batch, whatever this process loads
      T, sequences = config.data.seq_len, config.train.eval_batches * min(config.eval.generate, config.train.batch_size)
      prompt = steps.prompt_length(T)
      self.decoding = f"greedy, prompt {prompt} tokens, {T - prompt} generated, {sequences} sequences"
    self._copy = None  # the copy baseline: the same validation batches at every evaluation

  def notes(self) -> list[str]:
    """What the scores are computed on, once per run."""
    rouge = (f"teacher-forced ROUGE on {self.rouge_text}, beside the copy baseline (the inputs as predictions)"
             if self.rouge_text else "ROUGE off (eval.rouge=False)")
    generation = (f"generated continuations: {self.decoding}" if self.decoding
                  else "generation off (eval.generate=0, or nothing to score it with)")
    return [f"eval: {rouge}", f"eval: {generation}"] + ([f"eval: {self.bertscore_note}"] if self.bertscore_note
                                                        else [])

  def __call__(self, params) -> dict:
    return self.results(self.outputs(params))

  def outputs(self, params) -> dict:
    """The eval step's outputs (on the host), [J, ...] each: the validation batches in one call,
    so that their continuations are decoded in one loop."""
    i, n = self.share
    val = loader.make_iterator(self.config.data, "val", self.config.train.batch_size // n, seed=self.config.seed,
                               shuffle=False, process_index=i, process_count=n)
    batches_JBT1 = np.stack([next(val) for _ in range(self.config.train.eval_batches)])
    return jax.device_get(self.eval_step(params, self.put_batch(batches_JBT1)))

  def results(self, out) -> dict:
    """name -> value from one run's outputs."""
    loss_B = out["loss_JB"].reshape(-1)
    results = {"loss": float(loss_B.mean()), **scores.perplexities(loss_B)}
    if not (self.active and self.scored):
      return results

    def rows(key, count=None):
      return np.concatenate(list(out[key][:, :count]))

    target_NT = rows("target_JBT")
    results |= self.text_scores("teacher_forced_", rows("pred_JBT"), target_NT)
    if self.rouge_text:
      if self._copy is None:
        self._copy = {f"copy_{k}": v for k, v in self.rouge(rows("input_JBT"), target_NT).items()}
      results |= self._copy
    if self.decoding:
      _, generating, generated = out["gen_JBG"].shape  # the batches' first rows (eval.generate)
      results |= self.text_scores("gen_", rows("gen_JBG"), rows("input_JBT", generating)[:, -generated:])
    return results

  def text_scores(self, prefix: str, predictions_NL, targets_NL) -> dict:
    """ROUGE and BERTScore, as configured, of the token-id rows `predictions_NL` against
    `targets_NL`, named `prefix`+score."""
    out = self.rouge(predictions_NL, targets_NL) if self.rouge_text else {}
    if not self.bertscore_note:
      out |= scores.bertscore([self.decode(row) for row in predictions_NL], [self.decode(row) for row in targets_NL],
                              self.config.eval.bertscore_model, self.config.eval.bertscore_layers)
    return {prefix + name: value for name, value in out.items()}


def check_validation_split(config, meta) -> None:
  """ConfigError unless the validation split (of the prepared data's `meta`) holds what reads it:
  `train.eval_batches` batches, and with probes on, the probe suite's `probe.batch_size` rows."""
  windows = sum((n - 1) // config.data.seq_len for _, n in meta["shards"]["val"])
  size = f"(data.val_fraction={config.data.val_fraction} sets its size)"
  if config.train.eval_batches * config.train.batch_size > windows:
    raise ConfigError("train.eval_batches", config.train.eval_batches,
                      f"the validation split holds {windows // config.train.batch_size} batches of "
                      f"{config.train.batch_size} {size}")
  if config.probe.every and config.probe.batch_size > windows:
    raise ConfigError("probe.batch_size", config.probe.batch_size,
                      f"the validation split holds {windows} sequences of {config.data.seq_len} tokens {size}")


def evaluate_checkpoint(config, workdir, step=None) -> dict:
  """The summary-named eval numbers of a checkpoint, on one device; plus `step`, `rouge_text`
  and `gen_decoding`."""
  check_validation_split(config, prepare.read_meta(prepare.prepared_dir(config.data)))
  params, step = checkpoint.restore_params(config, workdir, step)
  evaluator = Evaluator(config, jax.jit(steps.make_eval_step(config)), lambda b: b, active=True)
  for note in evaluator.notes():
    print(note, flush=True)
  return ({"step": int(step), "rouge_text": evaluator.rouge_text, "gen_decoding": evaluator.decoding}
          | eval_fields(evaluator(params)))
