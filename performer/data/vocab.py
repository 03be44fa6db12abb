"""The protein vocabulary: 25 amino-acid letters plus pad, end-of-sequence and mask.

The paper's 20 standard and 5 anomalous amino acids (B, Z, X, U, O; App. C.1); ids fit in uint8."""

from typing import NamedTuple

import numpy as np

PAD, EOS, MASK = 0, 1, 2
SPECIALS = ("<pad>", "<eos>", "<mask>")
STANDARD = "ACDEFGHIKLMNPQRSTVWY"
ANOMALOUS = "BZXUO"
AMINO_ACIDS = STANDARD + ANOMALOUS
TOKENS = SPECIALS + tuple(AMINO_ACIDS)
VOCAB_SIZE = len(TOKENS)  # 28
X = TOKENS.index("X")



class Ids(NamedTuple):
  """A dataset's vocabulary size and special token ids (hashable: a static jit argument).

  first_regular is the lowest id of a regular token, the low end of the
  random tokens that (B) masking substitutes (App. A.1).
  """
  size: int
  pad: int
  eos: int
  mask: int
  first_regular: int


PROTEIN_IDS = Ids(size=VOCAB_SIZE, pad=PAD, eos=EOS, mask=MASK, first_regular=len(SPECIALS))

# Byte -> token id; lower case folds to upper case; INVALID for anything else.
INVALID = 255
_LUT = np.full(256, INVALID, np.uint8)
for _i, _c in enumerate(AMINO_ACIDS):
  _LUT[ord(_c)] = _LUT[ord(_c.lower())] = len(SPECIALS) + _i


def encode(residues):
  """bytes of residue letters -> uint8 token ids ([n]); invalid bytes -> INVALID."""
  return _LUT[np.frombuffer(residues, np.uint8)]


def decode(tokens):
  """Token ids -> string (specials shown by name)."""
  return "".join(TOKENS[int(t)] for t in tokens)
