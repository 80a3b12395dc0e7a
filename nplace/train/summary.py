"""A run's summary: what `nplace train` writes to WORKDIR/summary.json when a run ends
(completed, diverged or preempted), and what the sweep, the report, the lab and the outcomes
read back. One field per number, each with its one-line doc; a summary file with a field
this schema lacks, or without one it has, is an error naming the file and the field, except a
field added after summaries were filed (`since`, results/*/trials.jsonl hold such summaries),
which reads as its default where absent.
"""
import dataclasses
import json
import typing

import numpy as np

COLLAPSE_MARGIN = 0.05  # nats: study B's "sits at the frequency loss" (docs/science.md)


STATUSES = ("completed", "diverged", "preempted")


def _of_type(value, hint) -> bool:
  """JSON's value `value` is of the field type `hint` (an int is a float; a bool is no number)."""
  kinds = typing.get_args(hint) or (hint,)
  if value is None or isinstance(value, bool):
    return type(value) in kinds
  return isinstance(value, tuple(kinds)) or (float in kinds and isinstance(value, int))


class SummaryError(ValueError):
  """A summary.json that does not match the schema (or is not JSON); one line."""


def field(doc: str, default=None, counter: bool = False, eval_name: str | None = None, since: str | None = None):
  """A summary field. `counter`: carried over a resume (saved with every checkpoint): the running
  counters, and the last train loss and evaluation, which a run resumed at its last step does not
  compute again; `eval_name`: the name an evaluation result has before it is filed here; `since`:
  the change that added it after summaries had been filed (a summary without it reads it as
  `default`)."""
  return dataclasses.field(default=default, metadata={"doc": doc, "counter": counter, "eval_name": eval_name,
                                                      "since": since})


# `since` of the fields added with the copy baseline and generation: summaries filed before lack them
GENERATION = "the copy baseline and generated continuations (eval.generate)"


@dataclasses.dataclass
class Summary:
  status: str = field("completed | diverged | preempted", "completed")
  step: int = field("the last step run", 0)
  train_loss: float | None = field("train loss at the last step", counter=True)
  val_loss: float | None = field("validation loss at the last evaluation", eval_name="loss", counter=True)
  frequency_loss: float | None = field("the data's frequency loss: unigram cross-entropy on the validation split")
  entropy_rate: float | None = field("the synthetic language's entropy rate (the best achievable loss); None for text")
  tokens_per_sec: float | None = field("train tokens per second over the run, hooks included, compile excluded")
  diverged_at: int | None = field("the step whose loss or gradient was not finite (train.on_divergence=stop)")
  collapsed: bool | None = field(f"val_loss within {COLLAPSE_MARGIN} nats of frequency_loss")
  val_perplexity: float | None = field("mean over sequences of exp(mean token loss)", eval_name="perplexity",
                                       counter=True)
  val_perplexity_of_mean_loss: float | None = field("exp(val_loss)", eval_name="perplexity_of_mean_loss",
                                                    counter=True)
  rouge_text: str | None = field("what ROUGE compares (token ids or decoded text); None when off")
  loss_spikes: int = field("train losses above the rolling window's z-score threshold", 0, counter=True)
  skipped_steps: int = field("updates dropped as non-finite (train.on_divergence=skip)", 0, counter=True)
  max_train_loss: float | None = field("highest logged train loss after warmup", counter=True)
  min_train_loss: float | None = field("lowest train loss after warmup", counter=True)
  max_loss_rebound: float | None = field("largest climb of the train loss above its running minimum, "
                                         "after warmup", counter=True)
  rouge1: float | None = field("teacher-forced ROUGE-1 F: the argmax prediction at each position, given the true "
                               "tokens before it, against the targets (an untrained model scores near "
                               "copy_rouge1)", eval_name="teacher_forced_rouge1", counter=True)
  rouge2: float | None = field("teacher-forced ROUGE-2 F", eval_name="teacher_forced_rouge2", counter=True)
  rougeL: float | None = field("teacher-forced ROUGE-L F", eval_name="teacher_forced_rougeL", counter=True)
  bertscore_p: float | None = field("teacher-forced BERTScore precision (eval.bertscore_model)",
                                    eval_name="teacher_forced_bertscore_p", counter=True)
  bertscore_r: float | None = field("teacher-forced BERTScore recall", eval_name="teacher_forced_bertscore_r",
                                    counter=True)
  bertscore_f1: float | None = field("teacher-forced BERTScore F1", eval_name="teacher_forced_bertscore_f1",
                                     counter=True)
  copy_rouge1: float | None = field("ROUGE-1 F of the input tokens themselves against the targets: the "
                                    "teacher-forced score of a model that copies its input", since=GENERATION,
                                    counter=True)
  copy_rouge2: float | None = field("copy baseline's ROUGE-2 F", since=GENERATION, counter=True)
  copy_rougeL: float | None = field("copy baseline's ROUGE-L F", since=GENERATION, counter=True)
  gen_decoding: str | None = field("how the gen_* continuations were decoded (greedy; prompt, generated and "
                                   "sequence counts); None when off (eval.generate)", since=GENERATION)
  gen_rouge1: float | None = field("ROUGE-1 F of the greedy continuation of each validation sequence's first "
                                   "half against its second half", since=GENERATION, counter=True)
  gen_rouge2: float | None = field("generated ROUGE-2 F", since=GENERATION, counter=True)
  gen_rougeL: float | None = field("generated ROUGE-L F", since=GENERATION, counter=True)
  gen_bertscore_p: float | None = field("generated BERTScore precision (eval.bertscore_model)", since=GENERATION,
                                        counter=True)
  gen_bertscore_r: float | None = field("generated BERTScore recall", since=GENERATION, counter=True)
  gen_bertscore_f1: float | None = field("generated BERTScore F1", since=GENERATION, counter=True)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  def to_json(self, indent: int | None = 2) -> str:
    """summary.json's text (indent None: one line, as the trainer's last message)."""
    return json.dumps(self.to_dict(), indent=indent) + ("\n" if indent else "")

  @classmethod
  def from_dict(cls, record: dict, where) -> "Summary":
    """SummaryError naming `where` (a file) and the first field it lacks or has too many; a
    field added since summaries were filed (`since`) takes its default where absent."""
    fields = dataclasses.fields(cls)
    if not isinstance(record, dict):
      raise SummaryError(f"{where}: a summary must be a JSON object")
    for name in record:
      if name not in {f.name for f in fields}:
        raise SummaryError(f"{where}: unknown summary field {name!r}")
    hints = typing.get_type_hints(cls)
    for f in fields:
      if f.name not in record and not f.metadata["since"]:
        raise SummaryError(f"{where}: summary field {f.name!r} is missing")
      if f.name in record and not _of_type(record[f.name], hints[f.name]):
        raise SummaryError(f"{where}: summary field {f.name}={record[f.name]!r} is not "
                           f"{' or '.join(t.__name__ for t in typing.get_args(hints[f.name]) or [hints[f.name]])}")
    if record.get("status", "completed") not in STATUSES or record.get("step", 0) < 0:
      raise SummaryError(f"{where}: status {record.get('status')!r} at step {record.get('step')}: expected "
                         f"{' | '.join(STATUSES)} at a step >= 0")
    return cls(**record)

  @classmethod
  def read(cls, path) -> "Summary":
    try:
      record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
      raise SummaryError(f"{path}: {e}") from None
    return cls.from_dict(record, path)

  def file_eval(self, results: dict) -> None:
    """Files an evaluation's results (nplace/train/evaluation.py) under their field names."""
    for name, value in eval_fields(results).items():
      setattr(self, name, value)

  def counters(self) -> dict:
    """The fields carried over a resume."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["counter"]}


def eval_fields(results: dict) -> dict:
  """An evaluation's results (loss, perplexity, teacher_forced_rouge1, ...) under their summary
  field names."""
  names = {f.metadata["eval_name"] or f.name: f.name for f in dataclasses.fields(Summary)}
  return {names[name]: value for name, value in results.items()}


def collapsed(val_loss, frequency_loss, margin=COLLAPSE_MARGIN):
  """Study B's verdict: the validation loss sits within `margin` nats of the frequency loss
  (either side), i.e. the model predicts no better than the unigram distribution."""
  return np.abs(np.asarray(val_loss) - np.asarray(frequency_loss)) <= margin
