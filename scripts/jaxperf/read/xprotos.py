"""The two protobuf schemas a capture needs, declared here because no package ships them.

- ``tensorflow.profiler.XSpace`` (XLA's ``tsl/profiler/protobuf/xplane.proto``): the whole
  ``<host>.xplane.pb`` file.
- A subset of ``xla.HloProto`` (XLA's ``service/hlo.proto`` and ``xla_data.proto``): the programs
  stored on the ``/host:metadata`` plane. Only the fields this bundle reads are declared; the
  protobuf runtime keeps the others as unknown fields, so nothing is lost by parsing a subset.

Field numbers are XLA's. The descriptors live in a private pool, so they never clash with another
package that registers the same message names.
"""

from __future__ import annotations

from functools import cache

# (field name, number, type, label). type is a scalar name or a message name; label is
# "opt", "rep" or ("map", key type, value type).
_XPLANE = {
    "XSpace": [
        ("planes", 1, "XPlane", "rep"),
        ("errors", 2, "string", "rep"),
        ("warnings", 3, "string", "rep"),
        ("hostnames", 4, "string", "rep"),
    ],
    "XPlane": [
        ("id", 1, "int64", "opt"),
        ("name", 2, "string", "opt"),
        ("lines", 3, "XLine", "rep"),
        ("event_metadata", 4, None, ("map", "int64", "XEventMetadata")),
        ("stat_metadata", 5, None, ("map", "int64", "XStatMetadata")),
        ("stats", 6, "XStat", "rep"),
    ],
    "XLine": [
        ("id", 1, "int64", "opt"),
        ("display_id", 10, "int64", "opt"),
        ("name", 2, "string", "opt"),
        ("display_name", 11, "string", "opt"),
        ("timestamp_ns", 3, "int64", "opt"),
        ("duration_ps", 9, "int64", "opt"),
        ("events", 4, "XEvent", "rep"),
    ],
    "XEvent": [
        ("metadata_id", 1, "int64", "opt"),
        ("offset_ps", 2, "int64", ("oneof", "data")),
        ("num_occurrences", 5, "int64", ("oneof", "data")),
        ("duration_ps", 3, "int64", "opt"),
        ("stats", 4, "XStat", "rep"),
    ],
    "XStat": [
        ("metadata_id", 1, "int64", "opt"),
        ("double_value", 2, "double", ("oneof", "value")),
        ("uint64_value", 3, "uint64", ("oneof", "value")),
        ("int64_value", 4, "int64", ("oneof", "value")),
        ("str_value", 5, "string", ("oneof", "value")),
        ("bytes_value", 6, "bytes", ("oneof", "value")),
        ("ref_value", 7, "uint64", ("oneof", "value")),
    ],
    "XEventMetadata": [
        ("id", 1, "int64", "opt"),
        ("name", 2, "string", "opt"),
        ("display_name", 4, "string", "opt"),
        ("metadata", 3, "bytes", "opt"),
        ("stats", 5, "XStat", "rep"),
        ("child_id", 6, "int64", "rep"),
    ],
    "XStatMetadata": [
        ("id", 1, "int64", "opt"),
        ("name", 2, "string", "opt"),
        ("description", 3, "string", "opt"),
    ],
}

# The same XSpace with each line's events left as bytes (`classes()["bulk.XSpace"]`): the wire
# format of a message and of bytes is one, so the reader takes every event's bytes from the
# parser and decodes them in bulk (jaxperf.read.wire), never one message object per event.
BULK = "bulk"
_XPLANE_BULK = {name: [(f[0], f[1], "bytes", f[3]) if (name, f[0]) == ("XLine", "events") else f
                       for f in fields]
                for name, fields in _XPLANE.items() if name != "XEvent"}

_HLO = {
    "HloProto": [("hlo_module", 1, "HloModuleProto", "opt")],
    "HloModuleProto": [
        ("name", 1, "string", "opt"),
        ("entry_computation_name", 2, "string", "opt"),
        ("computations", 3, "HloComputationProto", "rep"),
        ("id", 5, "int64", "opt"),
        ("entry_computation_id", 6, "int64", "opt"),
        ("schedule", 7, "HloScheduleProto", "opt"),
        ("stack_frame_index", 17, "StackFrameIndexProto", "opt"),
        ("host_program_shape", 4, "ProgramShapeProto", "opt"),
        ("input_output_alias", 8, "HloInputOutputAliasProto", "opt"),
        ("buffer_donor", 18, "HloBufferDonorProto", "opt"),
        ("frontend_attributes", 19, "FrontendAttributes", "opt"),
    ],
    "HloComputationProto": [
        ("name", 1, "string", "opt"),
        ("instructions", 2, "HloInstructionProto", "rep"),
        ("id", 5, "int64", "opt"),
        ("root_id", 6, "int64", "opt"),
        ("is_fusion_computation", 7, "bool", "opt"),
        ("execution_thread", 8, "string", "opt"),
        ("program_shape", 4, "ProgramShapeProto", "opt"),
    ],
    "HloInstructionProto": [
        ("name", 1, "string", "opt"),
        ("opcode", 2, "string", "opt"),
        ("shape", 3, "ShapeProto", "opt"),
        ("metadata", 7, "OpMetadata", "opt"),
        ("parameter_number", 9, "int64", "opt"),
        ("fusion_kind", 11, "string", "opt"),
        ("tuple_index", 13, "int64", "opt"),
        ("dimensions", 14, "int64", "rep"),
        ("window", 15, "Window", "opt"),
        ("convolution_dimension_numbers", 16, "ConvolutionDimensionNumbers", "opt"),
        ("channel_id", 26, "int64", "opt"),
        ("custom_call_target", 28, "string", "opt"),
        ("dot_dimension_numbers", 30, "DotDimensionNumbers", "opt"),
        ("id", 35, "int64", "opt"),
        ("operand_ids", 36, "int64", "rep"),
        ("control_predecessor_ids", 37, "int64", "rep"),
        ("called_computation_ids", 38, "int64", "rep"),
        ("backend_config", 43, "bytes", "opt"),
        ("feature_group_count", 50, "int64", "opt"),
        ("batch_group_count", 58, "int64", "opt"),
        ("async_execution_thread", 79, "string", "opt"),
        ("literal", 8, "LiteralProto", "opt"),
        ("slice_dimensions", 17, "SliceDimensions", "rep"),
        ("exponent_bits", 18, "int32", "opt"),
        ("mantissa_bits", 19, "int32", "opt"),
        ("dynamic_slice_sizes", 20, "int64", "rep"),
        ("padding_config", 21, "PaddingConfig", "opt"),
        ("outfeed_config", 22, "bytes", "opt"),
        ("distribution", 23, "int32", "opt"),  # enum RandomDistribution
        ("epsilon", 24, "float", "opt"),
        ("feature_index", 25, "int64", "opt"),
        ("infeed_config", 27, "bytes", "opt"),
        ("outfeed_shape", 29, "ShapeProto", "opt"),
        ("fft_type", 31, "int32", "opt"),  # enum FftType
        ("fft_length", 32, "int64", "rep"),
        ("gather_dimension_numbers", 33, "GatherDimensionNumbers", "opt"),
        ("gather_slice_sizes", 34, "int64", "rep"),
        ("sharding", 40, "OpSharding", "opt"),
        ("is_host_transfer", 47, "bool", "opt"),
        ("scatter_dimension_numbers", 48, "ScatterDimensionNumbers", "opt"),
        ("replica_groups", 49, "ReplicaGroup", "rep"),
        ("precision_config", 51, "PrecisionConfig", "opt"),
        ("source_target_pairs", 52, "SourceTarget", "rep"),
        ("constrain_layout", 56, "bool", "opt"),
        ("operand_shapes_with_layout", 57, "ShapeProto", "rep"),
        ("triangular_solve_options", 59, "TriangularSolveOptions", "opt"),
        ("is_stable", 60, "bool", "opt"),
        ("parameter_replication", 61, "ParameterReplication", "opt"),
        ("cholesky_options", 62, "CholeskyOptions", "opt"),
        ("comparison_direction", 63, "string", "opt"),
        ("custom_call_has_side_effect", 65, "bool", "opt"),
        ("delta", 66, "int64", "opt"),
        ("indices_are_sorted", 67, "bool", "opt"),
        ("frontend_attributes", 68, "FrontendAttributes", "opt"),
        ("unique_indices", 69, "bool", "opt"),
        ("rng_algorithm", 70, "int32", "opt"),  # enum RandomAlgorithm
        ("use_global_device_ids", 71, "bool", "opt"),
        ("comparison_type", 72, "string", "opt"),
        ("output_operand_aliasing", 74, "OutputOperandAliasing", "rep"),
        ("custom_call_schedule", 76, "int32", "opt"),  # enum CustomCallSchedule
        ("custom_call_api_version", 77, "int32", "opt"),  # enum CustomCallApiVersion
        ("cross_program_prefetch_index", 80, "int32",
         ("oneof", "optional_cross_program_prefetch_index")),
        ("k", 81, "int64", "opt"),
        ("largest", 85, "bool", "opt"),
        ("collective_device_list", 87, "CollectiveDeviceListProto", "opt"),
        ("is_composite", 89, "bool", "opt"),
        ("ragged_dot_dimension_numbers", 90, "RaggedDotDimensionNumbers", "opt"),
    ],
    "HloScheduleProto": [
        ("sequences", 1, None, ("map", "int64", "InstructionSequence")),
    ],
    "InstructionSequence": [("instruction_ids", 1, "int64", "rep")],
    "StackFrameIndexProto": [
        ("file_names", 1, "string", "rep"),
        ("function_names", 2, "string", "rep"),
        ("file_locations", 3, "FileLocation", "rep"),
        ("stack_frames", 4, "StackFrame", "rep"),
    ],
    "FileLocation": [
        ("file_name_id", 1, "int32", "opt"),
        ("function_name_id", 2, "int32", "opt"),
        ("line", 3, "int32", "opt"),
        ("column", 4, "int32", "opt"),
        ("end_line", 5, "int32", "opt"),
        ("end_column", 6, "int32", "opt"),
    ],
    "StackFrame": [
        ("file_location_id", 1, "int32", "opt"),
        ("parent_frame_id", 2, "int32", "opt"),
    ],
    "OpMetadata": [
        ("op_type", 1, "string", "opt"),
        ("op_name", 2, "string", "opt"),
        ("source_file", 3, "string", "opt"),
        ("source_line", 4, "int32", "opt"),
        ("deduplicated_name", 12, "string", "opt"),
        ("stack_frame_id", 15, "int32", "opt"),
        ("scheduling_name", 16, "string", "opt"),
        ("source_end_line", 17, "int32", "opt"),
        ("source_column", 18, "int32", "opt"),
        ("source_end_column", 19, "int32", "opt"),
    ],
    # element_type is the PrimitiveType enum on the wire (a varint): read here as int32 so that
    # values newer than this file stay readable. Names: PRIMITIVE_TYPES below.
    "ShapeProto": [
        ("element_type", 2, "int32", "opt"),
        ("dimensions", 3, "int64", "rep"),
        ("tuple_shapes", 4, "ShapeProto", "rep"),
        ("is_dynamic_dimension", 6, "bool", "rep"),
        ("layout", 5, "LayoutProto", "opt"),
    ],
    "LayoutProto": [
        ("minor_to_major", 1, "int64", "rep"),
        ("tiles", 6, "TileProto", "rep"),
        ("element_size_in_bits", 7, "int64", "opt"),
        ("memory_space", 8, "int64", "opt"),
        ("index_primitive_type", 11, "int32", "opt"),
        ("pointer_primitive_type", 12, "int32", "opt"),
        ("dynamic_shape_metadata_prefix_bytes", 15, "int64", "opt"),
        ("tail_padding_alignment_in_elements", 16, "int64", "opt"),
        ("split_configs", 17, "SplitConfigProto", "rep"),
    ],
    "TileProto": [("dimensions", 1, "int64", "rep")],
    "SplitConfigProto": [
        ("dimension", 1, "int64", "opt"),
        ("split_indices", 2, "int64", "rep"),
    ],
    "ProgramShapeProto": [
        ("parameters", 1, "ShapeProto", "rep"),
        ("result", 2, "ShapeProto", "opt"),
        ("parameter_names", 3, "string", "rep"),
    ],
    # HloInstructionProto.SliceDimensions in XLA (a nested message there).
    "SliceDimensions": [
        ("start", 1, "int64", "opt"),
        ("limit", 2, "int64", "opt"),
        ("stride", 3, "int64", "opt"),
    ],
    "PaddingConfig": [("dimensions", 1, "PaddingConfigDimension", "rep")],
    # PaddingConfig.PaddingConfigDimension in XLA.
    "PaddingConfigDimension": [
        ("edge_padding_low", 1, "int64", "opt"),
        ("edge_padding_high", 2, "int64", "opt"),
        ("interior_padding", 3, "int64", "opt"),
    ],
    "GatherDimensionNumbers": [
        ("offset_dims", 1, "int64", "rep"),
        ("collapsed_slice_dims", 2, "int64", "rep"),
        ("start_index_map", 3, "int64", "rep"),
        ("index_vector_dim", 4, "int64", "opt"),
        ("operand_batching_dims", 5, "int64", "rep"),
        ("start_indices_batching_dims", 6, "int64", "rep"),
    ],
    "ScatterDimensionNumbers": [
        ("update_window_dims", 1, "int64", "rep"),
        ("inserted_window_dims", 2, "int64", "rep"),
        ("scatter_dims_to_operand_dims", 3, "int64", "rep"),
        ("index_vector_dim", 4, "int64", "opt"),
        ("input_batching_dims", 5, "int64", "rep"),
        ("scatter_indices_batching_dims", 6, "int64", "rep"),
    ],
    "RaggedDotDimensionNumbers": [
        ("dot_dimension_numbers", 1, "DotDimensionNumbers", "opt"),
        ("lhs_ragged_dimensions", 2, "int64", "rep"),
        ("rhs_group_dimensions", 3, "int64", "rep"),
    ],
    "PrecisionConfig": [
        ("operand_precision", 1, "int32", "rep"),  # enum PrecisionConfig.Precision
        ("algorithm", 2, "int32", "opt"),  # enum PrecisionConfig.Algorithm
    ],
    "OpSharding": [
        ("type", 1, "int32", "opt"),  # enum OpSharding.Type
        ("tile_shape", 2, "ShapeProto", "opt"),
        ("tile_assignment_dimensions", 3, "int64", "rep"),
        ("tile_assignment_devices", 4, "int64", "rep"),
        ("tuple_shardings", 5, "OpSharding", "rep"),
        ("replicate_on_last_tile_dim", 6, "bool", "opt"),
        ("last_tile_dims", 8, "int32", "rep"),  # enum OpSharding.Type
        ("iota_reshape_dims", 9, "int64", "rep"),
        ("iota_transpose_perm", 10, "int32", "rep"),
        ("is_shard_group", 11, "bool", "opt"),
        ("shard_group_id", 12, "int64", "opt"),
        ("shard_group_type", 13, "int32", "opt"),  # enum OpSharding.ShardGroupType
    ],
    "ReplicaGroup": [("replica_ids", 1, "int64", "rep")],
    "IotaReplicaGroupListProto": [
        ("num_replica_groups", 1, "int64", "opt"),
        ("num_devices_per_group", 2, "int64", "opt"),
        ("iota_reshape_dims", 3, "int64", "rep"),
        ("iota_transpose_perm", 4, "int32", "rep"),
    ],
    "CollectiveDeviceListProto": [
        ("replica_groups", 1, "ReplicaGroup", "rep"),
        ("iota_replica_group_list", 2, "IotaReplicaGroupListProto", "opt"),
    ],
    "SourceTarget": [
        ("source", 1, "int64", "opt"),
        ("target", 2, "int64", "opt"),
    ],
    "TriangularSolveOptions": [
        ("left_side", 1, "bool", "opt"),
        ("lower", 2, "bool", "opt"),
        ("unit_diagonal", 3, "bool", "opt"),
        ("transpose_a", 4, "int32", "opt"),  # enum TriangularSolveOptions.Transpose
    ],
    "CholeskyOptions": [("lower", 1, "bool", "opt")],
    "ParameterReplication": [("replicated_at_leaf_buffers", 1, "bool", "rep")],
    "OutputOperandAliasing": [
        ("output_shape_index", 1, "int64", "rep"),
        ("operand_index", 2, "int64", "opt"),
        ("operand_shape_index", 3, "int64", "rep"),
    ],
    "FrontendAttributes": [("map", 1, None, ("map", "string", "string"))],
    "HloInputOutputAliasProto": [("entries", 1, "AliasEntryProto", "rep")],
    # HloInputOutputAliasProto.AliasEntryProto in XLA.
    "AliasEntryProto": [
        ("output_shape_index", 1, "int64", "rep"),
        ("parameter_number", 2, "int64", "opt"),
        ("parameter_shape_index", 3, "int64", "rep"),
        ("kind", 4, "int32", "opt"),  # enum Kind: 1 may-alias, 2 must-alias
    ],
    "HloBufferDonorProto": [("entries", 1, "BufferDonorEntryProto", "rep")],
    # HloBufferDonorProto.BufferDonorEntryProto in XLA.
    "BufferDonorEntryProto": [
        ("parameter_number", 1, "int64", "opt"),
        ("parameter_shape_index", 2, "int64", "rep"),
    ],
    # Constants' values. 16-bit and narrower types are little-endian bytes.
    "LiteralProto": [
        ("shape", 1, "ShapeProto", "opt"),
        ("preds", 2, "bool", "rep"),
        ("u8s", 3, "bytes", "opt"),
        ("s32s", 4, "int32", "rep"),
        ("s64s", 5, "int64", "rep"),
        ("u32s", 6, "uint32", "rep"),
        ("u64s", 7, "uint64", "rep"),
        ("f32s", 8, "float", "rep"),
        ("f64s", 9, "double", "rep"),
        ("tuple_literals", 10, "LiteralProto", "rep"),
        ("f16s", 11, "bytes", "opt"),
        ("c64s", 12, "float", "rep"),
        ("bf16s", 13, "bytes", "opt"),
        ("s8s", 15, "bytes", "opt"),
        ("u16s", 16, "bytes", "opt"),
        ("s16s", 17, "bytes", "opt"),
        ("c128s", 18, "double", "rep"),
        ("f8e5m2s", 19, "bytes", "opt"),
        ("f8e4m3fns", 20, "bytes", "opt"),
        ("s4s", 21, "bytes", "opt"),
        ("u4s", 22, "bytes", "opt"),
        ("f8e4m3b11fnuzs", 23, "bytes", "opt"),
        ("f8e5m2fnuzs", 24, "bytes", "opt"),
        ("f8e4m3fnuzs", 25, "bytes", "opt"),
        ("s2s", 26, "bytes", "opt"),
        ("u2s", 27, "bytes", "opt"),
        ("f8e4m3s", 28, "bytes", "opt"),
        ("f8e3m4s", 29, "bytes", "opt"),
        ("s1s", 30, "bytes", "opt"),
        ("u1s", 31, "bytes", "opt"),
        ("f4e2m1fns", 32, "bytes", "opt"),
        ("f8e8m0fnus", 33, "bytes", "opt"),
    ],
    "DotDimensionNumbers": [
        ("lhs_contracting_dimensions", 1, "int64", "rep"),
        ("rhs_contracting_dimensions", 2, "int64", "rep"),
        ("lhs_batch_dimensions", 3, "int64", "rep"),
        ("rhs_batch_dimensions", 4, "int64", "rep"),
    ],
    "ConvolutionDimensionNumbers": [
        ("kernel_input_feature_dimension", 3, "int64", "opt"),
        ("kernel_output_feature_dimension", 4, "int64", "opt"),
        ("kernel_spatial_dimensions", 6, "int64", "rep"),
        ("input_batch_dimension", 7, "int64", "opt"),
        ("input_feature_dimension", 8, "int64", "opt"),
        ("output_batch_dimension", 9, "int64", "opt"),
        ("output_feature_dimension", 10, "int64", "opt"),
        ("input_spatial_dimensions", 11, "int64", "rep"),
        ("output_spatial_dimensions", 12, "int64", "rep"),
    ],
    "Window": [("dimensions", 1, "WindowDimension", "rep")],
    "WindowDimension": [
        ("size", 1, "int64", "opt"),
        ("stride", 2, "int64", "opt"),
        ("padding_low", 3, "int64", "opt"),
        ("padding_high", 4, "int64", "opt"),
        ("window_dilation", 5, "int64", "opt"),
        ("base_dilation", 6, "int64", "opt"),
        ("window_reversal", 7, "bool", "opt"),
    ],
}

# xla.PrimitiveType numbers -> names (xla_data.proto).
PRIMITIVE_TYPES = {
    0: "invalid", 1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16",
    8: "u32", 9: "u64", 10: "f16", 11: "f32", 12: "f64", 13: "tuple", 14: "opaque",
    15: "c64", 16: "bf16", 17: "token", 18: "c128", 19: "f8e5m2", 20: "f8e4m3fn", 21: "s4",
    22: "u4", 23: "f8e4m3b11fnuz", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 26: "s2", 27: "u2",
    28: "f8e4m3", 29: "f8e3m4", 30: "s1", 31: "u1", 32: "f4e2m1fn", 33: "f8e8m0fnu",
    34: "buffer",
}

# Bits per element of each array type (for byte counts from shapes); tuple/token/opaque: none.
PRIMITIVE_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16,
    "f32": 32, "f64": 64, "c64": 64, "c128": 128, "f8e5m2": 8, "f8e4m3fn": 8,
    "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f8e4m3": 8, "f8e3m4": 8,
    "f4e2m1fn": 4, "f8e8m0fnu": 8,
}


def dtype_name(shape) -> str:
    """A ShapeProto's element type by name (a tuple's first element's)."""
    while shape.tuple_shapes:
        shape = shape.tuple_shapes[0]
    return PRIMITIVE_TYPES.get(shape.element_type, f"type{shape.element_type}")


def nbytes(shape) -> int:
    """Bytes of a ShapeProto's array (summed over a tuple); token/opaque count 0."""
    if shape.tuple_shapes:
        return sum(nbytes(s) for s in shape.tuple_shapes)
    bits = PRIMITIVE_BITS.get(dtype_name(shape))
    n = 1
    for d in shape.dimensions:
        n *= int(d)
    return 0 if bits is None else (n * bits + 7) // 8


class MissingDependency(ImportError):
    """The protobuf runtime is not installed (a missing package: exit 3 in every step)."""


def _build(pool, descriptor_pb2, package: str, messages: dict) -> None:
    fd = descriptor_pb2.FileDescriptorProto(name=f"{package}.subset.proto", package=package,
                                            syntax="proto3")
    scalar = {
        "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
        "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
        "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
        "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
        "float": descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
        "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
        "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
        "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    }
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    repeated = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

    def set_type(field, type_name):
        if type_name in scalar:
            field.type = scalar[type_name]
        else:
            field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
            field.type_name = f".{package}.{type_name}"

    for msg_name, fields in messages.items():
        msg = fd.message_type.add(name=msg_name)
        oneofs: dict[str, int] = {}
        for name, number, type_name, label in fields:
            field = msg.field.add(name=name, number=number)
            if isinstance(label, tuple) and label[0] == "map":
                _, key_type, value_type = label
                entry_name = "".join(p.capitalize() for p in name.split("_")) + "Entry"
                entry = msg.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                key = entry.field.add(name="key", number=1, label=optional)
                set_type(key, key_type)
                value = entry.field.add(name="value", number=2, label=optional)
                set_type(value, value_type)
                field.label = repeated
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                field.type_name = f".{package}.{msg_name}.{entry_name}"
                continue
            set_type(field, type_name)
            if label == "rep":
                field.label = repeated
            else:
                field.label = optional
                if isinstance(label, tuple) and label[0] == "oneof":
                    if label[1] not in oneofs:
                        oneofs[label[1]] = len(msg.oneof_decl)
                        msg.oneof_decl.add(name=label[1])
                    field.oneof_index = oneofs[label[1]]
    pool.Add(fd)


@cache
def classes():
    """Return a dict of message name -> generated class (XSpace and the HLO subset)."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as exc:  # pragma: no cover - exercised by the exit-code test
        raise MissingDependency(
            "the protobuf package is not installed: pip install -r requirements.txt") from exc
    pool = descriptor_pool.DescriptorPool()
    packages = (("tensorflow.profiler", _XPLANE), ("xla", _HLO), (BULK, _XPLANE_BULK))
    for package, messages in packages:
        _build(pool, descriptor_pb2, package, messages)
    out = {}
    for package, messages in packages:
        for name in messages:
            out[name if package != BULK else f"{BULK}.{name}"] = \
                message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
    return out
