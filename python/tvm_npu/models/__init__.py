"""Models built in code with seeded weights, as ONNX: test builders (small CNN, op zoo, LSTM,
MobileNetV2) and published CNN architectures (`zoo`: ResNet-50, SqueezeNet, ShuffleNetV2, DenseNet,
Inception, VGG).
"""

from .builders import GraphBuilder, gqa_attention, lstm, mobilenet_v2_shaped, op_zoo, small_cnn
from .zoo import densenet_shaped, inception_shaped, resnet50_shaped, shufflenet_v2, squeezenet1_1, vgg_shaped
