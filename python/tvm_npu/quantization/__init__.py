"""Stage 3 — quantize: post-training quantization of a float model to QDQ (per-channel int8 weights,
per-tensor activations, 16-bit LSTM cell state) with min/max, percentile or entropy calibration; and
weight-only int8 (W8A16) of dense layers, no calibration (weight_only.py); group-wise int4
weight-only (W4A16) by round-to-nearest or GPTQ (weight_int4.py).
"""

from .ptq import QuantReport, quantize
from .weight_int4 import WeightQuantReport, quantize_weights_int4
from .weight_only import quantize_weights_int8
