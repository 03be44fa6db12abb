"""ListOps (Nangia & Bowman 2018, as Long Range Arena's task): nested list operations to classify.

Written from LRA's definition (Tay et al. 2021); docs/ARCHITECTURE.md (data/listops.py) has it."""

import dataclasses
import json
import os
import random

import numpy as np

from performer.data import outdir
from performer.data import vocab as vocab_lib
from performer.data.shard_writer import ShardWriter
from performer.errors import UserError
from performer.flags import flag

KIND = "listops"
# An expression is a tree: an operator ([MIN, [MAX, [MED, [SM) over 2..max_args arguments, each a
# digit or another operator, closed by ]; its label is its value. LRA's settings: an argument is
# an operator with probability 0.25 above level max_depth = 10, examples of 500 < tokens < 2,000,
# de-duplicated, 96,000 / 2,000 / 2,000. Tokens as LRA's fixed release: one per operator, digit
# and closing bracket (the first release's tokenizer dropped the bracket), no parentheses.
# Token ids: pad, the CLS token every example starts with (a classifier pools there), the
# digits, the operators, the closing bracket.
PAD, CLS = 0, 1
DIGIT = 2  # digit n is token DIGIT + n
OPERATORS = ("MIN", "MAX", "MED", "SM")
OPERATOR = DIGIT + 10  # operator i of OPERATORS is token OPERATOR + i
CLOSE = OPERATOR + len(OPERATORS)
TOKENS = ("<pad>", "<cls>", *map(str, range(10)), *(f"[{o}" for o in OPERATORS), "]")
IDS = vocab_lib.Ids(size=len(TOKENS), pad=PAD, eos=CLS, mask=PAD, first_regular=DIGIT)
NUM_CLASSES = 10
SPLITS = ("train", "valid", "test")
HISTOGRAM_BINS = 15
# LRA's setting keeps about one draw in 12. When this many draws in a row add no new expression,
# the options leave too few distinct expressions in the length range: an error, not an endless
# loop (a few seconds of draws).
STALE_DRAWS = 200_000

NAME = "prepare-listops"  # the command
SUMMARY = "ListOps (LRA): nested list operations generated from a seed, with their statistics"
DESCRIPTION = (
    "Generates the ListOps task of Long Range Arena from its definition (operators MIN, MAX, "
    "MED, SM over digits, nested to --max-depth) and writes train, valid and test token shards "
    "with labels, plus stats.json and stats.md (lengths, labels, depths, operators). The "
    "defaults are LRA's: 96,000 / 2,000 / 2,000 examples of 500 < tokens < 2,000.")


@dataclasses.dataclass(frozen=True)
class ListOpsConfig:
  """A ListOps task; every field is recorded in the manifest (defaults: LRA's).

  Raises:
    UserError (when built): a size below its minimum or an empty length range.
  """
  train_examples: int = flag(96000, "training examples")
  valid_examples: int = flag(2000, "validation examples")
  test_examples: int = flag(2000, "test examples")
  min_length: int = flag(500, "keep expressions of more than this many tokens")
  max_length: int = flag(2000, "keep expressions of fewer than this many tokens (an example "
                               "adds one CLS token: DataConfig.seq_len >= this)")
  max_depth: int = flag(10, "the deepest level of a tree, digits included (the root is level "
                            "1; operators stop one level above)")
  max_args: int = flag(10, "an operator takes 2 .. this many arguments")
  operator_p: float = flag(0.25, "the probability that a node above the last level is an "
                                 "operator, not a digit")
  seed: int = flag(0, "seed of the generator: the same seed, the same dataset")

  def __post_init__(self):
    for name in ("train_examples", "valid_examples", "test_examples"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise UserError(f"--{name.replace('_', '-')} must be an integer >= 1, got {value!r}")
    if not isinstance(self.max_depth, int) or self.max_depth < 2:
      raise UserError(f"--max-depth must be an integer >= 2 (an operator and its digits), got "
                      f"{self.max_depth!r}")
    if not isinstance(self.max_args, int) or self.max_args < 2:
      raise UserError(f"--max-args must be an integer >= 2, got {self.max_args!r}")
    if not isinstance(self.min_length, int) or self.min_length < 0:
      raise UserError(f"--min-length must be an integer >= 0, got {self.min_length!r}")
    if not isinstance(self.max_length, int) or self.max_length <= self.min_length + 1:
      raise UserError(f"--max-length must exceed --min-length + 1 (lengths strictly between), "
                      f"got {self.min_length} and {self.max_length}")
    if self.max_length > 2**31 - 1:
      raise UserError(f"--max-length must be below 2^31, got {self.max_length}")
    if not 0 < self.operator_p < 1:
      raise UserError(f"--operator-p must be in (0, 1), got {self.operator_p!r}")
    if not isinstance(self.seed, int) or self.seed < 0:
      raise UserError(f"--seed must be an integer >= 0, got {self.seed!r}")
    longest = 1  # the most tokens a tree of this depth and width can have
    for _ in range(self.max_depth - 1):
      longest = min(2 + self.max_args * longest, 2**62)
    if longest <= self.min_length:
      raise UserError(f"--min-length {self.min_length}: no expression of --max-depth "
                      f"{self.max_depth} and --max-args {self.max_args} is longer than "
                      f"{longest} tokens")

  @property
  def sizes(self):
    return {"train": self.train_examples, "valid": self.valid_examples,
            "test": self.test_examples}


def operate(op, args):
  """The value of operator `op` (an index into OPERATORS) over digit arguments: MED is the
  median rounded down (LRA's int(np.median)), SM the sum modulo 10."""
  if op == 0:
    return min(args)
  if op == 1:
    return max(args)
  if op == 2:
    ordered = sorted(args)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2
  return sum(args) % 10


class _TooLong(Exception):
  pass


def draw(rng, task):
  """One expression: (tokens [list of ids], label, depth) with len(tokens) < task.max_length,
  or None for a draw that grew to max_length tokens (abandoned there: it would be rejected).

  depth: the deepest level of the tree, digits included (1 for a lone digit)."""
  tokens = []

  def node(level):
    if level >= task.max_depth or rng.random() >= task.operator_p:
      digit = rng.randrange(10)
      tokens.append(DIGIT + digit)
      return digit, level
    op = rng.randrange(len(OPERATORS))
    tokens.append(OPERATOR + op)
    args, deepest = [], level
    for _ in range(rng.randint(2, task.max_args)):
      value, depth = node(level + 1)
      args.append(value)
      deepest = max(deepest, depth)
      if len(tokens) + 1 >= task.max_length:  # the closing bracket still to come
        raise _TooLong
    tokens.append(CLOSE)
    return operate(op, args), deepest

  try:
    label, depth = node(1)
  except _TooLong:
    return None
  return tokens, label, depth


def generate(task, progress=None):
  """Every split's examples, drawn in one stream from task.seed, kept when min_length < tokens <
  max_length and not seen before, then split in order: train, valid, test.

  Returns:
    ({split: [(tokens, label, depth)]}, counts of the draws: drawn, short, long, duplicate).

  Raises:
    UserError: STALE_DRAWS draws in a row found no new expression in the length range.
  """
  rng = random.Random(task.seed)
  wanted = sum(task.sizes.values())
  kept, seen = [], set()
  counts = {"drawn": 0, "too_short": 0, "too_long": 0, "duplicate": 0}
  last_new = 0
  while len(kept) < wanted:
    if counts["drawn"] - last_new >= STALE_DRAWS:
      raise UserError(f"only {len(kept):,} of {wanted:,} distinct expressions of "
                      f"{task.min_length} < tokens < {task.max_length} (none new in the last "
                      f"{STALE_DRAWS:,} draws): widen the length range or ask for fewer examples")
    counts["drawn"] += 1
    example = draw(rng, task)
    if example is None:
      counts["too_long"] += 1
      continue
    if len(example[0]) <= task.min_length:
      counts["too_short"] += 1
      continue
    key = bytes(example[0])
    if key in seen:
      counts["duplicate"] += 1
      continue
    seen.add(key)
    kept.append(example)
    last_new = counts["drawn"]
    if progress is not None:
      progress.update()
  out, start = {}, 0
  for split in SPLITS:
    out[split] = kept[start:start + task.sizes[split]]
    start += task.sizes[split]
  return out, counts


def stats(task, examples, counts):
  """The statistics of generated `examples` ({split: [(tokens, label, depth)]}): per split the
  count, token lengths (with CLS: a model's L must cover max + 1), a length histogram, label
  and depth counts, operator counts; and the generator's draws."""
  edges = np.linspace(task.min_length + 1, task.max_length, HISTOGRAM_BINS + 1)
  out = {"generator": {**counts, "kept_per_draw": sum(task.sizes.values()) / counts["drawn"]},
         "splits": {}}
  for split, rows in examples.items():
    lengths = np.array([len(t) for t, _, _ in rows])
    tokens = np.concatenate([np.asarray(t, np.int64) for t, _, _ in rows])
    ops = [int(np.sum(tokens == OPERATOR + i)) for i in range(len(OPERATORS))]
    out["splits"][split] = {
        "count": len(rows),
        "length": {"mean": float(lengths.mean()), "min": int(lengths.min()),
                   "max": int(lengths.max()), "median": float(np.median(lengths))},
        "length_histogram": {"edges": edges.tolist(),
                             "counts": np.histogram(lengths, edges)[0].tolist()},
        "labels": np.bincount([l for _, l, _ in rows], minlength=NUM_CLASSES).tolist(),
        "depths": np.bincount([d for _, _, d in rows], minlength=task.max_depth + 1).tolist(),
        "operators": dict(zip(OPERATORS, ops)),
    }
  return out


def markdown(task, result):
  """stats.md: a table of the splits' counts, lengths, label balance and depths."""
  lines = [f"# ListOps (seed {task.seed}; {task.min_length} < tokens < {task.max_length}, "
           f"depth <= {task.max_depth}, 2-{task.max_args} arguments)", "",
           "| split | examples | mean tokens | min | max | commonest label share | "
           "mean depth |", "| --- | --- | --- | --- | --- | --- | --- |"]
  for split, s in result["splits"].items():
    labels, depths = np.array(s["labels"]), np.array(s["depths"])
    lines.append(f"| {split} | {s['count']:,} | {s['length']['mean']:.1f} | {s['length']['min']} "
                 f"| {s['length']['max']} | {labels.max() / labels.sum():.3f} | "
                 f"{(depths * np.arange(depths.size)).sum() / depths.sum():.2f} |")
  g = result["generator"]
  lines += ["", f"Drawn {g['drawn']:,} expressions: {g['too_short']:,} too short, "
            f"{g['too_long']:,} too long, {g['duplicate']:,} duplicates."]
  return "\n".join(lines) + "\n"


def prepare(task, out, *, force=False, progress=None):
  """Writes the folder of `task`: manifest.json, stats.json, stats.md and per split token shards
  (records: CLS then the expression, uint8) and labels.npy ([n] int8); returns the stats.

  Raises:
    UserError: another run on `out`, or an unusable `out` (outdir.check).
  """
  fingerprint = json.loads(json.dumps({"kind": KIND, **dataclasses.asdict(task)}))
  manifest = {"format": "performer-listops-v1", "fingerprint": fingerprint,
              "splits": list(SPLITS), "tokens": list(TOKENS), "num_classes": NUM_CLASSES}

  def build(tmp):
    examples, counts = generate(task, progress)
    if progress is not None:
      progress.close()  # before the lines below
    for split, rows in examples.items():
      writer = ShardWriter(os.path.join(tmp, split), np.uint8, 1 << 24)
      for tokens, _, _ in rows:
        writer.add([CLS, *tokens])
      writer.close()
      np.save(os.path.join(tmp, split, "labels.npy"), np.array([l for _, l, _ in rows], np.int8))
    result = stats(task, examples, counts)
    outdir.write(tmp, result, manifest, markdown(task, result))
    return result, f"ListOps: {sum(task.sizes.values()):,} examples"
  return outdir.prepare(out, [], lambda manifest: fingerprint, force, build)[0]


def load(path):
  """The ListOpsConfig of a prepared folder.

  Raises:
    UserError: no ListOps folder at `path`.
  """
  try:
    with open(os.path.join(path, "manifest.json")) as f:
      fingerprint = dict(json.load(f)["fingerprint"])
  except (OSError, ValueError, KeyError) as e:
    raise UserError(f"{path}: no prepared ListOps dataset ({e})") from None
  if fingerprint.pop("kind", None) != KIND:
    raise UserError(f"{path}: not a ListOps dataset")
  return ListOpsConfig(**fingerprint)


@dataclasses.dataclass(frozen=True)
class Command:
  """What `performer prepare-listops` takes beside ListOpsConfig."""
  out: str = flag(help="output folder (DataConfig.path of the runs)")
  force: bool = flag(False, "replace an --out holding another dataset")


FLAGS = (ListOpsConfig, Command)


def main(args):
  """`performer prepare-listops` on parsed flags (FLAGS): writes the folder, prints its stats."""
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  from performer import flags  # pylint: disable=import-outside-toplevel
  task = flags.build(ListOpsConfig, args)
  with tqdm(total=sum(task.sizes.values()), unit="example", desc="generating",
            mininterval=1.0) as bar:
    prepare(task, args.out, force=args.force, progress=bar)
  outdir.print_stats(args.out)
