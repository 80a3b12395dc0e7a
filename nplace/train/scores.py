"""Study A's evaluation numbers from per-sequence losses and teacher-forced predictions:
perplexity both ways, ROUGE-1/2/L (rouge-score, stemmer on; on the synthetic language's ids its
numbers vectorised, nplace/train/rouge_ids.py) and, when configured, BERTScore."""
import importlib.util
import pathlib

import numpy as np

from nplace.data import tokenizers
from nplace.train import rouge_ids


def perplexities(loss_B) -> dict:
  """`perplexity`: the mean over sequences of exp(mean token CE) (the papers' number);
  `perplexity_of_mean_loss`: exp of the mean loss. Jensen: the first is >= the second."""
  loss_B = np.asarray(loss_B, np.float64)
  with np.errstate(over="ignore"):  # a diverged model's loss past ~709 nats: its perplexity is inf, said without a warning
    return {"perplexity": float(np.mean(np.exp(loss_B))),
            "perplexity_of_mean_loss": float(np.exp(np.mean(loss_B)))}


def text_decoder(data_config):
  """(ids -> str, what the strings are): the run's tokenizer for text sources; the synthetic
  language has no text, so its ids become space-separated numbers."""
  if data_config.source == "synthetic":
    return (lambda ids: " ".join(str(int(i)) for i in ids)), "token ids"
  tokenizer = tokenizers.make(data_config.tokenizer)
  return tokenizer.decode, f"text ({tokenizer.name} tokenizer)"


def rouge_of_rows(data_config, decode):
  """(predictions, targets) -> mean ROUGE-1/2/L F, for rows of `data_config`'s token ids.
  The synthetic language's ids are its words: rouge-score reads its decoded rows ("3 14 159")
  back as one token an id (digits, which its stemmer leaves as they are), so rouge_ids gives the
  same numbers from the ids, in a fraction of the time. A text source's word is several byte or
  BPE ids, and ROUGE on those ids is not ROUGE on words: its rows are decoded by `decode` and
  scored by rouge-score."""
  if data_config.source == "synthetic":
    return rouge_ids.rouge
  return lambda predictions, targets: rouge([decode(row) for row in predictions], [decode(row) for row in targets])


def rouge(predictions: list[str], targets: list[str]) -> dict:
  """Mean ROUGE-1/2/L F-measure (0..1) of each prediction against its target."""
  from rouge_score import rouge_scorer  # nltk's stemmer comes with it: a second of import, for ROUGE alone
  scorer = rouge_scorer.RougeScorer(list(rouge_ids.ROUGE_TYPES), use_stemmer=True)
  scores = [scorer.score(target, prediction) for prediction, target in zip(predictions, targets)]
  return {kind: float(np.mean([s[kind].fmeasure for s in scores])) for kind in rouge_ids.ROUGE_TYPES}


def bertscore_unavailable(model_path: str | None) -> str | None:
  """Why BERTScore cannot run (one line), or None when it can."""
  if not model_path:
    return "BERTScore off (set eval.bertscore_model to a local model directory to compute it)"
  if not pathlib.Path(model_path).is_dir():
    return f"BERTScore skipped: eval.bertscore_model={model_path} is not a directory (no download)"
  if importlib.util.find_spec("bert_score") is None:
    return (f"BERTScore skipped: the bert-score package is not installed "
            f"(pip install 'nplace[bertscore]'); eval.bertscore_model={model_path}")
  return None


def bertscore(predictions: list[str], targets: list[str], model_path: str, num_layers: int | None) -> dict:
  """Mean BERTScore precision, recall and F1 with the model at `model_path` (no download). A pair
  with a blank side scores 0, bert-score's own rule, applied here: under transformers 5 its
  blank-string path fails (build_inputs_with_special_tokens is gone), and an untrained model's
  argmax is often all spaces."""
  scored = [(p, t) for p, t in zip(predictions, targets) if p.strip() and t.strip()]
  if not scored:
    return {"bertscore_p": 0.0, "bertscore_r": 0.0, "bertscore_f1": 0.0}
  import bert_score  # optional: the `bertscore` extra (torch)
  if num_layers is None:  # bert-score knows layer counts only for hub names: use the last layer
    import transformers  # comes with bert-score
    num_layers = transformers.AutoConfig.from_pretrained(model_path).num_hidden_layers
  # The fast (tokenizers) tokenizer: the only kind transformers 5 has, and under 4.x the only one
  # that loads a model shipping tokenizer.json alone (sentence-transformers' all-MiniLM-L6-v2).
  cands, refs = map(list, zip(*scored))
  p, r, f = bert_score.score(cands, refs, model_type=model_path, num_layers=num_layers, use_fast_tokenizer=True)
  n = len(predictions)  # the blank pairs' zeros count in the mean
  return {"bertscore_p": float(p.sum()) / n, "bertscore_r": float(r.sum()) / n, "bertscore_f1": float(f.sum()) / n}
