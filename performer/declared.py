"""A module's declared constants read from its source, without importing it (or its imports)."""

import ast


def constants(path, names):
  """{name: value} of the top-level `NAME = <literal>` assignments of `names` in file `path`.

  Raises:
    ValueError: one of `names` is assigned something other than a literal.
  """
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  found = {}
  for node in tree.body:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
      name = getattr(node.targets[0], "id", None)
      if name in names:
        found[name] = ast.literal_eval(node.value)
  return found
