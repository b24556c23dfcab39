"""Tensor codec: numpy arrays <-> gauntlet.v1.Tensor (little-endian, row-major)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from common.generated.gauntlet.v1 import common_pb2

_TO_NUMPY: dict[common_pb2.ElementType.ValueType, np.dtype[Any]] = {
    common_pb2.ELEMENT_TYPE_FLOAT32: np.dtype("<f4"),
    common_pb2.ELEMENT_TYPE_FLOAT64: np.dtype("<f8"),
    common_pb2.ELEMENT_TYPE_INT32: np.dtype("<i4"),
    common_pb2.ELEMENT_TYPE_INT64: np.dtype("<i8"),
    common_pb2.ELEMENT_TYPE_UINT8: np.dtype("u1"),
    common_pb2.ELEMENT_TYPE_BOOL: np.dtype("?"),
}
_FROM_NUMPY = {dt.kind + str(dt.itemsize): code for code, dt in _TO_NUMPY.items()}


class TensorError(ValueError):
    """A Tensor message that cannot be decoded (bad dtype or a data length that does not match its shape)."""


def to_tensor(array: np.ndarray | float | int | bool) -> common_pb2.Tensor:
    arr = np.asarray(array)
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    code = _FROM_NUMPY.get(arr.dtype.kind + str(arr.dtype.itemsize))
    if code is None:
        raise TensorError(f"dtype {arr.dtype} has no Tensor element type (use float32/64, int32/64, uint8 or bool)")
    little = arr.astype(_TO_NUMPY[code], copy=False)
    return common_pb2.Tensor(dtype=code, shape=list(arr.shape), data=np.ascontiguousarray(little).tobytes())


def element_size(dtype: common_pb2.ElementType.ValueType) -> int:
    """Bytes per element of a Tensor dtype; 0 for an unknown one."""
    known = _TO_NUMPY.get(dtype)
    return known.itemsize if known is not None else 0


def from_tensor(tensor: common_pb2.Tensor) -> np.ndarray:
    dtype = _TO_NUMPY.get(tensor.dtype)
    if dtype is None:
        raise TensorError(f"Tensor.dtype {tensor.dtype} is not a known element type")
    shape = tuple(int(s) for s in tensor.shape)
    if any(s < 0 for s in shape):
        raise TensorError(f"Tensor.shape {list(shape)} has a negative dimension")
    expected = math.prod(shape) * dtype.itemsize  # Python integers: an int64 product can wrap round to a match
    data = tensor.data  # once: each read of a bytes field makes a copy of it
    if len(data) != expected:
        raise TensorError(
            f"Tensor.data holds {len(data)} bytes but shape {list(shape)} of {dtype.name} needs {expected}"
        )
    try:
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    except ValueError:  # an empty array whose other dimensions are too large for numpy to index
        raise TensorError(f"Tensor.shape has dimensions too large to index ({len(shape)} dimensions)") from None
