"""One negative test per validation rule: take the valid spec example, break one thing, and check that
validation fails with that rule's NetlistError naming the expected YAML key path.

Each case is (rule, mutation, expected path, device preset or None). The last test checks that every
rule in ``pybuda.netlist.validate.RULES`` has a case here.
"""

import copy
from pathlib import Path

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.errors import NetlistError
from pybuda.netlist import (
    AllocateQueue, Broadcast, FusedOpDef, FusedSubOp, HSlice, HStack, InputPad, Loop, Pad,
    QueueSetting, StaticVar, Transpose, VarInst, check, parse_file, rule_names, validate,
)
from pybuda.netlist.validate import NetlistRuleError
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity

SPEC = Path(__file__).parent / "fixtures" / "spec_example.yaml"
_BASE = parse_file(SPEC)


def base():
    return copy.deepcopy(_BASE)


def mm0(n):
    return n.graphs["fwd0"].ops["mm0"]


def nop(n):
    return n.graphs["fwd0"].ops["out_nop"]


def prog(n):
    return n.programs[0].instructions


def settings(n):
    return prog(n)[4].queue_settings


EXEC = "programs[0].run_fwd[4].execute"

# ---------------------------------------------------------------------------------------------------
# Mutations. Each takes the netlist and breaks exactly one rule (others may fire as a consequence).
# ---------------------------------------------------------------------------------------------------


def m_no_programs(n):
    n.programs = []


def m_arch_list(n):
    n.devices_arch = ("grayskull", "wormhole_b0")


def m_target_device(n):
    n.queues["act"].target_device = 3


def m_duplicate_op(n):
    g = copy.deepcopy(n.graphs["fwd0"])
    g.name = "fwd1"
    n.graphs["fwd1"] = g


def m_entries(n):
    n.queues["act"].entries = 0


def m_huge_grid(n):
    mm0(n).grid_size = (100000, 100000)


def m_input_count(n):
    n.graphs["fwd0"].input_count = 0


def m_op_type(n):
    nop(n).type = "conv2d"


def m_grid_loc(n):
    mm0(n).grid_loc = None


def m_extra_input(n):
    nop(n).inputs = ("mm0", "act")
    nop(n).in_df = (DF.Float16_b, DF.Float16_b)


def m_input_key(n):
    nop(n).input_tms[3] = (Transpose(),)


def m_missing_input(n):
    nop(n).inputs = ("ghost",)


def m_dram_count(n):
    n.queues["w"].dram = ((1, 0x30000000),)


def m_dram_overlap(n):
    n.queues["bias"].dram = ((1, 0x30000000),)


def m_ports(n):
    n.queues["act"].read_ports = (5,)


def m_queue_tile_dim(n):
    n.queues["act"].tile_dim = (3, 32)


def m_queue_producer(n):
    n.queues["out"].input = "ghost"


def m_queue_tms(n):
    n.queues["out"].input_tms = (Transpose(),)


def m_queue_shape(n):
    n.queues["out"].mblock = (1, 4)


def m_alias_self(n):
    n.queues["w"].alias = "w"


def m_gs_int_queue(n):
    n.devices_arch = "grayskull"
    n.queues["act"].df = DF.Int8


def m_in_df(n):
    mm0(n).in_df = (DF.Float16, DF.Bfp8_b, DF.Float16_b)


def m_overlap(n):
    nop(n).grid_loc = (0, 1)


def m_off_grid(n):
    nop(n).grid_loc = (9, 0)  # n150 has rows 0..8


def m_acc_df(n):
    nop(n).acc_df = DF.Bfp8_b


def m_big_ublock(n):
    mm0(n).ublock = (4, 4)


def m_mm_order(n):
    mm0(n).ublock_order = "c"


def m_untilize_order(n):
    nop(n).ublock_order = "c"


def m_untilize_reader(n):
    g = n.graphs["fwd0"]
    reader = copy.deepcopy(nop(n))
    reader.name, reader.inputs, reader.untilize_output, reader.grid_loc = "reader", ("out",), False, (2, 0)
    g.ops["reader"] = reader


def m_gradient_formats(n):
    nop(n).gradient_op = True
    nop(n).intermed_df = DF.Float16


def m_low_bfp_intermed(n):
    mm0(n).intermed_df = DF.Bfp4_b


def m_fp32_l1_acc(n):
    mm0(n).acc_df = DF.Float32
    mm0(n).ublock = (2, 2)
    mm0(n).attributes["l1_acc"] = True


def m_gs_fp32(n):
    n.devices_arch = "grayskull"
    mm0(n).acc_df = DF.Float32


def m_gs_stoch(n):
    n.devices_arch = "grayskull"
    mm0(n).attributes["stoch_rnd_mode"] = "fpu"


def m_gs_exponent(n):
    n.devices_arch = "grayskull"
    mm0(n).out_df = DF.Float16
    nop(n).in_df = (DF.Float16,)


def m_stoch_fp32(n):
    mm0(n).acc_df = DF.Float32
    mm0(n).attributes["stoch_rnd_mode"] = "fpu"


def m_l1_acc_intermed(n):
    mm0(n).attributes["l1_acc"] = True
    mm0(n).intermed_df = DF.Float16


def m_int_fidelity(n):
    n.queues["act"].df = DF.Int8
    mm0(n).in_df = (DF.Int8, DF.Bfp8_b, DF.Float16_b)


def m_quant(n):
    op = nop(n)
    op.type, op.inputs, op.in_df, op.untilize_output = "quantization", ("mm0", "mm0"), (DF.Float16_b,) * 2, False
    op.out_df = op.intermed_df = DF.Int8
    op.acc_df, op.math_fidelity = DF.Int32, MathFidelity.HiFi4


def m_splice_formats(n):
    op = nop(n)
    op.type, op.inputs, op.in_df = "splice", ("mm0", "w"), (DF.Float16_b, DF.Bfp8_b)
    op.attributes = {"granularity": "t", "input0": (0, 1, 1), "input1": (0, 1, 1)}


def m_attr_on_wrong_op(n):
    nop(n).attributes["m_k"] = 2


def m_missing_u_kt(n):
    del mm0(n).attributes["u_kt"]


def m_kernel_broadcast(n):
    mm0(n).attributes["kernel_broadcast"] = {"input_0": 4}


def m_op_tile_dim(n):
    nop(n).tile_dim = (5, 32)


def m_binary_tile_dims(n):
    op = nop(n)
    op.type, op.inputs, op.in_df, op.untilize_output = "add", ("mm0", "act"), (DF.Float16_b,) * 2, False
    n.queues["act"].tile_dim = (16, 32)


def m_embedding(n):
    op = nop(n)
    op.type, op.inputs, op.in_df, op.untilize_output = "embedding", ("mm0", "act"), (DF.Float16_b,) * 2, False
    op.attributes = {"num_indices": 33}


def m_depthwise(n):
    mm0(n).type = "depthwise"


def m_sparse(n):
    del mm0(n).attributes["bias"]
    mm0(n).attributes["identity"] = True


def m_transpose_in0(n):
    mm0(n).input_tms[0] = (Transpose(),)


def m_k_mismatch(n):
    mm0(n).attributes["u_kt"] = 1


def m_bias_broadcast(n):
    mm0(n).input_tms[2] = (Broadcast("r", 3),)


def m_bad_slice(n):
    nop(n).input_tms[0] = (HSlice(3),)


def m_reduce_out(n):
    op = nop(n)
    op.type, op.untilize_output = "reduce", False
    op.attributes = {"dim": "r", "type": "max"}


def m_stack(n):
    op = nop(n)
    op.ublock = (1, 3)
    op.input_tms[0] = (HSlice(4), HStack(4))


def m_buf_size_mb(n):
    mm0(n).t = 2
    mm0(n).buf_size_mb = 3
    nop(n).input_tms[0] = (HStack(2),)


def m_forked(n):
    mm0(n).forked_dram_inputs = (("act", "ghost_op"),)


def m_fused_ref(n):
    op = nop(n)
    op.type, op.attributes = "fused_op", {"fused_op_id": 7}


def m_fused_schedule(n):
    n.fused_ops[0] = FusedOpDef(id=0, inputs=1, intermediates=0, schedules=[[
        FusedSubOp(name="e0", type="exp", inputs=("input3",), output="output", mblock=(2, 4), ublock=(1, 2))]])


def m_l1(n):
    mm0(n).buf_size_mb = 400


def m_program_dup(n):
    n.programs.append(copy.deepcopy(n.programs[0]))


def m_param_second(n):
    instrs = prog(n)
    instrs[0], instrs[1] = instrs[1], instrs[0]


def m_var_twice(n):
    prog(n)[2] = StaticVar(values={"$lptr": 0, "$gptr": 0, "$c_zero": 0})


def m_undeclared(n):
    prog(n)[5] = VarInst(out="$lptr", op="incwrap", args=("$c_step", 16))


def m_no_endloop(n):
    prog(n).pop()


def m_loop_zero(n):
    prog(n)[3] = Loop(count=0)


def m_varinst_arity(n):
    prog(n)[5] = VarInst(out="$lptr", op="incwrap", args=("$c_mb",))


def m_graph_name(n):
    prog(n)[4].graph_name = "nope"


def m_setting_name(n):
    settings(n)["ghost"] = QueueSetting(prologue=True)


def m_setting_pointer(n):
    settings(n)["act"].rd_ptr_local = None


def m_setting_autoinc(n):
    settings(n)["act"].global_rdptr_autoinc = 2


def m_setting_epilogue(n):
    settings(n)["out"] = QueueSetting(epilogue=True, rd_ptr_local=0, rd_ptr_global=0)


def m_setting_zero(n):
    settings(n)["w"].zero = True
    settings(n)["w"].prologue = False


def m_host_queue_missing(n):
    del settings(n)["act"]


def m_gradient_settings(n):
    nop(n).gradient_op = True


def m_streaming_entries(n):
    n.queues["act"].entries = 6


def m_allocate(n):
    prog(n).append(AllocateQueue(names=("ghost",)))


CASES = [
    ("netlist_sizes", m_huge_grid, "graphs.fwd0.mm0.grid_size[0]", None),
    ("sections_nonempty", m_no_programs, "programs", None),
    ("devices_arch", m_arch_list, "devices.arch", None),
    ("target_device_range", m_target_device, "queues.act.target_device", "wh_n150"),
    ("names_unique", m_duplicate_op, "graphs.fwd1.mm0", None),
    ("queue_fields", m_entries, "queues.act.entries", None),
    ("graph_input_count", m_input_count, "graphs.fwd0.input_count", None),
    ("op_type_known", m_op_type, "graphs.fwd0.out_nop.type", None),
    ("op_fields", m_grid_loc, "graphs.fwd0.mm0.grid_loc", None),
    ("op_input_count", m_extra_input, "graphs.fwd0.out_nop.inputs", None),
    ("op_input_keys", m_input_key, "graphs.fwd0.out_nop.input_3_tms", None),
    ("op_inputs_exist", m_missing_input, "graphs.fwd0.out_nop.inputs[0]", None),
    ("queue_allocation", m_dram_count, "queues.w.dram", None),
    ("queue_dram_overlap", m_dram_overlap, "queues.w.dram", None),
    ("queue_ports", m_ports, "queues.act.read_ports", None),
    ("queue_tile_dim", m_queue_tile_dim, "queues.act.tile_dim", None),
    ("queue_single_producer", m_queue_producer, "queues.out.input", None),
    ("queue_input_tms", m_queue_tms, "queues.out.input_tms[0]", None),
    ("queue_producer_match", m_queue_shape, "queues.out.grid_size", None),
    ("queue_alias", m_alias_self, "queues.w.alias", None),
    ("int_formats_arch", m_gs_int_queue, "queues.act.df", None),
    ("op_in_df_match", m_in_df, "graphs.fwd0.mm0.in_df[0]", None),
    ("op_cores_overlap", m_overlap, "graphs.fwd0.out_nop.grid_loc", None),
    ("op_grid_fits_device", m_off_grid, "graphs.fwd0.out_nop.grid_loc", "wh_n150"),
    ("op_acc_df", m_acc_df, "graphs.fwd0.out_nop.acc_df", None),
    ("ublock_fits_dest", m_big_ublock, "graphs.fwd0.mm0.ublock", None),
    ("matmul_ublock_order", m_mm_order, "graphs.fwd0.mm0.ublock_order", None),
    ("untilize_output", m_untilize_order, "graphs.fwd0.out_nop.ublock_order", None),
    ("untilize_output", m_untilize_reader, "graphs.fwd0.reader.inputs[0]", None),
    ("gradient_op", m_gradient_formats, "graphs.fwd0.out_nop.intermed_df", None),
    ("accumulate_intermed_df", m_low_bfp_intermed, "graphs.fwd0.mm0.intermed_df", None),
    ("fp32_acc_intermed", m_fp32_l1_acc, "graphs.fwd0.mm0.intermed_df", None),
    ("gs_acc_df", m_gs_fp32, "graphs.fwd0.mm0.acc_df", None),
    ("gs_features", m_gs_stoch, "graphs.fwd0.mm0.attributes.stoch_rnd_mode", None),
    ("gs_exponent_width", m_gs_exponent, "graphs.fwd0.mm0.intermed_df", None),
    ("stoch_rnd", m_stoch_fp32, "graphs.fwd0.mm0.attributes.stoch_rnd_mode", None),
    ("l1_acc", m_l1_acc_intermed, "graphs.fwd0.mm0.intermed_df", None),
    ("int_formats", m_int_fidelity, "graphs.fwd0.mm0.math_fidelity", None),
    ("quant_ops", m_quant, "graphs.fwd0.out_nop.in_df", None),
    ("format_conversions", m_splice_formats, "graphs.fwd0.out_nop.in_df", None),
    ("op_attributes", m_attr_on_wrong_op, "graphs.fwd0.out_nop.attributes.m_k", None),
    ("op_required_attributes", m_missing_u_kt, "graphs.fwd0.mm0.attributes", None),
    ("kernel_broadcast", m_kernel_broadcast, "graphs.fwd0.mm0.attributes.kernel_broadcast", None),
    ("op_tile_dim", m_op_tile_dim, "graphs.fwd0.out_nop.tile_dim", None),
    ("binary_tile_dims", m_binary_tile_dims, "graphs.fwd0.out_nop.inputs", None),
    ("embedding_op", m_embedding, "graphs.fwd0.out_nop.attributes.num_indices", None),
    ("depthwise_op", m_depthwise, "graphs.fwd0.mm0.attributes.u_kt", None),
    ("sparse_matmul", m_sparse, "graphs.fwd0.mm0.in_df[2]", None),
    ("tm_allowed", m_transpose_in0, "graphs.fwd0.mm0.input_0_tms[0]", None),
    ("op_input_shapes", m_k_mismatch, "graphs.fwd0.mm0.inputs[0]", None),
    ("op_input_shapes", m_bias_broadcast, "graphs.fwd0.mm0.input_2_tms", None),
    ("op_input_shapes", m_bad_slice, "graphs.fwd0.out_nop.input_0_tms", None),
    ("reduce_output", m_reduce_out, "graphs.fwd0.out_nop.mblock", None),
    ("stack_factors", m_stack, "graphs.fwd0.out_nop.input_0_tms[1]", None),
    ("buf_size_mb_stack", m_buf_size_mb, "graphs.fwd0.mm0.buf_size_mb", None),
    ("forked_dram_inputs", m_forked, "graphs.fwd0.mm0.forked_dram_inputs[0]", None),
    ("fused_op_reference", m_fused_ref, "graphs.fwd0.out_nop.attributes.fused_op_id", None),
    ("fused_op_schedule", m_fused_schedule, "fused_ops.0.schedules[0].e0.inputs[0]", None),
    ("l1_fit", m_l1, "graphs.fwd0.mm0", "wh_n150"),
    ("program_names_unique", m_program_dup, "programs[1].run_fwd", None),
    ("program_param_first", m_param_second, "programs[0].run_fwd[1].param", None),
    ("program_var_declared_once", m_var_twice, "programs[0].run_fwd[2].staticvar", None),
    ("program_undeclared_variable", m_undeclared, "programs[0].run_fwd[5].varinst[2]", None),
    ("program_loop_balance", m_no_endloop, "programs[0].run_fwd[3].loop", None),
    ("program_loop_count", m_loop_zero, "programs[0].run_fwd[3].loop", None),
    ("program_varinst", m_varinst_arity, "programs[0].run_fwd[5].varinst", None),
    ("execute_graph_exists", m_graph_name, f"{EXEC}.graph_name", None),
    ("queue_setting_names", m_setting_name, f"{EXEC}.queue_settings.ghost", None),
    ("queue_setting_pointers", m_setting_pointer, f"{EXEC}.queue_settings.act.rd_ptr_local", None),
    ("queue_setting_autoinc", m_setting_autoinc, f"{EXEC}.queue_settings.act.global_rdptr_autoinc", None),
    ("queue_setting_epilogue", m_setting_epilogue, f"{EXEC}.queue_settings.out.epilogue", None),
    ("queue_setting_zero", m_setting_zero, f"{EXEC}.queue_settings.w.zero", None),
    ("execute_host_queues_listed", m_host_queue_missing, f"{EXEC}.queue_settings", None),
    ("execute_gradient_queues_listed", m_gradient_settings, f"{EXEC}.queue_settings", None),
    ("execute_streaming_entries", m_streaming_entries, f"{EXEC}.queue_settings.act", None),
    ("allocate_queue_names", m_allocate, "programs[0].run_fwd[8].allocate_queue[0]", None),
]


def test_base_is_valid():
    validate(base())
    validate(base(), get_device_descriptor(device_config="wh_n150"))
    assert check(base()) == []


@pytest.mark.parametrize("rule, mutate, path, preset", CASES, ids=[f"{c[0]}-{c[1].__name__}" for c in CASES])
def test_rule_violation(rule, mutate, path, preset):
    n = base()
    mutate(n)
    device = get_device_descriptor(device_config=preset) if preset else None
    with pytest.raises(NetlistError):
        validate(n, device)
    errors = check(n, device)
    hits = [e for e in errors if e.rule == rule]
    assert hits, f"rule {rule} did not fire; got {[str(e) for e in errors]}"
    assert any(e.path == path for e in hits), f"expected path {path}; got {[e.path for e in hits]}"
    hit = next(e for e in hits if e.path == path)
    assert isinstance(hit, NetlistRuleError) and str(hit).startswith(f"{path}: [{rule}]")


def test_every_rule_has_a_negative_case():
    covered = {case[0] for case in CASES}
    assert set(rule_names()) - covered == set()


def test_validate_raises_the_first_error():
    n = base()
    m_alias_self(n)
    m_allocate(n)
    with pytest.raises(NetlistRuleError) as err:
        validate(n)
    assert err.value.rule == "queue_alias"
    assert [e.rule for e in check(n)] == ["queue_alias", "allocate_queue_names"]


def test_check_can_run_selected_rules():
    n = base()
    m_alias_self(n)
    m_allocate(n)
    assert [e.rule for e in check(n, rules=["allocate_queue_names"])] == ["allocate_queue_names"]


def test_matmul_k_message_names_m_k_and_u_kt():
    n = base()
    m_k_mismatch(n)
    msg = next(str(e) for e in check(n) if e.rule == "op_input_shapes")
    assert "K = m_k·u_kt = 2·1 = 2" in msg


def test_grid_transpose_counts_for_overlap():
    n = base()
    op = nop(n)
    op.grid_size, op.mblock, op.grid_transpose = (2, 1), (1, 4), True  # occupies a 1x2 strip at (1, 0)
    assert check(n, rules=["op_cores_overlap"]) == []
    op.grid_loc = (0, 1)  # now a 1x2 strip from (0, 1): (0, 1) collides with mm0, (0, 2) is free
    assert [e.rule for e in check(n, rules=["op_cores_overlap"])] == ["op_cores_overlap"]


def test_broadcast_z_needs_t_1():
    n = base()
    mm0(n).input_tms[2] = (Broadcast("r", 2), Broadcast("z", 2))
    n.queues["bias"].t = 2
    assert any("broadcast z needs input t == 1" in str(e) for e in check(n))


def test_grayskull_forbids_binary_transpose_and_read_ports():
    n = base()
    n.devices_arch = "grayskull"
    op = nop(n)
    op.type, op.inputs, op.in_df, op.untilize_output = "add", ("mm0", "mm0"), (DF.Float16_b,) * 2, False
    op.input_tms[0] = (Transpose(), Transpose())
    n.queues["act"].read_ports = (0,)
    rules = {e.rule for e in check(n)}
    assert {"tm_allowed", "queue_ports"} <= rules


def test_wormhole_a0_dest_is_larger():
    n = base()
    n.devices_arch = "wormhole"
    mm0(n).ublock = (4, 4)  # 16 tiles: too big for B0, fine for A0's 4x Dest
    assert not [e for e in check(n) if e.rule == "ublock_fits_dest"]


def test_loop_count_variable_never_set():
    n = base()
    prog(n)[3] = Loop(count="$c_zero")
    assert [e.path for e in check(n) if e.rule == "program_loop_count"] == ["programs[0].run_fwd[3].loop"]


def test_pad_once_per_input():
    n = base()
    nop(n).input_tms[0] = (Pad(0, 0),)
    nop(n).input_pad[0] = InputPad(rt=0, ct=0)
    assert [e.rule for e in check(n)] == ["op_input_keys"]


def test_dram_overflow_with_device():
    n = base()
    n.queues["act"].dram = ((0, 2 * 2**30 - 64),)
    assert [e.rule for e in check(n, get_device_descriptor(device_config="wh_n150"))] == ["queue_allocation"]
    n.queues["act"].dram = ((6, 0x30000000),)  # WH has channels 0..5
    assert [e.rule for e in check(n, get_device_descriptor(device_config="wh_n150"))] == ["queue_allocation"]


def _two_dynamic_queues(n, first_live, second_live):
    """Two e2e-style queues sharing channel 4 at the same address, each allocated/deallocated around
    the instruction ranges given (indices into the program's instruction list, inserted in order)."""
    from pybuda.netlist import DeallocateQueue

    for name in ("e2e_a", "e2e_b"):
        q = copy.deepcopy(n.queues["bias"])
        q.name = name
        q.dram = ((4, 0x30000000),)
        n.queues[name] = q
    instrs = prog(n)
    execute = instrs[4]
    body = []
    for name, live in (("e2e_a", first_live), ("e2e_b", second_live)):
        body.append((live[0], AllocateQueue(names=(name,))))
        body.append((live[1], DeallocateQueue(names=(name,))))
    # rebuild: allocate/deallocate markers around copies of the execute, in slot order
    new = instrs[:4]
    for slot in range(3):
        new += [ins for s, ins in body if s == slot and isinstance(ins, AllocateQueue)]
        new.append(copy.deepcopy(execute))
        new += [ins for s, ins in body if s == slot and not isinstance(ins, AllocateQueue)]
    new += instrs[5:]
    n.programs[0].instructions[:] = new


def test_queue_dram_overlap_is_lifetime_aware():
    """Queues whose allocate/deallocate lifetimes are disjoint may share DRAM; overlapping lifetimes
    may not; a static queue overlaps every queue at the same addresses."""
    n = base()
    _two_dynamic_queues(n, first_live=(0, 0), second_live=(1, 2))  # a: execute 0; b: executes 1-2
    assert check(n, rules=["queue_dram_overlap"]) == []
    n = base()
    _two_dynamic_queues(n, first_live=(0, 1), second_live=(1, 2))  # both live during execute 1
    assert [e.rule for e in check(n, rules=["queue_dram_overlap"])] == ["queue_dram_overlap"]
    n = base()
    _two_dynamic_queues(n, first_live=(0, 0), second_live=(1, 2))
    n.queues["e2e_b"].dram = ((3, 0x30000000),)  # on top of the static bias queue
    assert [e.rule for e in check(n, rules=["queue_dram_overlap"])] == ["queue_dram_overlap"]
