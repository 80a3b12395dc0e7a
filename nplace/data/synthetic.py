"""A seeded order-k Markov language whose entropies are known exactly.

The next token depends on the last token `b` and on the *groups* (one of GROUPS
classes per token) of the k-1 tokens before it: the key `b + V * q`, with q the
groups in base GROUPS. Each `b` has a small set of likely successors, drawn from a
Zipf law; each key keeps SUCCESSORS of them with random (Dirichlet, in 1/TABLE
steps) weights. With probability RESTART the next token is drawn from the Zipf law
instead, so the chain is irreducible and aperiodic: its stationary law is unique.

A bigram model can reach only `bigram_entropy`; getting down to `entropy_rate`
needs the groups of earlier tokens, i.e. attention. The key space (V * GROUPS^(k-1)
states) is small, so the stationary distribution, the unigram entropy (the
frequency loss) and the entropy rate are computed exactly by power iteration.
"""
import dataclasses
import functools

import numpy as np

VERSION = 1  # bump when a seed's tokens change: prepared caches are keyed by it
GROUPS = 4  # classes a token's group can take; earlier tokens matter only through it
BIGRAM_SUCCESSORS = 16  # candidate successors of each token (given the last token only)
SUCCESSORS = 4  # successors of each full key, a subset of the last token's candidates
TABLE = 64  # successor probabilities are multiples of 1/TABLE (sampling by table lookup)
RESTART = 0.05  # probability of drawing the next token from the Zipf law instead
ZIPF = 1.0  # exponent of the Zipf law p(rank r) ~ 1 / r^ZIPF
CHAINS = 16384  # chains generated in parallel (numpy work per step amortised over them)
SEGMENT = 1024  # tokens per chain segment; each starts afresh from the stationary law
MAX_KEYS = 1 << 20  # bound on V * GROUPS^(k-1): memory of the tables
MAX_VOCAB = 1 << 13  # bound on V: building the chain takes O(V^2) time


def n_keys(vocab: int, order: int) -> int:
  return vocab * GROUPS ** (order - 1)


@dataclasses.dataclass(frozen=True)
class Chain:
  """The transition law. Token ids are Zipf ranks (0 is the most likely restart)."""
  vocab: int
  order: int
  zipf_V: np.ndarray  # restart law
  group_V: np.ndarray  # group of each token
  succ_KM: np.ndarray  # successors of each key
  count_KM: np.ndarray  # their probabilities times TABLE (before mixing with restarts)

  @property
  def prob_KM(self):
    return self.count_KM / TABLE

  def next_key(self, key_N, token_N):
    """Key after `token_N` follows a state whose key is `key_N`."""
    q_N = key_N // self.vocab  # groups of tokens t-2 .. t-k, the nearest in the low digit
    q_N = (self.group_V[key_N % self.vocab] + GROUPS * q_N) % GROUPS ** (self.order - 1)
    return token_N + self.vocab * q_N

  def _mixed_KM(self):
    """p(successor | key), restart mass included."""
    return (1 - RESTART) * self.prob_KM + RESTART * self.zipf_V[self.succ_KM]

  @functools.cached_property
  def stationary_K(self) -> np.ndarray:
    """Stationary law over keys, by power iteration (contracts by >= RESTART per step)."""
    K, V = len(self.succ_KM), self.vocab
    sparse_KM = (1 - RESTART) * self.prob_KM
    next_KM = self.next_key(np.arange(K)[:, None], self.succ_KM)
    # After a restart the next key is (q', c) with c ~ zipf and q' = next_key's group part.
    q_K = self.next_key(np.arange(K), np.zeros(K, np.int64)) // V
    pi_K = np.full(K, 1.0 / K)
    for _ in range(10_000):
      new_K = np.bincount(next_KM.ravel(), (pi_K[:, None] * sparse_KM).ravel(), minlength=K)
      restart_Q = RESTART * np.bincount(q_K, pi_K, minlength=K // V)
      new_K += (restart_Q[:, None] * self.zipf_V[None, :]).ravel()
      done = np.abs(new_K - pi_K).sum() < 1e-13
      pi_K = new_K / new_K.sum()
      if done:
        return pi_K
    raise RuntimeError("synthetic chain: stationary law did not converge")

  @functools.cached_property
  def unigram_V(self) -> np.ndarray:
    """Stationary token law: the last token of the key."""
    return self.stationary_K.reshape(-1, self.vocab).sum(0)

  @property
  def unigram_entropy(self) -> float:
    """The frequency loss: cross-entropy of the best unigram model."""
    return _entropy(self.unigram_V)

  @property
  def entropy_rate(self) -> float:
    """The best achievable loss: sum_key pi(key) H(next | key)."""
    return float(self.stationary_K @ self._key_entropy_K())

  @property
  def bigram_entropy(self) -> float:
    """The best loss of a model that sees only the last token: H(next | last)."""
    V, pi_K = self.vocab, self.stationary_K
    mass_KM = pi_K[:, None] * (1 - RESTART) * self.prob_KM
    p_last_V = pi_K.reshape(-1, V).sum(0)
    joint_entropy = 0.0
    for lo in range(0, V, 256):  # p(last, next) for 256 last tokens at a time: bounded memory
      last = np.arange(lo, min(lo + 256, V))
      keys = (V * np.arange(len(pi_K) // V)[:, None] + last).ravel()
      joint_BV = np.outer(p_last_V[last], RESTART * self.zipf_V)
      flat = ((keys % V - lo)[:, None] * V + self.succ_KM[keys]).ravel()
      joint_BV += np.bincount(flat, mass_KM[keys].ravel(), minlength=joint_BV.size).reshape(-1, V)
      joint_entropy += _entropy(joint_BV)
    return joint_entropy - _entropy(p_last_V)

  def _key_entropy_K(self):
    restart_V = RESTART * self.zipf_V
    mixed_KM = self._mixed_KM()
    # Entropy of the dense row: all restart terms, with the successors' entries swapped in.
    all_restart = -(restart_V * np.log(restart_V)).sum()
    restart_KM = restart_V[self.succ_KM]
    return (all_restart + (restart_KM * np.log(restart_KM)).sum(1)
            - (mixed_KM * np.log(mixed_KM)).sum(1))

  def generate(self, n_tokens: int, seed: int, dtype=np.uint16):
    """Yields arrays of tokens, `n_tokens` in all: segments of parallel chains, each
    segment started from the stationary law, laid end to end (chain-major)."""
    rng = np.random.default_rng([seed, 1])
    K, V = len(self.succ_KM), self.vocab
    # Per key, TABLE slots holding each successor count_KM times: a uniform slot is a draw.
    slot_of_KB = (np.cumsum(self.count_KM, 1)[:, None, :] <= np.arange(TABLE)[:, None]).sum(-1)
    slot_KB = np.take_along_axis(self.succ_KM, slot_of_KB, axis=1).astype(np.int32)
    base_K = (self.next_key(np.arange(K), np.zeros(K, np.int64))).astype(np.int32)
    cum_zipf_V = np.cumsum(self.zipf_V)
    per_round = CHAINS * SEGMENT
    for start in range(0, n_tokens, per_round):
      n = min(per_round, n_tokens - start)
      chains = min(CHAINS, -(-n // SEGMENT))
      out_TN = np.empty((-(-n // chains), chains), dtype)
      key_N = rng.choice(K, size=chains, p=self.stationary_K).astype(np.int32)
      out_TN[0] = key_N % V
      slot_TN = rng.integers(TABLE, size=out_TN.shape, dtype=np.int32)
      u_TN = rng.random(out_TN.shape)
      restart_TN = u_TN < RESTART
      restart_token_TN = np.minimum(np.searchsorted(cum_zipf_V, u_TN / RESTART), V - 1)
      for t in range(1, len(out_TN)):
        token_N = np.where(restart_TN[t], restart_token_TN[t], slot_KB[key_N, slot_TN[t]])
        out_TN[t] = token_N
        key_N = base_K[key_N] + token_N
      yield out_TN.T.ravel()[:n]


def _entropy(p) -> float:
  p = p[p > 0]
  return float(-(p * np.log(p)).sum())


def build(vocab: int, order: int, seed: int) -> Chain:
  """The chain of a seed: successor sets and their weights."""
  if not (BIGRAM_SUCCESSORS <= vocab <= MAX_VOCAB and order >= 1
          and n_keys(vocab, order) <= MAX_KEYS):
    raise ValueError(f"synthetic chain: need {BIGRAM_SUCCESSORS} <= vocab <= {MAX_VOCAB} and "
                     f"vocab * {GROUPS}^(order-1) <= {MAX_KEYS}, got vocab={vocab} order={order}")
  rng = np.random.default_rng([seed, 0])
  zipf_V = 1.0 / np.arange(1, vocab + 1) ** ZIPF
  zipf_V /= zipf_V.sum()
  group_V = rng.integers(GROUPS, size=vocab)
  # Gumbel top-k: BIGRAM_SUCCESSORS distinct Zipf draws per last token, rows in blocks.
  candidates_VC = np.empty((vocab, BIGRAM_SUCCESSORS), np.int64)
  for i in range(0, vocab, 256):
    keys_BV = np.log(zipf_V) + rng.gumbel(size=(len(candidates_VC[i:i + 256]), vocab))
    candidates_VC[i:i + 256] = np.argpartition(-keys_BV, BIGRAM_SUCCESSORS - 1,
                                               axis=1)[:, :BIGRAM_SUCCESSORS]
  K = n_keys(vocab, order)
  pick_KM = np.argsort(rng.random((K, BIGRAM_SUCCESSORS)), axis=1)[:, :SUCCESSORS]
  succ_KM = np.take_along_axis(candidates_VC[np.arange(K) % vocab], pick_KM, axis=1)
  # Dirichlet(1) weights, rounded to TABLE slots with at least one slot each.
  count_KM = 1 + rng.multinomial(TABLE - SUCCESSORS, rng.dirichlet(np.ones(SUCCESSORS), size=K))
  return Chain(vocab, order, zipf_V, group_V, succ_KM, count_KM)
