"""Control flow: WHILE and IF, whose bodies become referenced models (`Graph.submodel`)."""
from __future__ import annotations

from ....hal import OperandType as T, OperationType as Op
from ..flatbuffer import BadModel
from ..graph import Graph
from ..imported import Unsupported
from ..registry import register
from ..schema import FlatOperator
from ..spec import Spec


@register("WHILE")
def map_while(graph: Graph, op: FlatOperator) -> None:
    """Loop variables the body passes through unchanged become NNAPI input-only operands; the
    others are input-output operands (NNAPI orders them first)."""
    o = op.options("WhileOptions")
    body_index, cond_index = o.BodySubgraphIndex(), o.CondSubgraphIndex()
    for index, what in ((body_index, "body"), (cond_index, "condition")):
        if not 0 < index < len(graph.flat.subgraphs):
            raise BadModel(f"{what} subgraph {index} out of range (the model has {len(graph.flat.subgraphs)} "
                           "subgraphs; 0 is the main one)")
    body_sub = graph.flat.subgraphs[body_index]
    n = len(op.inputs)
    if len(body_sub.inputs) != n or len(body_sub.outputs) != n or len(op.outputs) != n:
        raise Unsupported("loop variable counts of the WHILE, its body and its outputs differ")
    passthrough = [k for k in range(n) if body_sub.outputs[k] == body_sub.inputs[k]]
    carried = [k for k in range(n) if k not in passthrough]
    if not carried:
        raise Unsupported("the body changes no loop variable")
    order = carried + passthrough
    cond = graph.submodel(cond_index, order, [0])
    body = graph.submodel(body_index, order, carried)
    if cond is None or body is None:
        raise Unsupported("its condition or body has operators that cannot be mapped (listed)")
    ins = [graph.subgraph_operand(cond), graph.subgraph_operand(body)] + [graph.input(op.inputs[k]) for k in order]
    outs = [graph.output(op.outputs[k]) for k in carried]
    graph.emit(Op.WHILE, ins, outs)
    for k in passthrough:
        graph.values[op.outputs[k]] = graph.input(op.inputs[k])


@register("IF")
def map_if(graph: Graph, op: FlatOperator) -> None:
    """Both branches become referenced models taking the IF's inputs after the condition."""
    o = op.options("IfOptions")
    if not op.inputs:
        raise BadModel("IF needs its condition as input 0")
    n_in = len(op.inputs) - 1
    then_m = graph.submodel(o.ThenSubgraphIndex(), list(range(n_in)), list(range(len(op.outputs))))
    else_m = graph.submodel(o.ElseSubgraphIndex(), list(range(n_in)), list(range(len(op.outputs))))
    if then_m is None or else_m is None:
        raise Unsupported("a branch has operators that cannot be mapped (listed)")
    ins = [graph.input(op.inputs[0], Spec(T.TENSOR_BOOL8, (1,))), graph.subgraph_operand(then_m),
           graph.subgraph_operand(else_m)] + [graph.input(t) for t in op.inputs[1:]]
    graph.emit(Op.IF, ins, [graph.output(t) for t in op.outputs])
