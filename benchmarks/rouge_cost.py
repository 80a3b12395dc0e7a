"""What ROUGE costs one evaluation of a grid cell on the synthetic source: the token-id path
(nplace/train/rouge_ids.py) the evaluator takes there, against rouge-score on decoded text, the
path it took before and still takes for text sources (target: <= 1 s an evaluation at
stability.py:gpu's sizes, 35 trials).

    .venv/bin/python benchmarks/rouge_cost.py [--trials 35] [--repeats 3] [--sample 32]

Each trial's eval outputs are made up at the tier's sizes (eval_batches x batch_size rows of
seq_len, eval.generate rows of each batch continued for half of it): inputs of the synthetic
vocabulary, teacher-forced predictions 70% the input token (an early model copies), generated
rows of the input's tokens. The evaluator scores them trial by trial as a cell's evaluation
does, its copy baseline included (computed at the first evaluation only). rouge-score, a
minute at these sizes, is timed on `--sample` rows of each kind beside the id path on
the same rows and extrapolated from them.
"""
import argparse

import numpy as np

from _harness import median_seconds
from nplace.config import experiment, validate
from nplace.train import evaluation, rouge_ids, scores


def trial_outputs(config, rng) -> dict:
  """One trial's eval-step outputs (nplace/train/steps.py's names and dtypes), [J, ...] each."""
  B, T, vocab = config.train.batch_size, config.data.seq_len, config.data.synthetic_vocab
  generating, generated = min(config.eval.generate, B), T - T // 2
  outs = []
  for _ in range(config.train.eval_batches):
    window = rng.integers(0, vocab, (B, T + 1)).astype(np.int32)
    guessed_BT = rng.integers(0, config.model.vocab_size, (B, T))
    outs.append({"loss_JB": rng.random(B), "input_JBT": window[:, :-1], "target_JBT": window[:, 1:],
                 "pred_JBT": np.where(rng.random((B, T)) < 0.7, window[:, :-1], guessed_BT).astype(np.int32),
                 "gen_JBG": rng.choice(window[0], (generating, generated)).astype(np.int32)})
  return {key: np.stack([o[key] for o in outs]) for key in outs[0]}


def score_cell(config, trials: list[dict]):
  """A cell's evaluation of its trials' outputs, by a fresh evaluator (its copy baseline not yet
  computed)."""
  evaluator = evaluation.Evaluator(config, eval_step=None, put_batch=None, active=True)
  return [evaluator.results(outs) for outs in trials]


def rouge_score_seconds(config, outs, sample: int, trials: int) -> float:
  """rouge-score's time for one evaluation, extrapolated from `sample` rows of each kind of one
  trial's outputs `outs`, each kind timed beside the id path on the same rows (printed)."""
  def rows(key, count=None):  # as the evaluator gathers them
    return np.concatenate(list(outs[key][:, :count]))

  _, generating, generated = outs["gen_JBG"].shape
  kinds = {  # name: (predictions, targets, how many times an evaluation scores them)
      "teacher-forced": (rows("pred_JBT"), rows("target_JBT"), trials + 1),  # + the copy baseline
      "generated": (rows("gen_JBG"), rows("input_JBT", generating)[:, -generated:], trials),
  }
  decode, _ = scores.text_decoder(config.data)
  scores.rouge(["a"], ["a"])  # imports rouge-score and nltk: not ROUGE's cost
  extrapolated = 0.0
  for name, (predictions, targets, times) in kinds.items():
    a_trial = len(predictions)
    predictions, targets = predictions[:sample], targets[:sample]
    texts = [decode(row) for row in predictions], [decode(row) for row in targets]
    text_s = median_seconds(lambda: scores.rouge(*texts), 1)
    ids_s = median_seconds(lambda: rouge_ids.rouge(predictions, targets), 1)
    extrapolated += text_s / len(predictions) * a_trial * times
    print(f"{name}, {len(predictions)} rows of {predictions.shape[1]}: rouge-score {text_s * 1e3:7.1f} ms, "
          f"ids {ids_s * 1e3:5.1f} ms")
  return extrapolated


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=35, help="trials in the cell")
  parser.add_argument("--repeats", type=int, default=3, help="evaluations timed (the median is printed)")
  parser.add_argument("--sample", type=int, default=32, help="rows of each kind rouge-score is timed on")
  args = parser.parse_args()
  config = experiment("stability", "gpu")
  validate(config)
  rng = np.random.default_rng(0)
  trials = [trial_outputs(config, rng) for _ in range(args.trials)]
  print(f"stability.py:gpu, {args.trials} trials, each: {config.train.eval_batches} batches of "
        f"{config.train.batch_size} x {config.data.seq_len} teacher-forced (the copy baseline: once), "
        f"the first {trials[0]['gen_JBG'].shape[1]} of each continued for {trials[0]['gen_JBG'].shape[2]}")
  text_s = rouge_score_seconds(config, trials[0], args.sample, args.trials)
  ids_s = median_seconds(lambda: score_cell(config, trials), args.repeats)
  print(f"one evaluation: ids {ids_s:.2f} s (the evaluator's, median of {args.repeats}; target <= 1 s), "
        f"rouge-score ~{text_s:.0f} s (extrapolated from the rows above): {text_s / ids_s:,.0f}x")


if __name__ == "__main__":
  main()
