"""Networks for CIFAR-10: torchvision's ResNet as-is, and an airbench94-style net built for 32x32.

`naive_resnet` is torchvision's ImageNet ResNet-18 (or a ResNet-10) with 10 outputs; `airbench_net` rebuilds
Keller Jordan's airbench94 net (frozen whitening conv, three conv-pool-BN-GELU groups, scaled head) and
`Lookahead` its weight averaging. The whitening layer needs real training images at initialisation.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

NAIVE_DEPTHS = {10: [1, 1, 1, 1], 18: [2, 2, 2, 2]}


class NarrowResNet(ResNet):
    """torchvision's ResNet (BasicBlock) with every width scaled: stem ``width``, stages
    ``width * (1, 2, 4, 8)``. torchvision hard-codes 64..512, so this ``__init__`` repeats its
    six lines of layer construction with a width; blocks, ``_make_layer``, initialisation and
    ``forward`` are torchvision's own. ``width=64`` is exactly ``ResNet(BasicBlock, layers)``.
    """

    def __init__(self, layers: list[int], width: int = 64, num_classes: int = 10):
        nn.Module.__init__(self)
        self._norm_layer, self.dilation, self.groups, self.base_width = nn.BatchNorm2d, 1, 1, 64
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(BasicBlock, width, layers[0])
        self.layer2 = self._make_layer(BasicBlock, 2 * width, layers[1], stride=2)
        self.layer3 = self._make_layer(BasicBlock, 4 * width, layers[2], stride=2)
        self.layer4 = self._make_layer(BasicBlock, 8 * width, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)


def naive_resnet(depth: int = 18, width: int = 64, num_classes: int = 10) -> ResNet:
    """torchvision's ImageNet ResNet as a first attempt uses it: unchanged but for the classes.

    ``depth=18, width=64`` is literally ``torchvision.models.resnet18(num_classes=10)``; smaller
    depths/widths (`NarrowResNet`) only serve the 2-core CPU profiles.
    """
    if depth not in NAIVE_DEPTHS:
        raise ValueError(
            f"unknown naive ResNet depth {depth!r}; choose one of {tuple(NAIVE_DEPTHS)}"
        )
    if width < 1:
        raise ValueError(f"ResNet width must be >= 1, got {width}")
    if depth == 18 and width == 64:
        return torchvision.models.resnet18(num_classes=num_classes)
    return NarrowResNet(NAIVE_DEPTHS[depth], width, num_classes)


class BatchNorm(nn.BatchNorm2d):
    """BatchNorm with a frozen scale of 1 (only the shift learns) and airbench's fast momentum."""

    def __init__(self, num_features: int, momentum: float = 0.6, eps: float = 1e-12):
        super().__init__(num_features, eps=eps, momentum=1 - momentum)  # torch's convention
        self.weight.requires_grad = False


class Conv(nn.Conv2d):
    """3x3 'same' convolution without bias, initialised to contain the identity map.

    Dirac initialisation of the first ``in_channels`` filters gives every block an implicit
    residual connection at the start of training, without residual branches at run time.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, padding="same"):
        super().__init__(in_channels, out_channels, kernel_size, padding=padding, bias=False)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        w = self.weight.data
        nn.init.dirac_(w[: w.size(1)])


class ConvGroup(nn.Module):
    """conv -> maxpool(2) -> BN -> GELU -> conv -> BN -> GELU."""

    def __init__(self, channels_in: int, channels_out: int):
        super().__init__()
        self.conv1 = Conv(channels_in, channels_out)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = BatchNorm(channels_out)
        self.conv2 = Conv(channels_out, channels_out)
        self.norm2 = BatchNorm(channels_out)
        self.activ = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.activ(self.norm1(self.pool(self.conv1(x))))
        return self.activ(self.norm2(self.conv2(x)))


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def airbench_net(
    widths: tuple[int, int, int] = (64, 256, 256),
    whiten_kernel: int = 2,
    head_scale: float = 1 / 9,
    num_classes: int = 10,
) -> nn.Sequential:
    """The airbench94 network; ``net[0]`` is the whitening conv (see `init_whitening`)."""
    whiten_width = 2 * 3 * whiten_kernel**2
    net = nn.Sequential(
        nn.Conv2d(3, whiten_width, whiten_kernel, padding=0, bias=True),
        nn.GELU(),
        ConvGroup(whiten_width, widths[0]),
        ConvGroup(widths[0], widths[1]),
        ConvGroup(widths[1], widths[2]),
        nn.MaxPool2d(3),
        nn.Flatten(),
        nn.Linear(widths[2], num_classes, bias=False),
        Scale(head_scale),  # small logits at init keep early label-smoothed steps stable
    )
    net[0].weight.requires_grad = False  # set from data by init_whitening, then frozen
    return net


@torch.no_grad()
def init_whitening(conv: nn.Conv2d, images: torch.Tensor, eps: float = 5e-4) -> None:
    """Set ``conv``'s filters to whiten ``images``' k x k patches (ZCA-like, in +-pairs).

    The eigenvectors of the patch covariance, scaled by 1/sqrt(eigenvalue), decorrelate the
    input: the first layer starts out doing what it would otherwise spend epochs learning. Each
    filter appears with both signs so the GELU after it loses no information.
    """
    c, (h, w) = images.shape[1], conv.weight.shape[2:]
    patches = images.float().unfold(2, h, 1).unfold(3, w, 1)  # N, C, H', W', h, w
    patches = patches.transpose(1, 3).reshape(-1, c * h * w)
    cov = patches.T @ patches / len(patches)
    eigenvalues, eigenvectors = torch.linalg.eigh(cov)
    eigenvalues, eigenvectors = eigenvalues.flip(0), eigenvectors.T.flip(0)
    filters = eigenvectors.reshape(-1, c, h, w) / torch.sqrt(eigenvalues + eps).view(-1, 1, 1, 1)
    conv.weight.copy_(torch.cat((filters, -filters)).to(conv.weight.dtype))


class Lookahead:
    """airbench's weight averaging: keep an EMA of the weights and copy it back into the net.

    Averaging late in training (the decay ramps up as ``(step / total) ** 3``) lands in a flatter
    spot than the last SGD iterate, which is worth a few tenths of a percent at equal steps.
    """

    def __init__(self, net: nn.Module):
        self.ema = {k: v.detach().clone() for k, v in net.state_dict().items()}

    @torch.no_grad()
    def update(self, net: nn.Module, decay: float) -> None:
        for (_, avg), param in zip(self.ema.items(), net.state_dict().values(), strict=True):
            if param.dtype.is_floating_point:
                avg.lerp_(param, 1 - decay)
                param.copy_(avg)
