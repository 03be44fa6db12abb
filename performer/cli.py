"""The `performer` command: parses flags and dispatches, one function per subcommand."""

import argparse
import json
import os
import sys

from performer.errors import UserError

PLANNED = {
    "speed": "time and measure memory of FAVOR+ against exact attention (Fig. 3)",
}


def _floats(text):
  try:
    return tuple(float(x) for x in text.split(","))
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text):
  try:
    return tuple(int(x) for x in text.split(","))
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _approx_error(args):
  from performer.experiments import approx_error  # pylint: disable=import-outside-toplevel
  variants = (approx_error.parse_variants(args.variants) if args.variants
              else approx_error.default_variants(args.dim))
  cfg = approx_error.ApproxErrorConfig(
      seq_len=args.seq_len, dim=args.dim, features=args.features, samples=args.samples,
      seed=args.seed, input_scales=args.input_scale, variants=variants)
  rows, seconds = approx_error.main(cfg, args.out)
  m_max = max(cfg.features)
  print(f"median MSE at m={m_max} (L={cfg.seq_len}, d={cfg.dim}, {cfg.samples} samples):")
  for scale in cfg.input_scales:
    cells = [f"{r['kernel']}/{r['projection']}/{r['scaling']}={r['mse_median']:.2e}"
             for r in rows if r["input_scale"] == scale and r["m"] == m_max]
    print(f"  input scale {scale:g}: " + ", ".join(cells))
  program = sys.argv[0] if os.path.basename(sys.argv[0]) == "performer" else "performer"
  print(f"wrote {args.out} in {seconds:.0f} s; draw it with: "
        f"{program} figure mse-vs-m --input {args.out}")


def _prepare_trembl(args):
  from performer.data import samples, trembl  # pylint: disable=import-outside-toplevel
  if bool(args.inputs) == args.sample:
    raise UserError("give FASTA files or folders, or --sample (not both)")
  inputs = (samples.fetch("protein"),) if args.sample else tuple(args.inputs)
  fractions = (0.05, 0.05) if args.sample else (trembl.VALID_FRACTION, trembl.TEST_FRACTION)
  cfg = trembl.TremblConfig(
      inputs=inputs, seq_len=args.seq_len, concat_len=args.concat_len,
      valid_fraction=fractions[0] if args.valid_fraction is None else args.valid_fraction,
      test_fraction=fractions[1] if args.test_fraction is None else args.test_fraction,
      families=args.families,
      ood_families=tuple(f for f in (args.ood_families or "").split(",") if f),
      ood_fraction=args.ood_fraction, invalid=args.invalid, dedup=not args.no_dedup,
      seed=args.seed, shard_tokens=args.shard_tokens)
  out = args.out or ("runs/data/trembl-sample" if args.sample else None)
  if out is None:
    raise UserError("--out is required (the folder to write)")
  trembl.prepare(cfg, out, workers=args.workers, force=args.force)
  with open(os.path.join(out, "stats.md")) as f:
    print(f.read().rstrip())


def _prepare_pg19(args):
  from performer.data import pg19, samples  # pylint: disable=import-outside-toplevel
  if sum(map(bool, (args.source, args.sample, args.tfds))) != 1:
    raise UserError("give one source: a PG-19 folder, --tfds or --sample")
  if args.sample:
    source = pg19.sample_folder(samples.fetch("book"),
                                os.path.join(samples.cache_dir(), "samples", "pg19-botchan"))
  else:
    source = "tfds" if args.tfds else args.source
  vocab_size = args.vocab_size or (2000 if args.sample else 32768)
  cfg = pg19.PG19Config(source=source, vocab_size=vocab_size, train_bytes=args.train_bytes,
                        seed=args.seed, shard_tokens=args.shard_tokens)
  out = args.out or ("runs/data/pg19-sample" if args.sample else None)
  if out is None:
    raise UserError("--out is required (the folder to write)")
  pg19.prepare(cfg, out, force=args.force)
  with open(os.path.join(out, "stats.md")) as f:
    print(f.read().rstrip())


def _gin(files, bindings):
  from performer import configurables  # pylint: disable=import-outside-toplevel
  for path in files:
    if not os.path.exists(path):
      raise UserError(f"{path}: no such gin file")
  try:
    configurables.parse(files, bindings)
  except (ValueError, KeyError, SyntaxError) as e:
    raise UserError(f"gin: {str(e).splitlines()[0]}") from None


def _train(args):
  from performer.train import loop  # pylint: disable=import-outside-toplevel
  _gin(args.gin, args.gin_param)
  print(f"process {_processes()}; workdir {args.workdir}")
  valid = loop.run(args.workdir)
  if valid:
    print("valid: " + ", ".join(f"{k} {v:.4g}" for k, v in valid.items()))


def _eval(args):
  from performer.train import evaluate  # pylint: disable=import-outside-toplevel
  result = evaluate.run(args.workdir, args.split)
  print(json.dumps(result, indent=1, sort_keys=True))


def _processes():
  import jax  # pylint: disable=import-outside-toplevel
  return f"{jax.process_index() + 1} of {jax.process_count()}, {jax.device_count()} device(s)"


def _figure(args):
  from performer import figures  # pylint: disable=import-outside-toplevel
  out = args.out or f"results/{args.name.replace('-', '_')}.png"
  figures.render(args.name, args.input, out)
  print(f"wrote {out}")


def _parser():
  from performer.figures import FIGURES  # pylint: disable=import-outside-toplevel
  parser = argparse.ArgumentParser(
      prog="performer",
      description="Reproduce 'Rethinking Attention with Performers' (Choromanski et al., "
                  "ICLR 2021): data preparation, training, FAVOR+ measurements and figures.")
  sub = parser.subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

  p = sub.add_parser(
      "approx-error", help="MSE of FAVOR attention against exact softmax (Fig. 4)",
      description="Sweeps the number of random features m for each kernel/projection variant "
                  "and input scale, and writes MSE statistics over samples to a JSON file. "
                  "q, k entries ~ N(0, s^2/sqrt(d)) for input scale s, v ~ N(0, 1).")
  p.add_argument("--seq-len", type=int, default=4096, help="sequence length L (default 4096)")
  p.add_argument("--dim", type=int, default=16, help="head dimension d (default 16)")
  p.add_argument("--features", type=_ints, default=(16, 32, 64, 128, 256),
                 help="comma-separated values of m (default 16,32,64,128,256)")
  p.add_argument("--samples", type=int, default=15, help="random draws per point (default 15)")
  p.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
  p.add_argument("--input-scale", type=_floats, default=(0.5, 1.0, 1.5, 2.0),
                 help="comma-separated input scales s; one figure row each (default 0.5,1,1.5,2)")
  p.add_argument("--variants", default=None,
                 help="comma-separated kernel/projection/scaling triples, e.g. "
                      "positive/orthogonal/chi,trig/iid/chi (default: the paper's curves, "
                      "hyperbolic, SMREG, H-ORF and G-ORF)")
  p.add_argument("--out", default="results/approx_error.json", help="output JSON file")
  p.set_defaults(func=_approx_error)

  p = sub.add_parser(
      "prepare-trembl", help="UniProt FASTA -> token shards with the paper's splits (Table 1)",
      description="Streams FASTA files (plain or .gz; folders are searched for them), "
                  "validates and tokenizes each record, assigns IID train/valid/test splits "
                  "from a hash of the sequence (and an OOD split of held-out families given "
                  "--families), and writes shards for two tasks: single sequences clipped to "
                  "--seq-len and EOS-joined chunks of --concat-len. Writes manifest.json, "
                  "stats.json and stats.md beside them.")
  p.add_argument("inputs", nargs="*", help="FASTA files or folders")
  p.add_argument("--sample", action="store_true",
                 help="use the small real sample proteome (fetched from PyPI; see data/README.md)")
  p.add_argument("--out", default=None,
                 help="output folder (default with --sample: runs/data/trembl-sample)")
  p.add_argument("--seq-len", type=int, default=1024, help="clip length L of the single task (default 1024)")
  p.add_argument("--concat-len", type=int, default=8192, help="chunk length of the concat task (default 8192)")
  p.add_argument("--valid-fraction", type=float, default=None,
                 help="share of sequences in valid (default: Table 1's, 0.05 with --sample)")
  p.add_argument("--test-fraction", type=float, default=None,
                 help="share of sequences in test (default: Table 1's, 0.05 with --sample)")
  p.add_argument("--families", default=None,
                 help="accession -> family mapping (Pfam-A.regions.uniprot.tsv[.gz] or two "
                      "columns) to hold out whole families as the OOD split")
  p.add_argument("--ood-families", default=None, help="comma-separated families to hold out")
  p.add_argument("--ood-fraction", type=float, default=0.01,
                 help="share of families held out when --ood-families is not given")
  p.add_argument("--invalid", choices=("skip", "map-to-x", "fail"), default="skip",
                 help="records with characters outside the 25 amino-acid letters: drop them, "
                      "map those characters to X, or stop with an error (default skip)")
  p.add_argument("--no-dedup", action="store_true",
                 help="keep duplicate sequences (deduplication holds about 82 bytes per "
                      "unique sequence in memory, ~9 GB for all of TrEMBL)")
  p.add_argument("--seed", type=int, default=0, help="salt of the split hash (default 0)")
  p.add_argument("--shard-tokens", type=int, default=1 << 26,
                 help="tokens per shard file (default 2^26)")
  p.add_argument("--workers", type=int, default=None, help="parsing processes (default: cores)")
  p.add_argument("--force", action="store_true", help="replace an --out holding another dataset")
  p.set_defaults(func=_prepare_trembl)

  p = sub.add_parser(
      "prepare-pg19", help="PG-19 books -> SentencePiece token shards (App. A.1.1)",
      description="Trains a unigram SentencePiece model (whitespace kept, fully invertible) on "
                  "train text, encodes train/validation/test books into token shards, and "
                  "records per split the word-level and SentencePiece token counts whose ratio "
                  "gives word-level perplexity.")
  p.add_argument("source", nargs="?", help="PG-19 folder (train/, validation/, test/, metadata.csv)")
  p.add_argument("--tfds", action="store_true",
                 help="read tensorflow-datasets' pg19 (needs: pip install 'performer[tfds]')")
  p.add_argument("--sample", action="store_true",
                 help="use the small real sample book (fetched from PyPI; see data/README.md)")
  p.add_argument("--out", default=None, help="output folder (default with --sample: "
                                             "runs/data/pg19-sample)")
  p.add_argument("--vocab-size", type=int, default=None,
                 help="SentencePiece pieces (default 32768 as in the paper; 2000 with --sample)")
  p.add_argument("--train-bytes", type=int, default=100_000_000,
                 help="bytes of train text sampled to train SentencePiece (default 1e8)")
  p.add_argument("--seed", type=int, default=0, help="seed of the training-text sample")
  p.add_argument("--shard-tokens", type=int, default=1 << 26, help="tokens per shard file")
  p.add_argument("--force", action="store_true", help="replace an --out holding another dataset")
  p.set_defaults(func=_prepare_pg19)

  p = sub.add_parser(
      "train", help="train a language model from gin configs (resumes a workdir)",
      description="Trains the model the gin files describe (see gin/ and gin/mini/). TensorBoard "
                  "events, metrics.jsonl, checkpoints and the operative config go to --workdir; "
                  "running again on the same workdir resumes from its latest checkpoint.")
  p.add_argument("--gin", action="append", required=True, help="gin config file (repeatable)")
  p.add_argument("--gin_param", action="append", default=[],
                 help="extra gin binding NAME=VALUE, e.g. TrainConfig.steps=500 (repeatable)")
  p.add_argument("--workdir", required=True, help="folder for logs, checkpoints and results")
  p.set_defaults(func=_train)

  p = sub.add_parser("eval", help="evaluate a trained workdir on a split (writes eval.json)",
                     description="Restores the latest checkpoint of --workdir and reports loss, "
                                 "accuracy, perplexity and bits per token on --split; for protein "
                                 "data also the empirical amino-acid frequency baseline (Table 2).")
  p.add_argument("--workdir", required=True, help="a `performer train` workdir")
  p.add_argument("--split", default="test", choices=("valid", "test", "ood"), help="default test")
  p.set_defaults(func=_eval)

  p = sub.add_parser("figure", help="draw a paper figure from result files",
                     description="Renders a figure from a result file without recomputing it.")
  p.add_argument("name", choices=sorted(FIGURES), help="which figure")
  p.add_argument("--input", default="results/approx_error.json", help="result JSON to read")
  p.add_argument("--out", default=None, help="output PNG (default results/<name>.png)")
  p.set_defaults(func=_figure)

  for name, text in PLANNED.items():
    p = sub.add_parser(name, help=f"{text} [not implemented yet]",
                       description=f"{text}. Not implemented yet.")
    p.set_defaults(func=None)
  return parser


def main(argv=None):
  """Entry point of the `performer` console script; returns the exit status."""
  parser = _parser()
  args, unknown = parser.parse_known_args(argv)
  if args.func is None:  # a planned subcommand: whatever its flags, say so
    print(f"performer {args.command}: not implemented yet", file=sys.stderr)
    return 2
  if unknown:
    parser.subparsers.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
  try:
    args.func(args)
  except UserError as e:
    print(f"performer {args.command}: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"performer {args.command}: interrupted", file=sys.stderr)
    return 130
  return 0


if __name__ == "__main__":
  sys.exit(main())
