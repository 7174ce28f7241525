"""Type stubs of convt: PyTorch's ConvTranspose2d as WGSL compute shaders on wgpu."""

from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

__version__: str

IntOrPair = Union[int, Tuple[int, int], Sequence[int]]
Precision = Literal["f32", "fast"]
Device = Literal["gpu", "cpu"]
# numpy arrays, CPU torch tensors, nested lists, DLPack producers: anything numpy.asarray or DLPack reads.
ArrayLike = Any

def conv_transpose2d(
    input: ArrayLike,
    weight: ArrayLike,
    bias: Optional[ArrayLike] = None,
    stride: IntOrPair = 1,
    padding: IntOrPair = 0,
    output_padding: IntOrPair = 0,
    groups: int = 1,
    dilation: IntOrPair = 1,
    precision: Precision = "f32",
    device: Device = "gpu",
) -> Any: ...

class ConvTranspose2d:
    in_channels: int
    out_channels: int
    kernel_size: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[int, int]
    output_padding: Tuple[int, int]
    groups: int
    dilation: Tuple[int, int]
    device: Device
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrPair,
        stride: IntOrPair = 1,
        padding: IntOrPair = 0,
        output_padding: IntOrPair = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: IntOrPair = 1,
        precision: Precision = "f32",
        seed: Optional[int] = None,
        device: Device = "gpu",
    ) -> None: ...
    @property
    def weight(self) -> np.ndarray: ...
    @weight.setter
    def weight(self, value: ArrayLike) -> None: ...
    @property
    def bias(self) -> Optional[np.ndarray]: ...
    @bias.setter
    def bias(self, value: Optional[ArrayLike]) -> None: ...
    @property
    def precision(self) -> Precision: ...
    @precision.setter
    def precision(self, value: Precision) -> None: ...
    def forward(self, input: ArrayLike, output_size: Optional[Sequence[int]] = None) -> Any: ...
    def __call__(self, input: ArrayLike, output_size: Optional[Sequence[int]] = None) -> Any: ...
    def backward(self, input: ArrayLike, grad_output: ArrayLike) -> Tuple[Any, Any, Optional[Any]]: ...
    def parameters(self) -> List[np.ndarray]: ...
    def state_dict(self) -> Dict[str, np.ndarray]: ...
    def load_state_dict(self, state_dict: Mapping[str, ArrayLike], strict: bool = True) -> None: ...
    def extra_repr(self) -> str: ...

def info() -> Dict[str, Any]: ...
