"""What the example "accelerator" runs: a program of float32 steps (element-wise operations and
FULLY_CONNECTED) compiled from a model's main graph, and the program's cache format. Replace this
module with your device's compiler.

Each step is one operation: a numpy kernel on its tensor inputs, then the clamp of its fused activation
(RELU, RELU1 and RELU6 are a clamp alone). Parameters are read once, at compile time, with
`nnapi.ops.resolve` (the same reading the validation and the reference kernels use).

Cache format: the model cache is the program as JSON (nothing in it runs code when loaded), the data
cache the program's constants as raw float32 bytes, back to back.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nnapi.drivers.base import interface_model
from nnapi.hal import (ExecutionPreference, Model, OperandLifeTime as L, OperandType, Operation, OperationType as Op,
                       Priority)
from nnapi.ops import UnknownValue, activation_range, resolve
from nnapi.validation import ConstantReader, build_operation_context, infer_model_shapes

F32 = OperandType.TENSOR_FLOAT32
#: The kernels: NNAPI operation -> numpy function of its tensor inputs (RELU*: the clamp does the work).
KERNELS: dict[Op, Callable[..., np.ndarray]] = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide,
    Op.RELU: np.positive, Op.RELU1: np.positive, Op.RELU6: np.positive,
    Op.LOGISTIC: lambda a: 1 / (1 + np.exp(-a)), Op.TANH: np.tanh, Op.ABS: np.abs, Op.EXP: np.exp,
    Op.SQRT: np.sqrt,
    Op.FULLY_CONNECTED: lambda x, w, b: np.matmul(x.reshape(-1, w.shape[1]), w.T, dtype=np.float64) + b,
}


@dataclass(frozen=True)
class Step:
    """One operation: its kernel on the tensor operands `inputs`, clamped to [low, high] (or by the fused
    activation the request feeds as operand `activation`), into `output`."""

    op: Op
    inputs: tuple[int, ...]
    output: int
    low: float | None = None
    high: float | None = None
    activation: int | None = None

    def run(self, values: dict[int, np.ndarray]) -> np.ndarray:
        out = KERNELS[self.op](*(values[i] for i in self.inputs)).astype(np.float32, copy=False)
        fed = self.activation is not None
        low, high = activation_range(int(values[self.activation])) if fed else (self.low, self.high)
        if low is not None:  # fmax: NaN becomes the low end, as in NNAPI's kernels
            out = np.fmax(out, np.float32(low))
        return out if high is None else np.minimum(out, np.float32(high))


def plan_step(model: Model, op: Operation, dims: list, reader: ConstantReader) -> Step | None:
    """The step of one operation of the (validated) model, or None when this device cannot run it."""
    operands = model.main.operands
    tensors = tuple(i for i in op.inputs if not operands[i].type.is_scalar)
    if op.type not in KERNELS or any(operands[i].type != F32 for i in (*tensors, *op.outputs)):
        return None
    ctx = build_operation_context(model, model.main, op, dims=dims, constants=reader)
    try:
        params = resolve(ctx)  # ADD..DIV: BroadcastParams; RELU*: ReluParams; FullyConnectedParams
    except UnknownValue:  # not a constant: the activation, when the request feeds it, is read at run time
        fed = operands[op.inputs[-1]].lifetime == L.SUBGRAPH_INPUT
        return Step(op.type, tensors, op.outputs[0], activation=op.inputs[-1]) if fed else None
    except LookupError:  # an operation without parameters (LOGISTIC, TANH, ...)
        return Step(op.type, tensors, op.outputs[0])
    return Step(op.type, tensors, op.outputs[0], *activation_range(params.activation))


def plan(model: Model) -> list[Step | None]:
    """The step of every operation of the main graph (None: unsupported)."""
    dims, reader = infer_model_shapes(model), ConstantReader(model)
    return [plan_step(model, op, dims, reader) for op in model.main.operations]


@dataclass(frozen=True)
class Program:
    """A compiled model: its input and output operands (indexes in its graph, and (type, dims) of each,
    inputs first), the steps in order, and the constant tensors the steps read."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    io: tuple[tuple[int, tuple[int, ...]], ...]
    steps: tuple[Step, ...]
    constants: dict[int, np.ndarray]

    def interface(self) -> Model:
        """The model as its requests see it, inputs and outputs alone: what the base checks and binds
        requests against (a program loaded from a cache has no other model)."""
        n = len(self.inputs)
        return interface_model(self.io[:n], self.io[n:])


def compile_program(model: Model, checkpoint: Callable[[str], None]) -> Program:
    """The program of a model whose every operation `plan` supports."""
    main, reader, steps = model.main, ConstantReader(model), []
    for k, step in enumerate(plan(model)):
        checkpoint(f"operation {k}")  # the preparation's deadline, between units of work
        steps.append(step)
    constants = {i: np.array(reader.value(main.operands[i])) for s in steps for i in s.inputs  # copies
                 if main.operands[i].lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)}
    io = tuple((int(main.operands[i].type), tuple(main.operands[i].dimensions))
               for i in (*main.input_indexes, *main.output_indexes))
    return Program(tuple(main.input_indexes), tuple(main.output_indexes), io, tuple(steps), constants)


def to_blobs(program: Program, preference: ExecutionPreference, priority: Priority) -> tuple[bytes, bytes]:
    """(model-cache blob, data-cache blob): the program as JSON, with the options it was prepared with."""
    header = {"preference": int(preference), "priority": int(priority), "inputs": program.inputs,
              "outputs": program.outputs, "io": program.io,
              "steps": [[int(s.op), s.inputs, s.output, s.low, s.high, s.activation] for s in program.steps],
              "constants": [[i, a.shape] for i, a in program.constants.items()]}
    data = b"".join(np.ascontiguousarray(a, np.float32).tobytes() for a in program.constants.values())
    return json.dumps(header).encode(), data


def from_blobs(model_blob: memoryview, data_blob: memoryview) -> tuple[Program, ExecutionPreference, Priority]:
    """What `to_blobs` wrote (verified bytes: the base checked them against the integrity registry)."""
    h = json.loads(bytes(model_blob))
    constants, offset = {}, 0
    for i, shape in h["constants"]:
        count = int(np.prod(shape))
        constants[i] = np.frombuffer(data_blob, np.float32, count, offset).reshape(shape)
        offset += 4 * count
    steps = tuple(Step(Op(op), tuple(inputs), *rest) for op, inputs, *rest in h["steps"])
    io = tuple((t, tuple(d)) for t, d in h["io"])
    program = Program(tuple(h["inputs"]), tuple(h["outputs"]), io, steps, constants)
    return program, ExecutionPreference(h["preference"]), Priority(h["priority"])
