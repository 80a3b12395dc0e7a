"""ROUGE-1/2/L F-measures on token ids, vectorised over a batch of sequences with numpy.

rouge-score (scores.rouge) tokenizes text and scores one pair at a time in pure Python: about a
minute for one evaluation of a 35-trial grid cell. Where each id is one word, as in the synthetic
language, the same numbers come from the ids themselves, the batch in numpy's other axis:
ROUGE-N's clipped n-gram overlap by sorting, ROUGE-L's longest common subsequence by the
bit-parallel recurrence of Allison and Dix (1986), in Hyyrö's (2004) form, 64 target positions to
a machine word. Counts and floats are computed as rouge-score computes them, so the F-measures
are its own to the last bit where its tokens are the ids' words (tests/test_rouge_ids.py);
scores.rouge_of_rows says for which sources that holds.
"""
import numpy as np

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")  # rouge-score's names: scores.rouge asks it for these
PREDICTION_PAD, TARGET_PAD = -1, -2  # past a row's end: match no id and not each other


def rouge(predictions, targets) -> dict:
  """Mean ROUGE-1/2/L F-measure (0..1) of each prediction against its target: scores.rouge's
  numbers for the rows decoded to one word an id."""
  return {kind: float(np.mean(f_B)) for kind, f_B in f_measures(predictions, targets).items()}


def f_measures(predictions, targets) -> dict:
  """{ROUGE type: its F-measure per row}. `predictions` and `targets`: [B, L] integer arrays, or B
  sequences of ids each, of any lengths (empty ones included); ids are >= 0. Memory: a bool per
  (prediction id, target id) pair of a row, 8 MB for 128 rows of 256."""
  prediction_BP, prediction_len_B = _padded(predictions, PREDICTION_PAD)
  target_BT, target_len_B = _padded(targets, TARGET_PAD)
  vocab = int(max(prediction_BP.max(initial=0), target_BT.max(initial=0))) + 1
  out = {}
  for n in (1, 2):
    predicted_B, targeted_B = np.maximum(prediction_len_B - n + 1, 0), np.maximum(target_len_B - n + 1, 0)
    overlap_B = _clipped_overlap(_ngram_keys(prediction_BP, predicted_B, n, vocab, PREDICTION_PAD),
                                 _ngram_keys(target_BT, targeted_B, n, vocab, TARGET_PAD), vocab ** n)
    out[f"rouge{n}"] = _f_measure(overlap_B, predicted_B, targeted_B)
  out["rougeL"] = _f_measure(_lcs_lengths(prediction_BP, target_BT, vocab), prediction_len_B, target_len_B)
  return out


def _padded(sequences, pad: int):
  """([B, L] int64 ids, [B] row lengths) from a [B, L] array or B sequences, `pad` past each
  row's end."""
  if isinstance(sequences, np.ndarray) and sequences.ndim == 2:
    return sequences.astype(np.int64), np.full(len(sequences), sequences.shape[1])
  rows = [np.asarray(row, np.int64) for row in sequences]
  length_B = np.array([len(row) for row in rows], np.int64)
  ids_BL = np.full((len(rows), length_B.max(initial=0)), pad, np.int64)
  for ids_L, row in zip(ids_BL, rows):
    ids_L[:len(row)] = row
  return ids_BL, length_B


def _ngram_keys(ids_BL, count_B, n: int, vocab: int, pad: int):
  """Each row's n-grams, one int64 each (the ids as base-`vocab` digits); the first count_B of a
  row are its own, the rest `pad`."""
  width = max(ids_BL.shape[1] - n + 1, 0)
  keys_BN = np.zeros((len(ids_BL), width), np.int64)
  for k in range(n):
    keys_BN = keys_BN * vocab + ids_BL[:, k:k + width]
  return np.where(np.arange(width) < count_B[:, None], keys_BN, pad)


def _clipped_overlap(prediction_BN, target_BM, distinct: int):
  """Per row, the sum over n-grams of min(its count in the prediction, its count in the target).
  Numbering each n-gram's occurrences in a row (0, 1, ...) pairs the prediction's k-th with the
  target's k-th: the overlap is the number of (n-gram, k) both rows hold, the equal neighbours
  of their union sorted (each row's are distinct). `distinct`: how many n-grams the ids make."""
  stride = max(prediction_BN.shape[1], target_BM.shape[1])
  if distinct * stride >= 2 ** 63:
    raise ValueError(f"{distinct} possible n-grams, numbered in rows of {stride}: past int64's range")
  union = np.sort(np.concatenate([_numbered(prediction_BN, stride), _numbered(target_BM, stride)], axis=1), axis=1)
  return np.count_nonzero(union[:, 1:] == union[:, :-1], axis=1)


def _numbered(keys_BN, stride: int):
  """key * stride + its occurrence number in the row (0 for the first), row by row, sorted."""
  sorted_BN = np.sort(keys_BN, axis=1)
  position_N = np.arange(sorted_BN.shape[1])
  starts_run_BN = np.ones(sorted_BN.shape, bool)
  starts_run_BN[:, 1:] = sorted_BN[:, 1:] != sorted_BN[:, :-1]
  run_start_BN = np.maximum.accumulate(np.where(starts_run_BN, position_N, 0), axis=1)
  return sorted_BN * stride + (position_N - run_start_BN)


def _f_measure(overlap_B, predicted_B, targeted_B):
  """rouge-score's F: precision overlap / max(predicted, 1), recall overlap / max(targeted, 1),
  2 p r / (p + r), 0 where p + r is; its operations in its order, so the same floats."""
  precision_B = overlap_B / np.maximum(predicted_B, 1)
  recall_B = overlap_B / np.maximum(targeted_B, 1)
  sum_B = precision_B + recall_B
  return np.divide(2 * precision_B * recall_B, sum_B, out=np.zeros_like(sum_B), where=sum_B > 0)


def _lcs_lengths(prediction_BP, target_BT, vocab: int):
  """Longest common subsequence length of each row pair. Bit i of V is 0 where the LCS of the
  prediction so far with the target's first i + 1 ids is one longer than with its first i, so
  V's zeros count the LCS; one prediction id updates all of a row's bits in a few word
  operations: V <- (V + U) | (V - U), U = V & (the target positions holding that id)."""
  rows, target_len = target_BT.shape
  words = -(-target_len // 64)
  narrow = np.min_scalar_type(-vocab)  # the narrowest signed type for ids and pads: fewer bytes to compare
  target_BW64 = np.full((rows, 64 * words), TARGET_PAD, narrow)  # the padding's bits stay 1
  target_BW64[:, :target_len] = target_BT
  matches_BPW = np.packbits(prediction_BP.astype(narrow)[:, :, None] == target_BW64[:, None, :], axis=-1,
                            bitorder="little").view("<u8")  # bit i of word w: position 64 w + i
  v_BW = np.full((rows, words), np.iinfo(np.uint64).max, np.uint64)
  for matches_BW in matches_BPW.transpose(1, 0, 2):
    u_BW = v_BW & matches_BW
    v_BW = _add(v_BW, u_BW) | (v_BW ^ u_BW)  # V - U is V ^ U: U's bits are V's
  return 64 * words - np.bitwise_count(v_BW).sum(axis=1)


def _add(a_BW, b_BW):
  """a + b, row by row, as numbers of W 64-bit words (least significant first); the carry out of
  the top word is dropped."""
  sum_BW = a_BW + b_BW
  carry_BW = sum_BW < a_BW
  for w in range(1, sum_BW.shape[1]):
    sum_BW[:, w] += carry_BW[:, w - 1]
    carry_BW[:, w] |= carry_BW[:, w - 1] & (sum_BW[:, w] == 0)
  return sum_BW
