"""Stage 1 — import: models in the formats users have become Relax modules with their weights as
constants. ONNX through TVM's own frontend, plus what it lacks: QOperator models (QLinearConv,
QLinearMatMul) rewritten to QDQ, and LSTM unrolled.
"""

from .onnx import from_onnx
from .qlinear import qoperator_to_qdq
