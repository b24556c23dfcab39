"""gRPC servicer of the translator service.

Translators are TorchScript generators in a model root: `manifest.yaml` lists each by name
with its input kind, and `<name>/generator.pt` holds the network (translator_service/translation.py
runs one). The bundled root holds DESIGNATE's pix2pix translators from label maps to "real-world"
images (pix2pix-urban, pix2pix-mars), trained by `gauntlet train` (offline/image_training.py).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc
import yaml

from common.errors import InvalidArgument, NotFound, grpc_method
from common.generated.gauntlet.v1 import translator_pb2, translator_pb2_grpc
from common.tensor import TensorError, from_tensor, to_tensor
from common.validation import shown
from translator_service.translation import check_input, translate

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
        entry = self.entries[request.translator]
        check_input(request.translator, entry, images)
        out = translate(entry, model, images)
        return translator_pb2.TranslateResponse(images=to_tensor(out))


def register(server: grpc.Server, root: Path) -> list[str]:
    translator_pb2_grpc.add_TranslatorServiceServicer_to_server(TranslatorServicer(root), server)
    return [translator_pb2.DESCRIPTOR.services_by_name["TranslatorService"].full_name]
