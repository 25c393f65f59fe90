"""The netlist: dataclasses (model), YAML writer (emit), strict YAML reader (parse) and the rule checker
(validate). It is the contract between the compiler and the backend (netlist_backend_spec §1)."""

from pybuda.netlist.model import (  # noqa: F401
    AllocateQueue, Broadcast, DeallocateQueue, EndLoop, Execute, FusedOpDef, FusedSubOp, GraphDef, HSlice, HStack,
    InputPad, InputUnpad, Loop, Netlist, NetlistOp, Pad, Param, Program, QueueDef, QueueSetting, StaticVar,
    TileBroadcast, TileShape3, TM, TMError, Transpose, Var, VarInst, VSlice, VStack, apply_tms, op_class,
    resolve_operand,
)
from pybuda.netlist.emit import to_yaml, write  # noqa: F401
from pybuda.netlist.parse import load_yaml, parse_file, parse_tms, parse_yaml  # noqa: F401
from pybuda.netlist.validate import NetlistRuleError, check, rule_names, validate  # noqa: F401
from pybuda.netlist.operands import (  # noqa: F401
    L1Usage, expected_input_shape, input_shape_after_tms, op_l1_usage, prologue_inputs,
)
