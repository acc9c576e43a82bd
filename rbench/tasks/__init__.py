"""RBench tasks: one module per data family (``recsys``, ``routing``, ``passages``, ``imported``)
behind the family protocol (``family``), what loaders share (``kit``), and the checked registry
(``registry``). Importing this package imports nothing, so importing one family never loads the
others."""
