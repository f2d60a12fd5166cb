"""Relax graph helpers every stage reads models with: the dataflow graph of a function (`Graph`) and
the values of expressions (static shapes, dtypes, compile-time constants).
"""

from .graph import Graph
from .values import constant_value, dtype_of, eval_const, static_shape
