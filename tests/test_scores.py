"""Evaluation numbers on hand-computed values: perplexity both ways, ROUGE (rouge-score with the
stemmer), the decoders and the ROUGE path each source takes, BERTScore's one-line refusals."""
import importlib.util
import math
import warnings

import pytest

from nplace.train import rouge_ids, scores
from nplace.config import base_config


def test_perplexity_definitions_on_hand_computed_values():
  # Two sequences with mean token CE 0 and ln 4: exp per sequence is 1 and 4.
  got = scores.perplexities([0.0, math.log(4.0)])
  assert got["perplexity"] == pytest.approx(2.5)  # (1 + 4) / 2
  assert got["perplexity_of_mean_loss"] == pytest.approx(2.0)  # exp((0 + ln 4) / 2)
  # three: the mean of exp, not its median (4) nor the middle of its range (8.5)
  assert scores.perplexities([0.0, math.log(4.0), math.log(16.0)])["perplexity"] == pytest.approx(7.0)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # a diverged model's: inf, without numpy's overflow warning on the terminal
    assert scores.perplexities([1000.0, 1.0]) == {"perplexity": math.inf, "perplexity_of_mean_loss": math.exp(500.5)}


def test_rouge_f_measures_on_known_strings():
  # Stemmed: target [the, cat, were, run], prediction [the, cat, run, quickli]: 3 of 4
  # unigrams shared, 1 of 3 bigrams (the cat), longest common subsequence the-cat-run (3).
  got = scores.rouge(["the cat runs quickly"], ["the cats were running"])
  assert got == pytest.approx({"rouge1": 0.75, "rouge2": 1 / 3, "rougeL": 0.75})


def test_rouge_averages_over_sequences_of_token_ids():
  # "1 2 4 3" vs "1 2 3 4": all unigrams, bigram 1-2 of 3, LCS 1-2-3 (3 of 4); identical: all 1.
  got = scores.rouge(["1 2 4 3", "7 8 9"], ["1 2 3 4", "7 8 9"])
  assert got == pytest.approx({"rouge1": 1.0, "rouge2": (1 / 3 + 1) / 2, "rougeL": (0.75 + 1) / 2})


def test_decoders_token_ids_for_synthetic_and_text_for_byte():
  c = base_config()
  decode, kind = scores.text_decoder(c.data)
  assert decode([3, 14, 159]) == "3 14 159" and kind == "token ids"
  c.data.source, c.data.tokenizer = "text:/nowhere.txt", "byte"
  decode, kind = scores.text_decoder(c.data)
  assert decode(list(b"Hi there") + [256]) == "Hi there" and kind == "text (byte tokenizer)"


def test_rouge_of_rows_on_the_ids_for_synthetic_and_through_rouge_score_on_the_text_for_byte():
  c = base_config()
  assert scores.rouge_of_rows(c.data, scores.text_decoder(c.data)[0]) is rouge_ids.rouge  # ids are its words
  c.data.source, c.data.tokenizer = "text:/nowhere.txt", "byte"
  rouge = scores.rouge_of_rows(c.data, scores.text_decoder(c.data)[0])
  # the known strings' words, stemmed, as above; on their bytes ROUGE would count letters
  got = rouge([list(b"the cat runs quickly")], [list(b"the cats were running")])
  assert got == pytest.approx({"rouge1": 0.75, "rouge2": 1 / 3, "rougeL": 0.75})


def test_bertscore_needs_a_local_model_and_the_package(monkeypatch, tmp_path):
  assert "eval.bertscore_model" in scores.bertscore_unavailable(None)
  assert "not a directory" in scores.bertscore_unavailable(str(tmp_path / "missing"))
  monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # as if not installed
  note = scores.bertscore_unavailable(str(tmp_path))
  assert "bert-score" in note and "\n" not in note
