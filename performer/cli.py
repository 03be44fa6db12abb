"""The `performer` command: parses flags and dispatches, one function per subcommand."""

import argparse
import sys

from performer.errors import UserError

PLANNED = {
    "prepare-trembl": "turn UniProt TrEMBL FASTA files into training data (Table 1 splits)",
    "prepare-pg19": "turn the PG-19 book corpus into SentencePiece-tokenized training data",
    "train": "train a Transformer/Performer/Reformer/Linformer LM from a gin config",
    "eval": "evaluate a trained model on the valid, test or OOD split",
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
  print(f"wrote {args.out} in {seconds:.0f} s; draw it with: "
        f"performer figure mse-vs-m --input {args.out}")


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
  sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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

  p = sub.add_parser("figure", help="draw a paper figure from result files",
                     description="Renders a figure from a result file without recomputing it.")
  p.add_argument("name", choices=sorted(FIGURES), help="which figure")
  p.add_argument("--input", default="results/approx_error.json", help="result JSON to read")
  p.add_argument("--out", default=None, help="output PNG (default results/<name>.png)")
  p.set_defaults(func=_figure)

  for name, text in PLANNED.items():
    p = sub.add_parser(name, help=f"{text} [not implemented yet]", description=text)
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
    parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
