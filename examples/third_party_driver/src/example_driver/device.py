"""The example driver on the driver base (`nnapi.drivers.base`): the device and its prepared model.

The base does validation, admission and deadlines (`nnapi.qos`), request binding, timing, output
shapes, compilation caching with the integrity registry, and memory domains; this module says what the
device runs (`program`), how a program runs, and how it is cached.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from nnapi.drivers.base import Binding, CompileJob, DriverDevice, DriverPreparedModel
from nnapi.hal import (Capabilities, DeviceType, ExecutionPreference, Model, OperandPerformance, OperandType,
                       PerformanceInfo, Priority)

from . import program


class ExamplePreparedModel(DriverPreparedModel):
    """A compiled program; the base runs `run` on a scheduler slot for each execution."""

    def __init__(self, prog: program.Program, preference: ExecutionPreference, priority: Priority) -> None:
        super().__init__(prog.interface(), preference, priority)
        self.program = prog

    def run(self, binding: Binding) -> Sequence[np.ndarray]:
        values = dict(self.program.constants)
        values.update((index, binding.input(k)) for k, index in enumerate(self.program.inputs))
        with np.errstate(all="ignore"):  # inf and NaN follow IEEE, as on any float unit
            for k, step in enumerate(self.program.steps):
                binding.checkpoint(f"operation {k}")  # the deadline, and preemption by higher priorities
                values[step.output] = step.run(values)
        return [values[index] for index in self.program.outputs]


class ExampleDevice(DriverDevice):
    """The device: what it is, what it runs, how it compiles and how it caches."""

    NAME = "example"
    CACHE_FILES = (1, 1)  # model cache: the program (JSON); data cache: its constants
    DEVICE_TYPE = DeviceType.ACCELERATOR
    #: The package's release is part of the driver's version (a new one trusts no older cache): raise it
    #: in pyproject.toml when the cache format or the kernels change.
    VERSION_PACKAGES = {"example": "nnapi-example-driver"}
    #: ...and so is a fingerprint of this package's own source, so an edited checkout trusts no older cache.
    VERSION_SOURCES = ("example_driver",)

    def capabilities(self) -> Capabilities:
        slow = PerformanceInfo(2.0, 2.0)  # slower than the reference CPU: the runtime prefers it only when asked
        return Capabilities(slow, slow, (OperandPerformance(OperandType.INT32, slow),
                                         OperandPerformance(OperandType.TENSOR_FLOAT32, slow)), slow, slow)

    def supported(self, model: Model) -> list[bool]:
        return [step is not None for step in program.plan(model)]

    def compile(self, job: CompileJob) -> ExamplePreparedModel:
        return ExamplePreparedModel(program.compile_program(job.model, job.checkpoint), job.preference,
                                    job.priority)

    def save(self, prepared: ExamplePreparedModel) -> tuple[list[bytes], list[bytes]]:
        model_blob, data_blob = program.to_blobs(prepared.program, prepared.preference, prepared.priority)
        return [model_blob], [data_blob]

    def load(self, model_blobs: list[memoryview], data_blobs: list[memoryview] | None,
             job: CompileJob) -> ExamplePreparedModel:
        return ExamplePreparedModel(*program.from_blobs(model_blobs[0], data_blobs[0]))
