"""Trains DESIGNATE's two networks on the "real-world" domain (offline/real_domain.py), on the CPU, in minutes.

* ``SEGMENTATION``: the DNN under test, a compact U-Net segmenting (H, W, 3) images into the subject's classes
  (the paper tests GluonCV's DeepLabV3 trained on Cityscapes / AI4MARS). Exported as TorchScript ``model.pt``
  that takes uint8 images (B, H, W, 3) and returns uint8 label maps (B, H, W); its exported ``embed`` gives the
  frozen encoder's features (the bottleneck average-pooled to a 2 x 4 grid), our stand-in for the paper's
  ImageNet ResNet50 feature vectors in F_similarity.
* ``PIX2PIX``: the translator, a pix2pix-family conditional GAN from one-hot label maps to images: a U-Net
  generator, PatchGAN discriminators at two scales (pix2pixHD's multi-scale discriminator, kept: it is cheap at
  64 x 128), least-squares adversarial loss (pix2pixHD's) plus L1 (pix2pix's, lambda 100). pix2pixHD's
  coarse-to-fine global/local generator, instance maps and feature-matching loss are dropped (one scale of
  64 x 128 images has nothing for a local enhancer to add). No dropout, so a translation is deterministic.
  Exported as TorchScript ``generator.pt``: int64 label maps (B, H, W) -> float images (B, 3, H, W) in [-1, 1].

Both write a JSON-lines training log (one record per epoch) and return their measured quality, which the zoo
manifests list. Training is seeded (torch, numpy) and single-process; re-running a recipe on the same machine
reproduces its numbers (float reductions on another CPU may differ in the last bits).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from offline.real_domain import DomainSpec, ensure_dataset, load_split
from subjects.urban.metrics import iou_per_class
from subjects.urban.scene import CLASSES

DATA_ROOT = Path("runs/real_domain")
TRAINING_LOG = "training_log.jsonl"
MAX_FILE_BYTES = 5 * 1024 * 1024


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )  # fmt: skip


class Segmenter(nn.Module):
    """The compact U-Net under test (three down-samplings), taking uint8 HWC images."""

    def __init__(self, n_classes: int, height: int, width: int, widths: tuple[int, int, int] = (16, 32, 64)) -> None:
        super().__init__()
        a, b, c = widths
        self.image_shape = [height, width, 3]
        self.n_classes = n_classes
        self.enc1, self.enc2, self.enc3 = _block(3, a), _block(a, b), _block(b, c)
        self.bottleneck = _block(c, c)
        self.pool = nn.MaxPool2d(2)
        self.up3, self.dec3 = nn.ConvTranspose2d(c, c, 2, stride=2), _block(2 * c, c)
        self.up2, self.dec2 = nn.ConvTranspose2d(c, b, 2, stride=2), _block(2 * b, b)
        self.up1, self.dec1 = nn.ConvTranspose2d(b, a, 2, stride=2), _block(2 * a, a)
        self.head = nn.Conv2d(a, n_classes, 1)

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        return images.permute(0, 3, 1, 2).float() / 255.0 - 0.5

    def encode(self, x: torch.Tensor) -> list[torch.Tensor]:
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        e3 = self.enc3(self.pool(e2))
        return [e1, e2, e3, self.bottleneck(self.pool(e3))]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        e1, e2, e3, z = self.encode(x)
        d3 = self.dec3(torch.cat([self.up3(z), e3], 1))
        d2 = self.dec2(torch.cat([self.up2(d3), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.head(d1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, H, W, 3) -> uint8 label maps (B, H, W)."""
        return self.logits(self.normalise(images)).argmax(1).to(torch.uint8)

    @torch.jit.export
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, H, W, 3) -> float32 (B, 8 * c): the frozen bottleneck pooled to 2 x 4 cells, flattened."""
        z = self.encode(self.normalise(images))[3]
        return F.adaptive_avg_pool2d(z, (2, 4)).flatten(1)


class Generator(nn.Module):
    """pix2pix's U-Net generator (3x3 convolutions, four down-samplings), taking int64 label maps."""

    def __init__(self, n_classes: int, widths: tuple[int, ...] = (32, 64, 96, 96)) -> None:
        super().__init__()
        self.n_classes = n_classes
        downs, ups = [], []
        cin = n_classes
        for i, w in enumerate(widths):
            norm: list[nn.Module] = [] if i == 0 else [nn.BatchNorm2d(w)]
            downs.append(nn.Sequential(nn.Conv2d(cin, w, 3, stride=2, padding=1), *norm, nn.LeakyReLU(0.2)))
            cin = w
        rev = list(reversed(widths))
        last = widths[0]
        for i, w in enumerate([*rev[1:], last]):
            skip = 0 if i == 0 else rev[i]
            ups.append(
                nn.Sequential(
                    nn.Upsample(scale_factor=2.0, mode="nearest"),
                    nn.Conv2d(rev[i] + skip, w, 3, padding=1),
                    nn.BatchNorm2d(w),
                    nn.ReLU(),
                )
            )
        self.downs, self.ups = nn.ModuleList(downs), nn.ModuleList(ups)
        self.out = nn.Sequential(nn.Conv2d(last + n_classes, 3, 3, padding=1), nn.Tanh())

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        """int64 (B, H, W) -> float (B, 3, H, W) in [-1, 1]."""
        x = F.one_hot(labels, self.n_classes).permute(0, 3, 1, 2).float()
        skips: list[torch.Tensor] = []
        h = x
        for down in self.downs:
            h = down(h)
            skips.append(h)
        i = 0
        for up in self.ups:
            if i > 0:
                h = torch.cat([h, skips[len(skips) - 1 - i]], 1)
            h = up(h)
            i += 1
        return self.out(torch.cat([h, x], 1))


def build_discriminator(n_classes: int, width: int = 32) -> nn.ModuleList:
    """A PatchGAN on (one-hot label map, image), one per scale (pix2pixHD's two-scale discriminator)."""
    w = width

    def patch() -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(n_classes + 3, w, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.Conv2d(w, 2 * w, 4, stride=2, padding=1), nn.BatchNorm2d(2 * w), nn.LeakyReLU(0.2),
            nn.Conv2d(2 * w, 4 * w, 4, stride=1, padding=1), nn.BatchNorm2d(4 * w), nn.LeakyReLU(0.2),
            nn.Conv2d(4 * w, 1, 4, stride=1, padding=1),
        )  # fmt: skip

    return nn.ModuleList([patch(), patch()])


def _to_float_images(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def predict_labels(model: Any, images: np.ndarray, batch: int = 64) -> np.ndarray:
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(images), batch):
            out.append(model(torch.from_numpy(np.ascontiguousarray(images[i : i + batch]))).numpy())
    return np.concatenate(out)


def translate(generator: Any, labels: np.ndarray, batch: int = 64) -> np.ndarray:
    generator.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(labels), batch):
            y = generator(torch.from_numpy(labels[i : i + batch].astype(np.int64)))
            out.append(((y.clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy())
    return np.concatenate(out)


def quality(kind: str, truth: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """Per-image IoU_car (urban, over images with cars) and per-image mIoU, averaged, plus the pooled car IoU."""
    classes = CLASSES[kind]
    per_image = [iou_per_class(t, p, len(classes)) for t, p in zip(truth, predicted)]
    miou = float(np.mean([np.nanmean(v) for v in per_image]))
    out = {"miou": round(miou, 4)}
    if "car" in classes:
        car = classes.index("car")
        with_cars = [v[car] for v, t in zip(per_image, truth) if (t == car).any()]
        out["iou_car"] = round(float(np.mean(with_cars)), 4)
        out["iou_car_median"] = round(float(np.median(with_cars)), 4)
        pooled = iou_per_class(truth.reshape(-1), predicted.reshape(-1), len(classes))[car]
        out["iou_car_pooled"] = round(float(pooled), 4)
    return out


def _dataset(kind: str, hp: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    sizes = {"train": int(hp["train_pairs"]), "val": int(hp["val_pairs"]), "test": int(hp["test_pairs"])}
    spec = DomainSpec(kind=kind, seed=int(hp.get("data_seed", 0)), sizes=sizes)
    paths = ensure_dataset(spec, Path(hp.get("data_root", DATA_ROOT)))
    return {split: load_split(path) for split, path in paths.items()}


def _log(stream: Any, record: dict[str, Any], progress: Callable[[str], None] | None) -> None:
    stream.write(json.dumps(record) + "\n")
    stream.flush()
    if progress:
        progress(json.dumps(record))


def train_segmenter(
    kind: str, seed: int, hp: dict[str, Any], out_dir: Path, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Trains the DNN under test on the real train split; writes model.pt and the log; returns its metadata."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    data = _dataset(kind, hp)
    labels, images = data["train"]
    n_classes = len(CLASSES[kind])
    height, width = labels.shape[1:]
    model = Segmenter(n_classes, height, width, tuple(hp.get("widths", (16, 32, 64))))
    optimiser = torch.optim.Adam(model.parameters(), lr=float(hp.get("learning_rate", 2e-3)))
    epochs, batch = int(hp["epochs"]), int(hp.get("batch_size", 16))
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with open(out_dir / TRAINING_LOG, "w") as stream:
        for epoch in range(epochs):
            model.train()
            order = rng.permutation(len(labels))
            losses = []
            for i in range(0, len(order), batch):
                idx = order[i : i + batch]
                x = model.normalise(torch.from_numpy(images[idx]))
                flip = rng.random() < 0.5  # horizontal flips: the only augmentation
                y = torch.from_numpy(labels[idx].astype(np.int64))
                if flip:
                    x, y = x.flip(3), y.flip(2)
                loss = F.cross_entropy(model.logits(x), y)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                losses.append(float(loss.detach()))
            val = quality(kind, data["val"][0], predict_labels(model, data["val"][1]))
            _log(stream, {"epoch": epoch + 1, "loss": round(float(np.mean(losses)), 4), "val": val,
                          "wall_seconds": round(time.time() - started, 1)}, progress)  # fmt: skip
    model.eval()
    scripted = torch.jit.script(model)
    scripted.save(str(out_dir / "model.pt"))
    test = quality(kind, data["test"][0], predict_labels(model, data["test"][1]))
    return {
        "seed": seed,
        "epochs": epochs,
        "train_pairs": len(labels),
        "train_wall_seconds": round(time.time() - started, 1),
        "test_pairs": len(data["test"][0]),
        **{f"test_{k}": v for k, v in test.items()},
        "file_bytes": (out_dir / "model.pt").stat().st_size,
    }


def train_translator(
    kind: str, seed: int, hp: dict[str, Any], out_dir: Path, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Trains the pix2pix translator on the real train split; writes generator.pt and the log.

    Its measured quality is the paper's premise: the DNN under test (``hp.dnn``, a model.pt) segments translated
    validation maps about as well as the real validation images.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    data = _dataset(kind, hp)
    labels, images = data["train"]
    n_classes = len(CLASSES[kind])
    generator = Generator(n_classes, tuple(hp.get("widths", (32, 64, 96, 96))))
    discriminators = build_discriminator(n_classes, int(hp.get("discriminator_width", 32)))
    lr = float(hp.get("learning_rate", 2e-4))
    opt_g = torch.optim.Adam(generator.parameters(), lr=lr, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(discriminators.parameters(), lr=lr, betas=(0.5, 0.999))
    l1_weight = float(hp.get("l1_weight", 100.0))
    epochs, batch = int(hp["epochs"]), int(hp.get("batch_size", 8))
    target = _to_float_images(images)
    onehot = F.one_hot(torch.from_numpy(labels.astype(np.int64)), n_classes).permute(0, 3, 1, 2)
    onehot = onehot.float()

    def judge(cond: Any, image: Any) -> list[Any]:
        pair = torch.cat([cond, image], 1)
        half = F.avg_pool2d(pair, 3, stride=2, padding=1, count_include_pad=False)
        return [discriminators[0](pair), discriminators[1](half)]

    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with open(out_dir / TRAINING_LOG, "w") as stream:
        for epoch in range(epochs):
            generator.train()
            discriminators.train()
            order = rng.permutation(len(labels))
            sums = {"d": 0.0, "g_adv": 0.0, "l1": 0.0}
            steps = 0
            for i in range(0, len(order), batch):
                idx = torch.from_numpy(order[i : i + batch])
                cond, real = onehot[idx], target[idx]
                fake = generator(torch.from_numpy(labels[order[i : i + batch]].astype(np.int64)))
                d_loss = sum(
                    ((r - 1) ** 2).mean() + (f**2).mean() for r, f in zip(judge(cond, real), judge(cond, fake.detach()))
                )
                opt_d.zero_grad()
                d_loss.backward()
                opt_d.step()
                adv = sum(((f - 1) ** 2).mean() for f in judge(cond, fake))
                l1 = (fake - real).abs().mean()
                g_loss = adv + l1_weight * l1
                opt_g.zero_grad()
                g_loss.backward()
                opt_g.step()
                sums["d"] += float(d_loss.detach())
                sums["g_adv"] += float(adv.detach())
                sums["l1"] += float(l1.detach())
                steps += 1
            _log(stream, {"epoch": epoch + 1, **{k: round(v / steps, 4) for k, v in sums.items()},
                          "wall_seconds": round(time.time() - started, 1)}, progress)  # fmt: skip
    generator.eval()
    scripted = torch.jit.script(generator)
    scripted.save(str(out_dir / "generator.pt"))
    meta: dict[str, Any] = {
        "seed": seed,
        "epochs": epochs,
        "train_pairs": len(labels),
        "train_wall_seconds": round(time.time() - started, 1),
        "file_bytes": (out_dir / "generator.pt").stat().st_size,
    }
    dnn_path = hp.get("dnn")
    if dnn_path and Path(dnn_path).exists():  # the DNN's accuracy on translated vs real validation images
        dnn = torch.jit.load(str(dnn_path))
        val_labels, val_images = data["val"]
        meta["val_dnn_on_real"] = quality(kind, val_labels, predict_labels(dnn, val_images))
        meta["val_dnn_on_translated"] = quality(kind, val_labels, predict_labels(dnn, translate(generator, val_labels)))
        meta["val_dnn_quality_model"] = str(dnn_path)
    return meta


def train_image_recipe(recipe: Any, out_dir: Path) -> dict[str, Any]:
    """Runs a SEGMENTATION or PIX2PIX recipe (offline/recipes.yaml) for its subject's scene; returns its metadata."""
    from simulator_service.api import get_subject

    kind = str(get_subject(recipe.subject).env_kwargs.get("scene", ""))
    if kind not in CLASSES:
        raise ValueError(
            f"recipe {recipe.name}: subject {recipe.subject} is not an image subject (no env_kwargs.scene)"
        )
    hp = dict(recipe.hyperparams)
    torch.set_num_threads(int(hp.pop("threads", 1)))
    trainer = train_segmenter if recipe.algorithm == "SEGMENTATION" else train_translator
    meta = trainer(kind, recipe.seed, hp, out_dir, progress=print if hp.get("verbose") else None)
    size = meta["file_bytes"]
    if size > MAX_FILE_BYTES:
        raise ValueError(f"recipe {recipe.name}: the trained file has {size} bytes, over the zoo's 5 MiB limit")
    return {"subject": recipe.subject, "algorithm": recipe.algorithm, **meta, "data": _data_note(hp)}


def _data_note(hp: dict[str, Any]) -> str:
    return (
        f"real-domain pairs (offline/real_domain.py), data_seed {hp.get('data_seed', 0)}: "
        f"train {hp['train_pairs']}, val {hp['val_pairs']}, test {hp['test_pairs']}"
    )
