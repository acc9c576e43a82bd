"""The bottom layer: errors, paths, hashing, atomic writes, config, input checks, console and
markdown helpers, and the evaluation protocol's version. It imports no other rbench package."""
