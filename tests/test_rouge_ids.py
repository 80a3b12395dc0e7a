"""ROUGE on token ids against rouge-score itself, to the last bit: on texts of one word an id
(words rouge-score's tokenizer and stemmer keep whole, so its tokens are the ids), on the edge
cases, and through the evaluator on the synthetic source's rows against rouge-score on their
decoded text, the path they took before."""
import itertools
import string

import numpy as np
import pytest
from nltk.stem import porter

from nplace.config import base_config
from nplace.train import evaluation, rouge_ids, scores


def words_kept_whole(count):
  """`count` distinct lowercase words of 2 and 4 letters (rouge-score stems those over 3) that the
  Porter stemmer leaves as they are: rouge-score reads each back as itself."""
  stemmer = porter.PorterStemmer()
  candidates = ("".join(letters) for size in (2, 4) for letters in itertools.product(string.ascii_lowercase,
                                                                                    repeat=size))
  kept = list(itertools.islice((word for word in candidates if stemmer.stem(word) == word), 20 * count))
  return [kept[i] for i in np.random.default_rng(0).permutation(len(kept))[:count]]


def random_pairs(rng, count):
  """(prediction, target) id sequences: short ones of 0-12 ids, a tenth up to 160 (LCS over
  several 64-bit words); vocabularies of 1 to 300 ids, so repeats from none to all."""
  pairs = []
  for i in range(count):
    vocab, longest = rng.choice([1, 2, 3, 8, 50, 300]), 160 if i % 10 == 0 else 12
    pairs.append(tuple(rng.integers(0, vocab, rng.integers(0, longest + 1)) for _ in range(2)))
  return pairs


def rouge_score_f(pairs, words):
  """rouge-score's F-measures {type: [per pair]} of the pairs written as words."""
  from rouge_score import rouge_scorer
  scorer = rouge_scorer.RougeScorer(list(rouge_ids.ROUGE_TYPES), use_stemmer=True)
  text = lambda ids: " ".join(words[i] for i in ids)
  scored = [scorer.score(text(target), text(prediction)) for prediction, target in pairs]
  return {kind: [s[kind].fmeasure for s in scored] for kind in rouge_ids.ROUGE_TYPES}


def test_equals_rouge_score_on_a_thousand_random_pairs_of_words():
  words = words_kept_whole(300)
  pairs = random_pairs(np.random.default_rng(1), 1000)
  expected = rouge_score_f(pairs, words)
  got = rouge_ids.f_measures(*zip(*pairs))
  for kind in rouge_ids.ROUGE_TYPES:
    differ = [i for i, (a, b) in enumerate(zip(got[kind], expected[kind])) if a != b]
    assert not differ, (kind, [(pairs[i], got[kind][i], expected[kind][i]) for i in differ[:3]])
  texts = [[" ".join(words[i] for i in ids) for ids in side] for side in zip(*pairs)]
  assert rouge_ids.rouge(*zip(*pairs)) == scores.rouge(*texts)  # the means too: the same floats summed alike


EDGE_CASES = [  # (prediction, target, F of ROUGE-1, 2, L)
    ([], [], (0, 0, 0)),                       # nothing to compare: 0, as rouge-score says
    ([3, 4], [], (0, 0, 0)),
    ([], [3, 4], (0, 0, 0)),
    ([7], [7], (1, 0, 1)),                     # no bigram on either side: ROUGE-2 is 0, not 1
    ([1, 1, 1, 1], [1, 2], (1 / 3, 0, 1 / 3)),  # one 1 of the target's: 1 of 4 predicted, 1 of 2 targeted
    ([1, 1, 2, 1, 1], [1, 1, 1, 2], (8 / 9, 6 / 7, 2 / 3)),  # four 1s predicted, three count
    ([1], [0, 7], (0, 0, 0)),                  # its bigram with the padding must not read as (0, 7)
    ([5] * 130, [5] * 129 + [6], (258 / 260, 256 / 258, 258 / 260)),  # carries through three 64-bit words
]


def test_edge_cases_in_one_batch_as_rouge_score_scores_them():
  pairs = [(prediction, target) for prediction, target, _ in EDGE_CASES]
  got = rouge_ids.f_measures(*zip(*pairs))  # rows padded to the longest, 130
  expected = rouge_score_f(pairs, words_kept_whole(8))
  for kind in rouge_ids.ROUGE_TYPES:
    assert list(got[kind]) == expected[kind], kind
  assert np.stack([got[kind] for kind in rouge_ids.ROUGE_TYPES], axis=1) == pytest.approx(
      np.array([f for _, _, f in EDGE_CASES]))


def test_ids_too_large_for_int64_bigrams_are_refused():
  with pytest.raises(ValueError, match="int64"):
    rouge_ids.f_measures(np.array([[2 ** 40, 1]]), np.array([[1, 2]]))


def test_the_evaluator_scores_synthetic_rows_as_rouge_score_scores_their_decoded_text():
  # An eval's outputs as the eval step makes them (the targets the inputs shifted by one, argmax
  # predictions mostly the input, generated rows a few tokens repeated), ids up to GPT-2's vocabulary
  # so that decoded words of 4 and 5 digits meet the stemmer.
  c = base_config()
  c.data.seq_len, c.train.eval_batches, c.eval.generate = 64, 3, 4
  evaluator = evaluation.Evaluator(c, eval_step=None, put_batch=None, active=True)
  assert evaluator.rouge is rouge_ids.rouge and evaluator.decoding
  rng = np.random.default_rng(2)
  batches = []
  for vocab in (8, 256, 50257):
    window = rng.integers(0, vocab, (16, 65)).astype(np.int32)
    pred_BT = np.where(rng.random((16, 64)) < 0.7, window[:, :-1], rng.integers(0, vocab, (16, 64)))
    batches.append({"loss_JB": rng.random(16), "input_JBT": window[:, :-1], "target_JBT": window[:, 1:],
                    "pred_JBT": pred_BT.astype(np.int32), "gen_JBG": rng.choice(window[0], (4, 32)).astype(np.int32)})
  out = {key: np.stack([b[key] for b in batches]) for key in batches[0]}  # the eval step's [J, ...]
  got = evaluator.results(out)

  decode, _ = scores.text_decoder(c.data)

  def texts(key, rows=16, columns=slice(None)):
    return [decode(row[columns]) for batch in out[key] for row in batch[:rows]]

  expected = {"teacher_forced_": scores.rouge(texts("pred_JBT"), texts("target_JBT")),
              "copy_": scores.rouge(texts("input_JBT"), texts("target_JBT")),
              "gen_": scores.rouge(texts("gen_JBG"), texts("input_JBT", rows=4, columns=slice(-32, None)))}
  assert {prefix + kind: value for prefix, by_kind in expected.items() for kind, value in by_kind.items()} == \
      {name: value for name, value in got.items() if "rouge" in name}
