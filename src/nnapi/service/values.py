"""The HAL's plain values on the wire (shapes, timing, capabilities, device info, buffer descs and
roles) and the checks every decoded field goes through: each raises only `NnError(INVALID_ARGUMENT)`
naming the field at fault (`what`)."""
from __future__ import annotations

import numbers
from typing import Any, Sequence

from ..hal import (BufferDesc, BufferRole, Capabilities, DeviceInfo, DeviceType, OperandPerformance, OperandType,
                   OutputShape, PerformanceInfo, Timing, invalid)

#: Bounds on decoded collections (far above anything valid; they only cap memory).
MAX_ITEMS = 1 << 16
MAX_RANK = 1 << 10
U64_MAX = 2**64 - 1
I64_MIN = -2**63


def plain(value: Any) -> Any:
    """numpy integers as Python ints (msgpack knows only the latter); anything else unchanged."""
    if type(value) is int or value is None:
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
        return int(value)
    return value


def encode_shapes(shapes: Sequence[OutputShape] | None) -> list | None:
    if shapes is None:
        return None
    return [[[int(d) for d in s.dimensions], bool(s.is_sufficient)] for s in shapes]


def encode_timing(t: Timing) -> list:
    return [int(t.time_on_device), int(t.time_in_driver)]


def _perf(p: PerformanceInfo) -> list:
    return [float(p.exec_time), float(p.power_usage)]


def encode_capabilities(c: Capabilities) -> list:
    return [_perf(c.relaxed_float32_to_float16_performance_scalar),
            _perf(c.relaxed_float32_to_float16_performance_tensor),
            [[int(o.type), *_perf(o.info)] for o in c.operand_performance],
            _perf(c.if_performance), _perf(c.while_performance)]


def encode_info(info: DeviceInfo) -> list:
    return [info.name, info.version, int(info.type), int(info.feature_level)]


def check_int(v: Any, what: str, lo: int = I64_MIN, hi: int = U64_MAX) -> int:
    if type(v) is not int:
        raise invalid(f"{what}: expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise invalid(f"{what}: {v} is out of range [{lo}, {hi}]")
    return v


def check_opt_int(v: Any, what: str, lo: int = I64_MIN, hi: int = U64_MAX) -> int | None:
    return None if v is None else check_int(v, what, lo, hi)


def check_list(v: Any, what: str, max_len: int = MAX_ITEMS, length: int | None = None) -> list:
    if type(v) is not list:
        raise invalid(f"{what}: expected a list, got {type(v).__name__}")
    if length is not None and len(v) != length:
        raise invalid(f"{what}: expected {length} items, got {len(v)}")
    if len(v) > max_len:
        raise invalid(f"{what}: {len(v)} items (at most {max_len})")
    return v


def check_str(v: Any, what: str) -> str:
    if type(v) is not str:
        raise invalid(f"{what}: expected a string, got {type(v).__name__}")
    return v


def check_bool(v: Any, what: str) -> bool:
    if type(v) is not bool:
        raise invalid(f"{what}: expected a boolean, got {type(v).__name__}")
    return v


def check_float(v: Any, what: str) -> float:
    if type(v) not in (float, int):
        raise invalid(f"{what}: expected a number, got {type(v).__name__}")
    return float(v)


def check_bytes(v: Any, what: str) -> bytes:
    if type(v) is not bytes:
        raise invalid(f"{what}: expected bytes, got {type(v).__name__}")
    return v


def decode_shapes(v: Any, what: str = "output shapes") -> list[OutputShape] | None:
    if v is None:
        return None
    shapes = []
    for k, s in enumerate(check_list(v, what)):
        dims, ok = check_list(s, f"{what} {k}", length=2)
        shapes.append(OutputShape(tuple(check_int(d, f"{what} {k} dimension", 0)
                                        for d in check_list(dims, f"{what} {k}", MAX_RANK)),
                                  check_bool(ok, f"{what} {k} is_sufficient")))
    return shapes


def decode_timing(v: Any, what: str = "timing") -> Timing:
    on_device, in_driver = check_list(v, what, length=2)
    return Timing(check_int(on_device, f"{what} on device", 0), check_int(in_driver, f"{what} in driver", 0))


def _decode_perf(v: Any, what: str) -> PerformanceInfo:
    exec_time, power = check_list(v, what, length=2)
    return PerformanceInfo(check_float(exec_time, what), check_float(power, what))


def decode_capabilities(v: Any) -> Capabilities:
    scalar, tensor, operands, if_perf, while_perf = check_list(v, "capabilities", length=5)
    entries = []
    for k, entry in enumerate(check_list(operands, "capabilities operand performance")):
        code, exec_time, power = check_list(entry, f"operand performance {k}", length=3)
        try:
            operand_type = OperandType(check_int(code, f"operand performance {k} type"))
        except ValueError:
            raise invalid(f"operand performance {k}: unknown operand type {code}") from None
        entries.append(OperandPerformance(operand_type, PerformanceInfo(check_float(exec_time, "exec_time"),
                                                                         check_float(power, "power_usage"))))
    return Capabilities(_decode_perf(scalar, "relaxed scalar performance"),
                        _decode_perf(tensor, "relaxed tensor performance"), tuple(entries),
                        _decode_perf(if_perf, "if performance"), _decode_perf(while_perf, "while performance"))


def decode_info(v: Any) -> DeviceInfo:
    name, version, kind, level = check_list(v, "device info", length=4)
    try:
        device_type = DeviceType(check_int(kind, "device type"))
    except ValueError:
        raise invalid(f"device info: unknown device type {kind}") from None
    return DeviceInfo(check_str(name, "device name"), check_str(version, "device version"), device_type,
                      check_int(level, "feature level"))


def encode_desc(desc: BufferDesc) -> list:
    return [[plain(d) for d in desc.dimensions]]


def decode_desc(v: Any) -> BufferDesc:
    (dims,) = check_list(v, "buffer desc", length=1)
    return BufferDesc(tuple(check_int(d, "buffer desc dimension") for d in check_list(dims, "buffer desc", MAX_RANK)))


def encode_role(role: BufferRole) -> list:
    return [plain(role.model_index), plain(role.io_index), plain(role.frequency)]


def decode_role(v: Any, what: str) -> BufferRole:
    model_index, io_index, frequency = check_list(v, what, length=3)
    return BufferRole(check_int(model_index, f"{what} model index"), check_int(io_index, f"{what} io index"),
                      check_float(frequency, f"{what} frequency"))
