"""The protein vocabulary: 25 amino-acid letters plus pad, end-of-sequence and mask.

The paper counts 20 standard amino acids and 5 anomalous ones (B, Z, X, U, O)
(App. C.1). Token ids are small enough for uint8 storage.
"""

import numpy as np

PAD, EOS, MASK = 0, 1, 2
SPECIALS = ("<pad>", "<eos>", "<mask>")
STANDARD = "ACDEFGHIKLMNPQRSTVWY"
ANOMALOUS = "BZXUO"
AMINO_ACIDS = STANDARD + ANOMALOUS
TOKENS = SPECIALS + tuple(AMINO_ACIDS)
VOCAB_SIZE = len(TOKENS)  # 28
X = TOKENS.index("X")

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
