"""Multi-query associative recall (MQAR): a synthetic recall task, generated, never stored.

Zoology's task (arXiv 2312.04927, Sec. 3); an example is a pure function of (seed, split, index)."""

import dataclasses
import functools
import json
import os

import numpy as np

from performer import memory
from performer.data import outdir, vocab
from performer.errors import UserError
from performer.flags import flag

KIND = "mqar"
FILLER = 0  # the padding id, and the filler of filler "zero"
FILLERS = ("random", "zero")
QUERY_ORDERS = ("context", "shuffled")
# Options added after the first folders were written: what a manifest without them meant.
LEGACY = {"filler": "zero", "query_order": "context", "train_pool": 0, "test_kv": ()}
RULE_EXAMPLES = 200_000  # query draws a no-binding rule is fitted on (ceilings)
# Past this many Gumbel numbers (L > ~21,000) the rules fit a sample, the first RULE_DRAWS / slots
# examples, in about a minute (stats.json says so): all of them would take hours.
RULE_DRAWS = 2**31
RULE_CHUNK_BYTES = 2**26  # the rules' draws held at once: streamed in chunks, whatever L
BYTES_PER_DRAW = 24  # a float64 Gumbel number, its int64 index (argpartition), and a margin
BYTES_PER_CUE = 64  # one fitted query: its position, rank, slot, cell (int64) and sort temporaries
# Test queries are drawn over every slot (~12 ns each here): past this many, minutes (L = 10^8 at
# 3,000 examples: 3 x 10^11, an hour), the command refuses.
MAX_TEST_SLOT_DRAWS = 2**34
MAX_VOCAB = 2**31 - 1  # token ids are int32
MAX_SEQ_LEN = 2**31 - 1  # positions are int32
# Host memory to generate one example (or stats.json), per token of L: float64 probabilities of
# the L/2 query slots and numpy's temporaries, plus a margin.
BYTES_PER_TOKEN = 16
_SPLIT_CODE = {"train": 0, "valid": 1, "test": 2, "test_shuffled": 2}  # test_kv<n>: 3 + n
_RULE_CODE, _FILLER_STREAM, _EPOCH_STREAM = 1000, 1, 2

NAME = "prepare-mqar"  # the command
SUMMARY = "multi-query associative recall (Zoology's MQAR): a generated dataset's folder"
DESCRIPTION = (
    "Writes the folder of an MQAR task (manifest.json and stats.json: its options, the chance "
    "accuracy, where queries fall) for DataConfig.path. Nothing is stored: every example is "
    "generated from (seed, split, index) when read, train from the run's data seed, valid and "
    "test (--eval-examples each) from --seed. docs/ARCHITECTURE.md (data/mqar.py) defines it.")


@dataclasses.dataclass(frozen=True)
class MQARConfig:
  """An MQAR task; every field is recorded in the manifest (defaults: Zoology's L = 64 setting).

  Raises:
    UserError (when built): a size that leaves no room for the keys,
      values or query slots, or power_a outside (0, 1].
  """
  vocab_size: int = flag(8192, "V: keys come from [1, V/2), values from [V/2, V); needs "
                              "V/2 - 1 >= kv")
  seq_len: int = flag(64, "L: tokens per example (DataConfig.seq_len must equal it); needs "
                          "L >= 4 kv; an odd L ends in one filler token")
  num_kv: int = flag(4, "kv: key-value pairs, and queries, per example")
  power_a: float = flag(0.01, "a: query slot i is drawn with probability proportional to "
                              "a i^(a-1)")
  eval_examples: int = flag(3000, "examples in valid and in each test split")
  seed: int = flag(0, "seed of the valid and test examples")
  filler: str = flag("random", "what fills the tokens that are neither context nor query: "
                               "'random' tokens of [1, V) (Zoology's default) or 'zero' (padding)",
                     choices=FILLERS)
  query_order: str = flag("context", "which key each drawn query slot gets: 'context' (the "
                                     "j-th key at the j-th draw, Zoology's) or 'shuffled'",
                          choices=QUERY_ORDERS)
  train_pool: int = flag(100000, "training examples, read in a new order each epoch "
                                 "(Zoology's 100,000); 0: a fresh example every time")
  test_kv: tuple[int, ...] = flag((), "extra test splits test_kv<n>: kv = n at the same L, "
                                      "comma-separated (e.g. 8,16)")

  def __post_init__(self):
    for name in ("vocab_size", "seq_len", "num_kv", "eval_examples"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise UserError(f"--{name.replace('_', '-')} must be an integer >= 1, got {value!r}")
    if self.seq_len > MAX_SEQ_LEN:
      raise UserError(f"--seq-len must be at most {MAX_SEQ_LEN} (positions are int32), got "
                      f"{self.seq_len}")
    if self.vocab_size > MAX_VOCAB:
      raise UserError(f"--vocab-size must be at most {MAX_VOCAB} (token ids are int32), got "
                      f"{self.vocab_size}")
    if self.vocab_size // 2 - 1 < self.num_kv:
      raise UserError(f"--vocab-size {self.vocab_size} has fewer than --num-kv {self.num_kv} "
                      "keys in [1, V/2)")
    if self.slots < self.num_kv:
      raise UserError(f"--seq-len {self.seq_len} leaves {max(self.slots, 0)} two-token query "
                      f"slots after a context of {2 * self.num_kv} tokens, fewer than --num-kv "
                      f"{self.num_kv}: it must be >= {4 * self.num_kv}")
    if not 0 < self.power_a <= 1:
      raise UserError(f"--power-a must be in (0, 1], got {self.power_a!r}")
    if self.seed < 0:
      raise UserError(f"--seed must be >= 0, got {self.seed}")
    if self.filler not in FILLERS or self.query_order not in QUERY_ORDERS:
      raise UserError(f"--filler must be one of {', '.join(FILLERS)} and --query-order one of "
                      f"{', '.join(QUERY_ORDERS)}, got {self.filler!r}, {self.query_order!r}")
    if not isinstance(self.train_pool, int) or self.train_pool < 0:
      raise UserError(f"--train-pool must be an integer >= 0 (0: fresh examples), got "
                      f"{self.train_pool!r}")
    object.__setattr__(self, "test_kv", tuple(self.test_kv))  # a manifest's list
    for n in self.test_kv:
      if not isinstance(n, int) or n < 1:
        raise UserError(f"--test-kv values must be integers >= 1, got {n!r}")
      if n == self.num_kv or self.test_kv.count(n) > 1:  # a split twice, or test's own kv
        raise UserError(f"--test-kv values must differ from each other and from --num-kv "
                        f"{self.num_kv} (test is kv = {self.num_kv}), got {n}")
      try:
        dataclasses.replace(self, num_kv=n, test_kv=())  # the same checks at kv = n
      except UserError as e:
        raise UserError(f"--test-kv {n}: {e}") from None

  @property
  def slots(self):
    """Two-token query slots after the context: (L - 2 kv) // 2."""
    return (self.seq_len - 2 * self.num_kv) // 2

  @property
  def splits(self):
    """Every split of the folder: train, valid, test, test_shuffled, test_kv<n>."""
    return ("train", "valid", "test", "test_shuffled", *(f"test_kv{n}" for n in self.test_kv))

  @property
  def chance(self):
    """Accuracy of guessing a value uniformly: 1 / (V - V/2)."""
    return 1.0 / (self.vocab_size - self.vocab_size // 2)


def ids(task):
  """The vocab.Ids of `task`: size V, pad, eos and mask 0 (never a key or a value)."""
  return vocab.Ids(size=task.vocab_size, pad=FILLER, eos=FILLER, mask=FILLER, first_regular=1)


@functools.lru_cache(maxsize=16)
def slot_probabilities(slots, power_a):
  """p_i proportional to a i^(a-1), i = 1 .. slots: [slots] float64 summing to 1."""
  i = np.arange(1, slots + 1, dtype=np.float64)
  p = power_a * i ** (power_a - 1)
  return p / p.sum()


def split_task(task, split):
  """(the MQARConfig that generates `split`, its stream code).

  Raises:
    UserError: a split the task does not have.
  """
  if split not in task.splits:
    raise UserError(f"no {split!r} split (the task has {', '.join(task.splits)})")
  if split == "test_shuffled":
    return dataclasses.replace(task, query_order="shuffled"), _SPLIT_CODE[split]
  if split.startswith("test_kv"):
    n = int(split.removeprefix("test_kv"))
    return dataclasses.replace(task, num_kv=n, test_kv=()), 3 + n
  return task, _SPLIT_CODE[split]


def example(task, seed, split, index):
  """One example: (inputs [L] int32, targets [L] int32, positions [kv] int32).

  targets is FILLER except at the query positions, where it is the value of
  the key there; positions lists the query positions in the order of the
  keys in the context. Raises UserError for a split the task lacks.
  """
  task, code = split_task(task, split)
  return _example(task, [seed, code, index])


def _pairs(task, stream):
  """(keys [kv], values [kv], positions [kv] int32) of the example of `stream`, without its
  [L] arrays: the fillers come from a stream of their own."""
  rng = np.random.default_rng(stream)
  half, kv = task.vocab_size // 2, task.num_kv
  keys = rng.choice(half - 1, kv, replace=False) + 1
  values = rng.choice(task.vocab_size - half, kv, replace=False) + half
  slots = rng.choice(task.slots, kv, replace=False, p=slot_probabilities(task.slots, task.power_a))
  if task.query_order == "shuffled":
    slots = rng.permutation(slots)
  return keys, values, (2 * kv + 2 * slots).astype(np.int32)


def _example(task, stream):
  keys, values, positions = _pairs(task, stream)
  kv = task.num_kv
  inputs = np.full(task.seq_len, FILLER, np.int32)
  if task.filler == "random":  # a stream of its own: the same fillers in either query order
    inputs[:] = np.random.default_rng([*stream, _FILLER_STREAM]).integers(
        1, task.vocab_size, task.seq_len)
  inputs[0:2 * kv:2], inputs[1:2 * kv:2] = keys, values
  inputs[positions] = keys
  targets = np.full(task.seq_len, FILLER, np.int32)
  targets[positions] = values
  return inputs, targets, positions


@functools.lru_cache(maxsize=4)
def _epoch_order(seed, epoch, pool):
  return np.random.default_rng([seed, _EPOCH_STREAM, epoch]).permutation(pool)


def train_index(task, seed, i):
  """The train example read i-th by a run of data seed `seed`: i itself without a pool, else
  the pool's example at position i % pool of epoch i // pool's order."""
  if not task.train_pool:
    return i
  epoch, j = divmod(i, task.train_pool)
  return int(_epoch_order(seed, epoch, task.train_pool)[j])


def load(path):
  """The MQARConfig of a prepared folder, or None when `path` holds another kind of dataset."""
  with open(os.path.join(path, "manifest.json")) as f:
    return from_fingerprint(json.load(f)["fingerprint"])


def from_fingerprint(fingerprint):
  """The MQARConfig of a manifest's (or a run's dataset.json) fingerprint; None for another kind.
  Options added since it was written take the values they had then (LEGACY)."""
  if fingerprint.get("kind") != KIND:
    return None
  return MQARConfig(**(LEGACY | {k: v for k, v in fingerprint.items() if k != "kind"}))


def stats(task):
  """What a reader of the folder needs: chance accuracy, context, where queries fall, each test
  split's no-binding ceilings (`ceilings`) and the examples they were fitted on."""
  p = slot_probabilities(task.slots, task.power_a)
  first = 2 * task.num_kv
  tests = [split for split in task.splits if split.startswith("test")]
  return {"kind": KIND, **dataclasses.asdict(task), "context_tokens": first,
          "query_slots": task.slots, "scored_per_example": task.num_kv,
          "chance_accuracy": task.chance,
          "first_slot_probability": float(p[0]), "slots_holding_half_the_probability": int(
              np.searchsorted(np.cumsum(p), 0.5) + 1),
          "no_binding_ceiling": {split: ceilings(task, split) for split in tests},
          "no_binding_fit": {
              "method": (f"each rule fitted on {RULE_EXAMPLES:,} examples' query draws, "
                         f"streamed in chunks of at most {RULE_CHUNK_BYTES // 2**20} MiB; where "
                         f"that takes over {RULE_DRAWS:,} Gumbel draws (one per query slot), on "
                         f"a sample: the first {RULE_DRAWS:,} / slots examples"),
              "examples": {split: rule_examples(split_task(task, split)[0]) for split in tests}}}


def rule_examples(task):
  """Examples the no-binding rules of `task` (a split's, split_task) are fitted on: all
  RULE_EXAMPLES, or a sample of them when their draws would exceed RULE_DRAWS."""
  return max(1, min(RULE_EXAMPLES, RULE_DRAWS // task.slots))


def _cues(task, positions):
  """(rank, slot, truth) [N kv] int arrays of query positions [N, kv] (query j answers context
  pair j): each query's rank among its example's queries, its slot, its key's context index."""
  rank = np.argsort(np.argsort(positions, axis=1), axis=1)
  slot = (positions - 2 * task.num_kv) // 2
  truth = np.broadcast_to(np.arange(task.num_kv), positions.shape)
  return rank.ravel(), slot.ravel(), truth.ravel()


def _drawn_positions(task, rng, count):
  """Query positions [count, kv] of `count` examples drawn as `_example` draws them, at once:
  sampling kv slots without replacement with probabilities p, in draw order, is taking the kv
  largest log p_i + Gumbel noise in decreasing order. The [count, slots] noise comes in chunks
  of rows (RULE_CHUNK_BYTES) that read `rng` as one draw would: bounded memory, same positions.
  """
  log_p = np.log(slot_probabilities(task.slots, task.power_a))
  n, kv = task.slots, task.num_kv
  rows = max(1, RULE_CHUNK_BYTES // (BYTES_PER_DRAW * n))
  slots = np.empty((count, kv), np.int64)
  for start in range(0, count, rows):
    noisy = rng.gumbel(size=(min(rows, count - start), n))  # [rows, slots]
    noisy += log_p
    top = np.argpartition(noisy, n - kv, axis=1)[:, n - kv:]  # the kv largest, in any order
    order = np.argsort(-np.take_along_axis(noisy, top, axis=1), axis=1)
    slots[start:start + len(noisy)] = np.take_along_axis(top, order, axis=1)
  if task.query_order == "shuffled":
    slots = rng.permuted(slots, axis=1)
  return 2 * task.num_kv + 2 * slots


def ceilings(task, split, *, examples=None):
  """Accuracy of rules that answer a query with no key-to-value binding, on `split`'s examples.

  "rank_order" answers the r-th query (in position order) with the r-th context value, the
  cue Zoology's query order leaves. The fitted rules answer with the value of the context
  pair that most often held the query's key, given only the query's rank among the queries
  ("rank"), its slot ("slot") or both ("rank_slot"), fitted on `examples` examples (default
  `rule_examples`) of a stream of its own; "uniform" guesses one of the kv values. A model
  that beats the highest ("ceiling") binds keys to values.
  """
  variant, code = split_task(task, split)
  kv = variant.num_kv
  rng = np.random.default_rng([task.seed, _RULE_CODE + code])
  fitted = _cues(variant, _drawn_positions(variant, rng, examples or rule_examples(variant)))
  tested = _cues(variant, np.stack([_pairs(variant, [task.seed, code, i])[2]
                                    for i in range(task.eval_examples)]))
  out = {"uniform": 1.0 / kv, "rank_order": float(np.mean(tested[0] == tested[2]))}
  sizes = (kv, variant.slots)
  for name, keys in (("rank", (0,)), ("slot", (1,)), ("rank_slot", (0, 1))):
    shape = [sizes[k] for k in keys]
    cell = lambda cues, keys=keys, shape=shape: np.ravel_multi_index([cues[k] for k in keys],
                                                                     shape)
    out[name] = float(np.mean(_best_pair(cell(fitted), fitted[2], kv, cell(tested))
                              == tested[2]))
  out["ceiling"] = max(out.values())
  return out


def _best_pair(cells, pairs, kv, asked):
  """Per cell of `asked` [M], the pair seen most often there among the fitted (`cells`, `pairs`)
  [N], ties to the smaller; pair 0 for an unseen cell. Memory O(N + M), not slots x kv cells."""
  held, counts = np.unique(cells * kv + pairs, return_counts=True)
  cell, pair = np.divmod(held, kv)
  order = np.lexsort((pair, -counts, cell))  # by cell, the most seen pair of each first
  first = order[np.r_[True, cell[order][1:] != cell[order][:-1]]]
  seen, best = cell[first], pair[first]  # seen: sorted
  at = np.minimum(np.searchsorted(seen, asked), len(seen) - 1)
  return np.where(seen[at] == asked, best[at], 0)


def check_memory(task):
  """Raises UserError when one example of `task`, or its test splits' rule baselines, need more
  host memory than is available: checked before anything is generated (not a MemoryError)."""
  memory.check_fits(BYTES_PER_TOKEN * task.seq_len,
                    f"--seq-len {task.seq_len}: generating an example")
  # `ceilings` holds each test example's query positions (a numpy array, >= 128 bytes each).
  memory.check_fits(128 * task.eval_examples,
                    f"--eval-examples {task.eval_examples}: the test splits' rule baselines")


def check_stats_size(task):
  """Raises UserError, naming the flag to lower, when the queries' cues `stats` builds (beyond
  check_memory's example) exceed host memory, or drawing the test queries would take hours."""
  tests = sum(split.startswith("test") for split in task.splits)
  if (draws := tests * task.eval_examples * task.slots) > MAX_TEST_SLOT_DRAWS:
    raise UserError(f"--seq-len {task.seq_len} and --eval-examples {task.eval_examples}: the "
                    f"no-binding ceilings draw the queries of {tests} x {task.eval_examples:,} "
                    f"test examples over {task.slots:,} slots each, {draws:.1e} draws, more "
                    f"than the {MAX_TEST_SLOT_DRAWS:.1e} that take minutes; lower --seq-len or "
                    "--eval-examples")
  kv = max((task.num_kv, *task.test_kv))
  flag_name = "--num-kv" if kv == task.num_kv else "--test-kv"
  variant = dataclasses.replace(task, num_kv=kv, test_kv=())
  memory.check_fits(BYTES_PER_CUE * kv * rule_examples(variant),
                    f"{flag_name} {kv}: the no-binding rules' {rule_examples(variant):,} fitted "
                    f"examples")
  memory.check_fits(BYTES_PER_CUE * kv * task.eval_examples,
                    f"--eval-examples {task.eval_examples}: the test splits' rule baselines")


def prepare(task, out, *, force=False):
  """Writes the folder of `task` (manifest.json, stats.json); returns the stats dict.

  Raises:
    UserError: a task too large for this machine or too long to summarise (check_memory,
      check_stats_size), another run on `out`, or an unusable `out` (outdir.check).
  """
  check_memory(task)
  check_stats_size(task)
  # as the manifest holds it (JSON: a tuple reads back as a list), so that a rerun matches
  fingerprint = json.loads(json.dumps({"kind": KIND, **dataclasses.asdict(task)}))
  manifest = {"format": "performer-generated-v1", "fingerprint": fingerprint,
              "splits": list(task.splits)}

  def build(tmp):
    result = stats(task)
    outdir.write(tmp, result, manifest)
    return result, None
  return outdir.prepare(out, [], lambda manifest: fingerprint, force, build)[0]


@dataclasses.dataclass(frozen=True)
class Command:
  """What `performer prepare-mqar` takes beside MQARConfig."""
  out: str = flag(help="output folder (DataConfig.path of the runs)")
  force: bool = flag(False, "replace an --out holding another dataset")


FLAGS = (MQARConfig, Command)


def main(args):
  """`performer prepare-mqar` on parsed flags (FLAGS): writes the folder, prints its stats."""
  from performer import flags  # pylint: disable=import-outside-toplevel
  task = flags.build(MQARConfig, args)
  result = prepare(task, args.out, force=args.force)
  print(f"{args.out}: MQAR, V {task.vocab_size}, L {task.seq_len}, kv {task.num_kv}, "
        f"a {task.power_a}, {task.filler} fillers, {task.query_order} query order, train pool "
        f"{task.train_pool or 'none (fresh examples)'}; {task.eval_examples} examples in valid "
        f"and each test split (seed {task.seed}); chance accuracy "
        f"{result['chance_accuracy']:.2e}")
  for split, rules in result["no_binding_ceiling"].items():
    print(f"  {split}: no-binding ceiling {100 * rules['ceiling']:.2f}% (uniform "
          f"{100 * rules['uniform']:.2f}%, r-th query -> r-th value "
          f"{100 * rules['rank_order']:.2f}%, fitted on rank {100 * rules['rank']:.2f}%, slot "
          f"{100 * rules['slot']:.2f}%)")
