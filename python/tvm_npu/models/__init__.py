"""Models built in code with seeded weights, as ONNX: test builders (small CNN, op zoo, LSTM,
MobileNetV2) and published CNN architectures (`zoo`: ResNet-50, SqueezeNet, ShuffleNetV2, DenseNet,
Inception, VGG); `pretrained`: the trained models that ship (tiny-llama).
"""

from .builders import GraphBuilder, gqa_attention, lstm, mobilenet_v2_shaped, op_zoo, small_cnn
from .pretrained import heldout_text, pretrained
from .zoo import densenet_shaped, inception_shaped, resnet50_shaped, shufflenet_v2, squeezenet1_1, vgg_shaped
