"""The main job (`make run`): build a small convolutional model with the public API, compile it with a
cache directory twice (cold, then from the cache), execute it and print outputs and prepare times."""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

import nnapi
from nnapi import OperandType as T, OperationType as Op


def build_model() -> nnapi.Model:
    """input [1,8,8,3] -> CONV_2D 3x3x3->8 (SAME, RELU) -> DEPTHWISE 3x3 (SAME, RELU6) -> AVERAGE_POOL 8x8
    -> RESHAPE [1,8] -> FULLY_CONNECTED 8->4 -> SOFTMAX."""
    rng = np.random.default_rng(0)
    m = nnapi.Model()

    def scalar(t: T, v) -> int:
        i = m.add_operand(t)
        m.set_operand_value(i, v)
        return i

    def const(a: np.ndarray) -> int:
        i = m.add_operand(T.TENSOR_FLOAT32 if a.dtype == np.float32 else T.TENSOR_INT32, a.shape)
        m.set_operand_value(i, a)
        return i

    x = m.add_operand(T.TENSOR_FLOAT32, (1, 8, 8, 3))
    conv = m.add_operand(T.TENSOR_FLOAT32, (1, 8, 8, 8))
    m.add_operation(Op.CONV_2D, [x, const(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)),
                                 const(np.zeros(8, np.float32)), scalar(T.INT32, nnapi.PaddingScheme.SAME),
                                 scalar(T.INT32, 1), scalar(T.INT32, 1), scalar(T.INT32, nnapi.FusedActivationFunc.RELU)],
                    [conv])
    dw = m.add_operand(T.TENSOR_FLOAT32, (1, 8, 8, 8))
    m.add_operation(Op.DEPTHWISE_CONV_2D, [conv, const(rng.normal(0, 0.3, (1, 3, 3, 8)).astype(np.float32)),
                                           const(np.zeros(8, np.float32)), scalar(T.INT32, nnapi.PaddingScheme.SAME),
                                           scalar(T.INT32, 1), scalar(T.INT32, 1), scalar(T.INT32, 1),
                                           scalar(T.INT32, nnapi.FusedActivationFunc.RELU6)], [dw])
    pooled = m.add_operand(T.TENSOR_FLOAT32, (1, 1, 1, 8))
    m.add_operation(Op.AVERAGE_POOL_2D, [dw, scalar(T.INT32, nnapi.PaddingScheme.VALID), scalar(T.INT32, 1),
                                         scalar(T.INT32, 1), scalar(T.INT32, 8), scalar(T.INT32, 8),
                                         scalar(T.INT32, 0)], [pooled])
    flat = m.add_operand(T.TENSOR_FLOAT32, (1, 8))
    m.add_operation(Op.RESHAPE, [pooled, const(np.array([1, 8], np.int32))], [flat])
    logits = m.add_operand(T.TENSOR_FLOAT32, (1, 4))
    m.add_operation(Op.FULLY_CONNECTED, [flat, const(rng.normal(0, 0.5, (4, 8)).astype(np.float32)),
                                         const(np.zeros(4, np.float32)), scalar(T.INT32, 0)], [logits])
    probs = m.add_operand(T.TENSOR_FLOAT32, (1, 4))
    m.add_operation(Op.SOFTMAX, [logits, scalar(T.FLOAT32, 1.0)], [probs])
    m.identify_inputs_and_outputs([x], [probs])
    m.finish()
    return m


def main() -> None:
    model = build_model()
    token = nnapi.model_token(model)
    cache_dir = os.environ.get("NNAPI_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "nnapi-main-job-cache")
    os.makedirs(cache_dir, exist_ok=True)
    for name in os.listdir(cache_dir):  # start cold so the first compile is a miss
        os.remove(os.path.join(cache_dir, name))
    x = np.random.default_rng(1).normal(size=(1, 8, 8, 3)).astype(np.float32)
    print(f"devices: {', '.join(d.name for d in nnapi.devices())}")
    for label in ("cold", "cached"):
        start = time.perf_counter()
        compilation = nnapi.Compilation(model, cache_dir=cache_dir, token=token).finish()
        prepare_s = time.perf_counter() - start
        (probs,) = compilation.execute([x])
        where = ", ".join(f"{o.device}: {o.outcome}" + (f" ({o.reason})" if o.reason else "")
                          for o in compilation.cache_outcomes)
        print(f"{label:>6} compile: {prepare_s * 1000:8.2f} ms   cache: {where}")
        print(f"        outputs: {np.array2string(probs, precision=4)}")


if __name__ == "__main__":
    main()
