"""`performer eval`: a trained workdir scored on its splits, into eval_<split>.json."""

import argparse
import dataclasses
import json

from performer import flags
from performer.errors import UserError
from performer.flags import flag, folder
from performer.train import distributed, evaluate

NAME = "eval"
SUMMARY = "evaluate a trained workdir on a split (writes eval_SPLIT.json)"
DESCRIPTION = (
    "Restores the latest checkpoint of --workdir and reports loss, accuracy, perplexity and bits "
    "per token on --split (per token; PG-19 adds word_perplexity); for protein data also the "
    "empirical amino-acid frequency baseline (Table 2). Writes --workdir/eval_SPLIT.json, one "
    "file per split.")


@dataclasses.dataclass(frozen=True)
class Flags:
  """What `performer eval` scores."""
  workdir: str = flag(help="a `performer train` workdir", parse=folder)
  split: str = flag("test", "valid, test or ood (an MQAR task also test_shuffled, test_kv<n>), "
                            "or several comma-separated (test,ood: one restore and compile for "
                            "both)")
  mask_draws: int = flag(evaluate.MASK_DRAWS, "(B) models: score N independent draws of the "
                         "masks, summed, for a smaller sampling error; (U) models have none; 1 "
                         f"to {evaluate.MAX_MASK_DRAWS} (train/evaluate.py says why)",
                         metavar="N")


FLAGS = (Flags, distributed.ClusterFlags)


def main(args):
  """Evaluates, then prints the results (process 0).

  Raises:
    UserError: no evaluation split named, a split named twice, a --mask-draws
      out of range, a failed connection, or any error of evaluate.run_splits.
  """
  import jax  # pylint: disable=import-outside-toplevel
  try:
    splits = flags.split(args.split)
  except argparse.ArgumentTypeError as e:
    raise UserError(f"--split: {e}") from None
  if not splits or "train" in splits:  # any other name: the dataset says whether it has it
    raise UserError(f"--split: '{args.split}' names no evaluation split (valid, test, ood, or "
                    "an MQAR task's test_shuffled and test_kv<n>)")
  evaluate.check_mask_draws(args.mask_draws)  # before joining the other processes
  distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                         args.init_timeout)
  results = evaluate.run_splits(args.workdir, splits, mask_draws=args.mask_draws)
  if jax.process_index() == 0:
    print(json.dumps(results[0] if len(results) == 1 else results, indent=1, sort_keys=True))
