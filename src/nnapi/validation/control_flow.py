"""IF and WHILE checks that need the referenced subgraphs (Android's validateIf/WhileOperation)."""
from __future__ import annotations

from ..hal import Model, Operand, OperandLifeTime, OperandType, Operation, OperationType, Subgraph, invalid


def check_control_flow(label: str, model: Model, subgraph: Subgraph, op: Operation) -> None:
    """Validate an IF or WHILE operation against the subgraphs it references."""
    if op.type == OperationType.IF:
        _check_if(label, model, subgraph, op)
    elif op.type == OperationType.WHILE:
        _check_while(label, model, subgraph, op)


def _compatible(label: str, what: str, a: Operand, b: Operand) -> None:
    """Same type, scale, zero point and per-channel params; ranks and known dimensions agree."""
    if OperandType(a.type) != OperandType(b.type):
        raise invalid(f"{label}: {what}: type {OperandType(a.type).name} != {OperandType(b.type).name}")
    da, db = tuple(a.dimensions), tuple(b.dimensions)
    if da and db:
        if len(da) != len(db) or any(x and y and x != y for x, y in zip(da, db)):
            raise invalid(f"{label}: {what}: dimensions {list(da)} and {list(db)} are incompatible")
    if a.scale != b.scale or a.zero_point != b.zero_point or a.channel_quant != b.channel_quant:
        raise invalid(f"{label}: {what}: quantization differs ({a.scale}/{a.zero_point} vs {b.scale}/{b.zero_point})")


def _referenced(label: str, what: str, model: Model, operand: Operand) -> Subgraph:
    if OperandType(operand.type) != OperandType.SUBGRAPH or operand.lifetime != OperandLifeTime.SUBGRAPH:
        raise invalid(f"{label}: {what} must be a SUBGRAPH operand, got {OperandType(operand.type).name}")
    return model.referenced[operand.location.offset]  # range checked with the operand


def _check_condition(label: str, what: str, operand: Operand) -> None:
    if OperandType(operand.type) != OperandType.TENSOR_BOOL8 or tuple(operand.dimensions) != (1,):
        raise invalid(f"{label}: {what} must be a TENSOR_BOOL8 of shape [1], got "
                      f"{OperandType(operand.type).name} {list(operand.dimensions)}")


def _check_if(label: str, model: Model, subgraph: Subgraph, op: Operation) -> None:
    operands = subgraph.operands
    if len(op.inputs) < 3 or len(op.outputs) < 1:
        raise invalid(f"{label}: IF needs at least 3 inputs and 1 output, got {len(op.inputs)} and {len(op.outputs)}")
    _check_condition(label, "input 0 (condition)", operands[op.inputs[0]])
    for branch, k in (("then", 1), ("else", 2)):
        ref = _referenced(label, f"input {k} ({branch} branch)", model, operands[op.inputs[k]])
        if len(ref.input_indexes) != len(op.inputs) - 3 or len(ref.output_indexes) != len(op.outputs):
            raise invalid(f"{label}: {branch} branch has {len(ref.input_indexes)} inputs and "
                          f"{len(ref.output_indexes)} outputs, the IF has {len(op.inputs) - 3} and {len(op.outputs)}")
        for i, inner in enumerate(ref.input_indexes):
            _compatible(label, f"{branch} branch input {i}", ref.operands[inner], operands[op.inputs[3 + i]])
        for i, inner in enumerate(ref.output_indexes):
            _compatible(label, f"{branch} branch output {i}", ref.operands[inner], operands[op.outputs[i]])


def _check_while(label: str, model: Model, subgraph: Subgraph, op: Operation) -> None:
    operands = subgraph.operands
    if len(op.inputs) < 3 or len(op.outputs) < 1:
        raise invalid(f"{label}: WHILE needs at least 3 inputs and 1 output, "
                      f"got {len(op.inputs)} and {len(op.outputs)}")
    outer_inputs = op.inputs[2:]
    cond = _referenced(label, "input 0 (condition model)", model, operands[op.inputs[0]])
    if len(cond.input_indexes) != len(outer_inputs) or len(cond.output_indexes) != 1:
        raise invalid(f"{label}: condition model has {len(cond.input_indexes)} inputs and "
                      f"{len(cond.output_indexes)} outputs, expected {len(outer_inputs)} and 1")
    for i, inner in enumerate(cond.input_indexes):
        _compatible(label, f"condition model input {i}", cond.operands[inner], operands[outer_inputs[i]])
    _check_condition(label, "condition model output 0", cond.operands[cond.output_indexes[0]])
    body = _referenced(label, "input 1 (body model)", model, operands[op.inputs[1]])
    n_in, n_out = len(body.input_indexes), len(body.output_indexes)
    if n_in != len(outer_inputs) or not len(op.outputs) <= n_out <= n_in:
        raise invalid(f"{label}: body model has {n_in} inputs and {n_out} outputs; expected {len(outer_inputs)} "
                      f"inputs and between {len(op.outputs)} and {len(outer_inputs)} outputs")
    for i, inner in enumerate(body.input_indexes):
        _compatible(label, f"body model input {i}", body.operands[inner], operands[outer_inputs[i]])
    for i in range(len(op.outputs)):
        _compatible(label, f"body model output {i}", body.operands[body.output_indexes[i]], operands[op.outputs[i]])
    for i in range(n_out):
        _compatible(label, f"body model input {i} and output {i}", body.operands[body.input_indexes[i]],
                    body.operands[body.output_indexes[i]])
