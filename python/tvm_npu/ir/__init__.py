"""Relax graph helpers every stage reads models with: the dataflow graph of a function (`Graph`) and
the values of expressions (static shapes, dtypes, compile-time constants).
"""

# TVM first, before .graph: the first `import tvm` of a process runs TVM's autoload of this package
# (tvm_npu._autoload -> pipeline.register), which imports ir.graph; were that import of TVM graph.py's
# own, graph would be half-initialized then (a circular import: the `tvm-npu report` CLI path met it
# through frontend/contrib/_common.py, the first module it loads that reads ir).
import tvm  # isort: skip

from .graph import Graph
from .values import constant_value, dtype_of, eval_const, static_shape
