"""gRPC servicer of the translator service.

Translators are TorchScript generators in a model root: `manifest.yaml` lists each by name
with its input kind, and `<name>/generator.pt` holds the network. The bundled root is empty
until the DESIGNATE work trains one, so ListTranslators answers with an empty list.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import yaml

from common.errors import InvalidArgument, NotFound, grpc_method
from common.generated.gauntlet.v1 import translator_pb2, translator_pb2_grpc
from common.tensor import TensorError, from_tensor, to_tensor
from common.validation import shown

DEFAULT_TRANSLATOR_ROOT = Path(__file__).parent / "models"


class TranslatorServicer(translator_pb2_grpc.TranslatorServiceServicer):
    def __init__(self, root: Path) -> None:
        manifest = root / "manifest.yaml"
        data = yaml.safe_load(manifest.read_text()) if manifest.exists() else {}
        self.root = root
        self.entries: dict[str, dict[str, Any]] = dict((data or {}).get("translators") or {})
        self._loaded: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _model(self, name: str) -> Any:
        if name not in self.entries:
            known = ", ".join(sorted(self.entries)) or "none installed"
            raise NotFound(f"unknown translator {shown(name)}; installed translators: {known} (root {self.root})")
        with self._lock:
            if name not in self._loaded:
                import torch

                self._loaded[name] = torch.jit.load(str(self.root / name / "generator.pt"), map_location="cpu").eval()
            return self._loaded[name]

    @grpc_method
    def ListTranslators(
        self, request: translator_pb2.ListTranslatorsRequest, context: grpc.ServicerContext
    ) -> translator_pb2.ListTranslatorsResponse:
        return translator_pb2.ListTranslatorsResponse(
            translators=[
                translator_pb2.TranslatorSummary(
                    name=n, description=str(e.get("description", "")), input_kind=str(e.get("input_kind", "rgb"))
                )
                for n, e in sorted(self.entries.items())
            ]
        )

    @grpc_method
    def Translate(
        self, request: translator_pb2.TranslateRequest, context: grpc.ServicerContext
    ) -> translator_pb2.TranslateResponse:
        model = self._model(request.translator)
        try:
            images = from_tensor(request.images)
        except TensorError as exc:
            raise InvalidArgument(f"images: {exc}") from None
        if images.dtype != np.uint8 or images.ndim != 4:
            raise InvalidArgument(
                f"images must be uint8 (batch, height, width, channels), got {images.dtype} {images.shape}"
            )
        import torch

        with torch.no_grad():
            x = torch.from_numpy(images.copy()).permute(0, 3, 1, 2).float() / 127.5 - 1.0
            y = model(x).clamp(-1, 1)
        out = ((y + 1.0) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
        return translator_pb2.TranslateResponse(images=to_tensor(out))


def register(server: grpc.Server, root: Path) -> list[str]:
    translator_pb2_grpc.add_TranslatorServiceServicer_to_server(TranslatorServicer(root), server)
    return [translator_pb2.DESCRIPTOR.services_by_name["TranslatorService"].full_name]
