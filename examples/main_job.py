"""The main job (`make run`): a real TFLite model end to end through nnapi.

Imports MediaPipe's short-range face detector (examples/models/face_detection_short_range.tflite,
Apache-2.0, see examples/models/NOTICE), compiles it for the best devices with a fresh cache directory
twice (cold: a miss that writes the cache, then cached: a hit; the directory is removed at the end),
runs it on a synthetic 128x128 image and prints where each partition ran, the prepare times and the
top detections.
The same from the command line: `nnapi run examples/models/face_detection_short_range.tflite --cache-dir DIR`.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

import nnapi
from nnapi.importers import ImportedModel, load_tflite

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "face_detection_short_range.tflite")


def synthetic_image(size: int = 128) -> np.ndarray:
    """A deterministic test picture in [-1, 1]: a bright disc (a face-sized blob) on a gradient."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    disc = (((x - 0.5) ** 2 + (y - 0.45) ** 2) < 0.09).astype(np.float32)
    rgb = np.stack([0.3 * x + 0.6 * disc, 0.3 * y + 0.5 * disc, 0.2 + 0.4 * disc], axis=-1)
    return (rgb * 2.0 - 1.0)[None].astype(np.float32)


def _cache_folder() -> tempfile.TemporaryDirectory:
    """A fresh, empty cache folder (so the first compile is a miss), removed at the end: in
    $NNAPI_CACHE_DIR when set (created if missing, its other contents left alone), else in the
    system's temporary folder."""
    parent = os.environ.get("NNAPI_CACHE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix="nnapi-main-job-", dir=parent)


def _cold_then_cached(imported: ImportedModel, image: np.ndarray,
                      cache_dir: str) -> tuple[nnapi.Compilation, np.ndarray, np.ndarray]:
    """Compile twice with `cache_dir`: cold (a miss that writes the cache), then cached (a hit); each
    time print where the partitions ran and the cache outcome, and run once. Returns the last
    compilation and its outputs."""
    for label in ("cold", "cached"):
        start = time.perf_counter()
        compilation = nnapi.Compilation(imported.model, cache_dir=cache_dir, token=imported.token()).finish()
        prepare_ms = (time.perf_counter() - start) * 1000
        print(f"{label:>6} prepare: {prepare_ms:9.1f} ms")
        for k, (step, outcome) in enumerate(zip(compilation.steps, compilation.cache_outcomes)):
            why = f" ({outcome.reason})" if outcome.reason else ""
            print(f"         partition {k}: {len(step.operations)} operations on {step.device.name}, "
                  f"cache {outcome.outcome}{why}")
        start = time.perf_counter()
        regressors, logits = compilation.execute([image])
        print(f"         execute: {(time.perf_counter() - start) * 1000:9.1f} ms")
    return compilation, regressors, logits


def main() -> None:
    start = time.perf_counter()
    imported = load_tflite(MODEL)
    import_ms = (time.perf_counter() - start) * 1000
    print(f"model: {os.path.relpath(MODEL)} ({os.path.getsize(MODEL)} bytes), imported in {import_ms:.1f} ms")
    print(f"  {sum(imported.operators.values())} TFLite operators -> {sum(imported.operations.values())} NNAPI "
          f"operations; fp16 weights folded to float32 at import: {imported.copied_bytes} bytes; "
          f"weights referenced in the file mapping: {imported.referenced_bytes} bytes")
    for info in imported.inputs:
        print(f"  input  {info}")
    for info in imported.outputs:
        print(f"  output {info}")
    print(f"devices: {', '.join(d.name for d in nnapi.devices())}")

    image = synthetic_image()
    with _cache_folder() as cache_dir:
        compilation, regressors, logits = _cold_then_cached(imported, image, cache_dir)

    if any(step.device.name != "reference" for step in compilation.steps):
        # Cross-check the chosen devices against the reference interpreter (the numpy ground truth).
        check = nnapi.Compilation(imported.model, devices=["reference"]).finish().execute([image])
        diff = max(float(np.abs(a - b).max()) / max(float(np.abs(b).max()), 1e-30)
                   for a, b in zip((regressors, logits), check))
        verdict = "agree" if diff <= 1e-3 else "DISAGREE (using the reference device's outputs)"
        print(f"cross-check with the reference device: max difference {diff:.2e} of the largest value: {verdict}")
        if diff > 1e-3:
            regressors, logits = check
    scores = 1.0 / (1.0 + np.exp(-logits.reshape(-1)))
    boxes = regressors.reshape(-1, 16)
    print("top 5 anchors by detection score (box centre offset x, y and size w, h in pixels):")
    for anchor in np.argsort(-scores)[:5]:
        cx, cy, w, h = boxes[anchor, :4]
        print(f"  anchor {anchor:4d}: score {scores[anchor]:.4f}  box ({cx:+7.2f}, {cy:+7.2f}, {w:6.2f}, {h:6.2f})")


if __name__ == "__main__":
    main()
