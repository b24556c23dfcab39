"""The image stage of an image subject's lock-step: translator and encoder calls between the envs and the agent.

DESIGNATE ("Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section III) runs the DNN
under test on the realistic image the GAN makes from the simulator's ground truth AND on the simulator's own image
(delta_IoU = IoU(simulator) - IoU(realistic) flags GAN outputs that lost objects), and describes each realistic
image by a feature vector (F_similarity). Per lock-step, for the k image environments in it, this stage makes:

1. ONE Translate call with the k ground-truth label maps (when the episode has a translator);
2. ONE Embed call on the agent with the k images the DNN is judged on (only when the oracle asked for the
   `features` signal): the realistic images, or the simulator's without a translator;
3. the model's batch: the k simulator images followed by the k realistic ones (2k images, ONE Act), or just
   the k simulator images without a translator (DESIGNATE_NoGAN).

The agent's 2k label maps come back as k actions of shape (2, H, W): prediction on the simulator image, then on
the realistic one. The env stores them as `prediction_simulated` / `prediction_realistic` (see
subjects/urban/backend.py for the signal contract).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import grpc
import numpy as np

from common.generated.gauntlet.v1 import agent_pb2, agent_pb2_grpc, translator_pb2, translator_pb2_grpc
from common.remote import local_error
from common.tensor import from_tensor, to_tensor
from simulator_service.runner import AgentError

TIMEOUT_SECONDS = 120.0


@runtime_checkable
class ImageEnv(Protocol):
    """What an image backend's env offers the stage (subjects/urban/backend.py)."""

    def translator_input(self) -> np.ndarray: ...

    def attach_views(self, realistic_image: np.ndarray | None, features: np.ndarray | None) -> None: ...


def is_image_env(env: object) -> bool:
    return isinstance(getattr(env, "unwrapped", env), ImageEnv)


class ImageStage:
    def __init__(
        self,
        translator: translator_pb2_grpc.TranslatorServiceStub | None,
        translator_name: str,
        agent: agent_pb2_grpc.AgentServiceStub,
        model: str,
        want_features: bool,
    ) -> None:
        if translator_name and translator is None:
            raise ValueError("a translator name needs a translator stub")
        self._translator = translator
        self._translator_name = translator_name
        self._agent = agent
        self._model = model
        self._want_features = want_features

    @property
    def views(self) -> int:
        """Images the model sees per environment: 2 with a translator (simulator + realistic), else 1."""
        return 2 if self._translator_name else 1

    def expand(self, envs: Sequence[object], observations: np.ndarray) -> np.ndarray:
        """The model's batch for these envs' observations (their simulator images), after the stage's calls."""
        images = [getattr(env, "unwrapped", env) for env in envs]
        realistic = None
        if self._translator_name:
            assert self._translator is not None
            maps = np.stack([env.translator_input() for env in images])  # type: ignore[attr-defined]
            request = translator_pb2.TranslateRequest(translator=self._translator_name, images=to_tensor(maps))
            try:
                answer = self._translator.Translate(request, timeout=TIMEOUT_SECONDS)
            except grpc.RpcError as exc:
                raise local_error(exc, f"translator {self._translator_name!r}: translator service") from None
            realistic = from_tensor(answer.images)
            if realistic.shape != observations.shape:
                raise AgentError(
                    f"translator {self._translator_name!r} returned images {realistic.shape} for observations "
                    f"{observations.shape}"
                )
        features = None
        if self._want_features:
            judged = realistic if realistic is not None else observations
            request_e = agent_pb2.EmbedRequest(images=to_tensor(judged))
            request_e.model.name = self._model
            try:
                features = from_tensor(self._agent.Embed(request_e, timeout=TIMEOUT_SECONDS).features)
            except grpc.RpcError as exc:
                raise local_error(exc, f"model {self._model!r}: agent service (Embed)") from None
        for i, env in enumerate(images):
            env.attach_views(  # type: ignore[attr-defined]
                None if realistic is None else realistic[i], None if features is None else features[i]
            )
        return observations if realistic is None else np.concatenate([observations, realistic])

    def contract(self, actions: np.ndarray, n: int) -> np.ndarray:
        """The agent's answers regrouped per env: (n, H, W) as is, (2n, H, W) as (n, 2, H, W)."""
        if len(actions) != n * self.views:
            raise AgentError(f"agent returned {len(actions)} label maps for {n} environments x {self.views} views")
        if self.views == 1:
            return actions
        return np.stack([actions[:n], actions[n:]], axis=1)
