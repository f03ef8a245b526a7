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

import math
from functools import cache

# Each message's fields as its .proto declares them, "; " between two: `[repeated] type name =
# number` (type: a scalar's or a message's name), `oneof:<oneof> type name = number` for a field
# of a oneof, `map<key type,value type> name = number`. An enum field is read as int32 (its
# number), the enum named in a comment.
_XPLANE = {
    "XSpace": "repeated XPlane planes = 1; repeated string errors = 2; "
              "repeated string warnings = 3; repeated string hostnames = 4",
    "XPlane": "int64 id = 1; string name = 2; repeated XLine lines = 3; "
              "map<int64,XEventMetadata> event_metadata = 4; "
              "map<int64,XStatMetadata> stat_metadata = 5; repeated XStat stats = 6",
    "XLine": "int64 id = 1; int64 display_id = 10; string name = 2; string display_name = 11; "
             "int64 timestamp_ns = 3; int64 duration_ps = 9; repeated XEvent events = 4",
    "XEvent": "int64 metadata_id = 1; oneof:data int64 offset_ps = 2; "
              "oneof:data int64 num_occurrences = 5; int64 duration_ps = 3; "
              "repeated XStat stats = 4",
    "XStat": "int64 metadata_id = 1; oneof:value double double_value = 2; "
             "oneof:value uint64 uint64_value = 3; oneof:value int64 int64_value = 4; "
             "oneof:value string str_value = 5; oneof:value bytes bytes_value = 6; "
             "oneof:value uint64 ref_value = 7",
    "XEventMetadata": "int64 id = 1; string name = 2; string display_name = 4; bytes metadata = 3; "
                      "repeated XStat stats = 5; repeated int64 child_id = 6",
    "XStatMetadata": "int64 id = 1; string name = 2; string description = 3",
}

# The same XSpace with each line's events left as bytes (`classes()["bulk.XSpace"]`): the wire
# format of a message and of bytes is one, so the reader takes every event's bytes from the
# parser and decodes them in bulk (jaxperf.read.wire), never one message object per event.
BULK = "bulk"
_XPLANE_BULK = {name: fields.replace("repeated XEvent events", "repeated bytes events")
                for name, fields in _XPLANE.items() if name != "XEvent"}

_HLO = {
    "HloProto": "HloModuleProto hlo_module = 1",
    "HloModuleProto": "string name = 1; string entry_computation_name = 2; "
                      "repeated HloComputationProto computations = 3; int64 id = 5; "
                      "int64 entry_computation_id = 6; HloScheduleProto schedule = 7; "
                      "StackFrameIndexProto stack_frame_index = 17; "
                      "ProgramShapeProto host_program_shape = 4; "
                      "HloInputOutputAliasProto input_output_alias = 8; "
                      "HloBufferDonorProto buffer_donor = 18; "
                      "FrontendAttributes frontend_attributes = 19",
    "HloComputationProto": "string name = 1; repeated HloInstructionProto instructions = 2; "
                           "int64 id = 5; int64 root_id = 6; bool is_fusion_computation = 7; "
                           "string execution_thread = 8; ProgramShapeProto program_shape = 4",
    # enums: distribution RandomDistribution, fft_type FftType, rng_algorithm RandomAlgorithm,
    # custom_call_schedule CustomCallSchedule, custom_call_api_version CustomCallApiVersion.
    "HloInstructionProto": "string name = 1; string opcode = 2; ShapeProto shape = 3; "
                           "OpMetadata metadata = 7; int64 parameter_number = 9; "
                           "string fusion_kind = 11; int64 tuple_index = 13; "
                           "repeated int64 dimensions = 14; Window window = 15; "
                           "ConvolutionDimensionNumbers convolution_dimension_numbers = 16; "
                           "int64 channel_id = 26; string custom_call_target = 28; "
                           "DotDimensionNumbers dot_dimension_numbers = 30; int64 id = 35; "
                           "repeated int64 operand_ids = 36; "
                           "repeated int64 control_predecessor_ids = 37; "
                           "repeated int64 called_computation_ids = 38; bytes backend_config = 43; "
                           "int64 feature_group_count = 50; int64 batch_group_count = 58; "
                           "string async_execution_thread = 79; LiteralProto literal = 8; "
                           "repeated SliceDimensions slice_dimensions = 17; "
                           "int32 exponent_bits = 18; int32 mantissa_bits = 19; "
                           "repeated int64 dynamic_slice_sizes = 20; "
                           "PaddingConfig padding_config = 21; bytes outfeed_config = 22; "
                           "int32 distribution = 23; float epsilon = 24; int64 feature_index = 25; "
                           "bytes infeed_config = 27; ShapeProto outfeed_shape = 29; "
                           "int32 fft_type = 31; repeated int64 fft_length = 32; "
                           "GatherDimensionNumbers gather_dimension_numbers = 33; "
                           "repeated int64 gather_slice_sizes = 34; OpSharding sharding = 40; "
                           "bool is_host_transfer = 47; "
                           "ScatterDimensionNumbers scatter_dimension_numbers = 48; "
                           "repeated ReplicaGroup replica_groups = 49; "
                           "PrecisionConfig precision_config = 51; "
                           "repeated SourceTarget source_target_pairs = 52; "
                           "bool constrain_layout = 56; "
                           "repeated ShapeProto operand_shapes_with_layout = 57; "
                           "TriangularSolveOptions triangular_solve_options = 59; "
                           "bool is_stable = 60; ParameterReplication parameter_replication = 61; "
                           "CholeskyOptions cholesky_options = 62; "
                           "string comparison_direction = 63; "
                           "bool custom_call_has_side_effect = 65; int64 delta = 66; "
                           "bool indices_are_sorted = 67; "
                           "FrontendAttributes frontend_attributes = 68; bool unique_indices = 69; "
                           "int32 rng_algorithm = 70; bool use_global_device_ids = 71; "
                           "string comparison_type = 72; "
                           "repeated OutputOperandAliasing output_operand_aliasing = 74; "
                           "int32 custom_call_schedule = 76; int32 custom_call_api_version = 77; "
                           "oneof:optional_cross_program_prefetch_index "
                           "int32 cross_program_prefetch_index = 80; int64 k = 81; "
                           "bool largest = 85; "
                           "CollectiveDeviceListProto collective_device_list = 87; "
                           "bool is_composite = 89; "
                           "RaggedDotDimensionNumbers ragged_dot_dimension_numbers = 90",
    "HloScheduleProto": "map<int64,InstructionSequence> sequences = 1",
    "InstructionSequence": "repeated int64 instruction_ids = 1",
    "StackFrameIndexProto": "repeated string file_names = 1; repeated string function_names = 2; "
                            "repeated FileLocation file_locations = 3; "
                            "repeated StackFrame stack_frames = 4",
    "FileLocation": "int32 file_name_id = 1; int32 function_name_id = 2; int32 line = 3; "
                    "int32 column = 4; int32 end_line = 5; int32 end_column = 6",
    "StackFrame": "int32 file_location_id = 1; int32 parent_frame_id = 2",
    "OpMetadata": "string op_type = 1; string op_name = 2; string source_file = 3; "
                  "int32 source_line = 4; string deduplicated_name = 12; "
                  "int32 stack_frame_id = 15; string scheduling_name = 16; "
                  "int32 source_end_line = 17; int32 source_column = 18; "
                  "int32 source_end_column = 19",
    # element_type is the PrimitiveType enum on the wire (a varint): read here as int32 so that
    # values newer than this file stay readable. Names: PRIMITIVE_TYPES below.
    "ShapeProto": "int32 element_type = 2; repeated int64 dimensions = 3; "
                  "repeated ShapeProto tuple_shapes = 4; repeated bool is_dynamic_dimension = 6; "
                  "LayoutProto layout = 5",
    "LayoutProto": "repeated int64 minor_to_major = 1; repeated TileProto tiles = 6; "
                   "int64 element_size_in_bits = 7; int64 memory_space = 8; "
                   "int32 index_primitive_type = 11; int32 pointer_primitive_type = 12; "
                   "int64 dynamic_shape_metadata_prefix_bytes = 15; "
                   "int64 tail_padding_alignment_in_elements = 16; "
                   "repeated SplitConfigProto split_configs = 17",
    "TileProto": "repeated int64 dimensions = 1",
    "SplitConfigProto": "int64 dimension = 1; repeated int64 split_indices = 2",
    "ProgramShapeProto": "repeated ShapeProto parameters = 1; ShapeProto result = 2; "
                         "repeated string parameter_names = 3",
    # HloInstructionProto.SliceDimensions in XLA (a nested message there).
    "SliceDimensions": "int64 start = 1; int64 limit = 2; int64 stride = 3",
    "PaddingConfig": "repeated PaddingConfigDimension dimensions = 1",
    # PaddingConfig.PaddingConfigDimension in XLA.
    "PaddingConfigDimension": "int64 edge_padding_low = 1; int64 edge_padding_high = 2; "
                              "int64 interior_padding = 3",
    "GatherDimensionNumbers": "repeated int64 offset_dims = 1; "
                              "repeated int64 collapsed_slice_dims = 2; "
                              "repeated int64 start_index_map = 3; int64 index_vector_dim = 4; "
                              "repeated int64 operand_batching_dims = 5; "
                              "repeated int64 start_indices_batching_dims = 6",
    "ScatterDimensionNumbers": "repeated int64 update_window_dims = 1; "
                               "repeated int64 inserted_window_dims = 2; "
                               "repeated int64 scatter_dims_to_operand_dims = 3; "
                               "int64 index_vector_dim = 4; "
                               "repeated int64 input_batching_dims = 5; "
                               "repeated int64 scatter_indices_batching_dims = 6",
    "RaggedDotDimensionNumbers": "DotDimensionNumbers dot_dimension_numbers = 1; "
                                 "repeated int64 lhs_ragged_dimensions = 2; "
                                 "repeated int64 rhs_group_dimensions = 3",
    # enums: operand_precision PrecisionConfig.Precision, algorithm PrecisionConfig.Algorithm.
    "PrecisionConfig": "repeated int32 operand_precision = 1; int32 algorithm = 2",
    # enums: type and last_tile_dims OpSharding.Type, shard_group_type OpSharding.ShardGroupType.
    "OpSharding": "int32 type = 1; ShapeProto tile_shape = 2; "
                  "repeated int64 tile_assignment_dimensions = 3; "
                  "repeated int64 tile_assignment_devices = 4; "
                  "repeated OpSharding tuple_shardings = 5; bool replicate_on_last_tile_dim = 6; "
                  "repeated int32 last_tile_dims = 8; repeated int64 iota_reshape_dims = 9; "
                  "repeated int32 iota_transpose_perm = 10; bool is_shard_group = 11; "
                  "int64 shard_group_id = 12; int32 shard_group_type = 13",
    "ReplicaGroup": "repeated int64 replica_ids = 1",
    "IotaReplicaGroupListProto": "int64 num_replica_groups = 1; int64 num_devices_per_group = 2; "
                                 "repeated int64 iota_reshape_dims = 3; "
                                 "repeated int32 iota_transpose_perm = 4",
    "CollectiveDeviceListProto": "repeated ReplicaGroup replica_groups = 1; "
                                 "IotaReplicaGroupListProto iota_replica_group_list = 2",
    "SourceTarget": "int64 source = 1; int64 target = 2",
    # enum: transpose_a TriangularSolveOptions.Transpose.
    "TriangularSolveOptions": "bool left_side = 1; bool lower = 2; bool unit_diagonal = 3; "
                              "int32 transpose_a = 4",
    "CholeskyOptions": "bool lower = 1",
    "ParameterReplication": "repeated bool replicated_at_leaf_buffers = 1",
    "OutputOperandAliasing": "repeated int64 output_shape_index = 1; int64 operand_index = 2; "
                             "repeated int64 operand_shape_index = 3",
    "FrontendAttributes": "map<string,string> map = 1",
    "HloInputOutputAliasProto": "repeated AliasEntryProto entries = 1",
    # HloInputOutputAliasProto.AliasEntryProto in XLA; enum: kind Kind (1 may-alias, 2 must-alias).
    "AliasEntryProto": "repeated int64 output_shape_index = 1; int64 parameter_number = 2; "
                       "repeated int64 parameter_shape_index = 3; int32 kind = 4",
    "HloBufferDonorProto": "repeated BufferDonorEntryProto entries = 1",
    # HloBufferDonorProto.BufferDonorEntryProto in XLA.
    "BufferDonorEntryProto": "int64 parameter_number = 1; repeated int64 parameter_shape_index = 2",
    # Constants' values. 16-bit and narrower types are little-endian bytes.
    "LiteralProto": "ShapeProto shape = 1; repeated bool preds = 2; bytes u8s = 3; "
                    "repeated int32 s32s = 4; repeated int64 s64s = 5; repeated uint32 u32s = 6; "
                    "repeated uint64 u64s = 7; repeated float f32s = 8; repeated double f64s = 9; "
                    "repeated LiteralProto tuple_literals = 10; bytes f16s = 11; "
                    "repeated float c64s = 12; bytes bf16s = 13; bytes s8s = 15; bytes u16s = 16; "
                    "bytes s16s = 17; repeated double c128s = 18; bytes f8e5m2s = 19; "
                    "bytes f8e4m3fns = 20; bytes s4s = 21; bytes u4s = 22; "
                    "bytes f8e4m3b11fnuzs = 23; bytes f8e5m2fnuzs = 24; bytes f8e4m3fnuzs = 25; "
                    "bytes s2s = 26; bytes u2s = 27; bytes f8e4m3s = 28; bytes f8e3m4s = 29; "
                    "bytes s1s = 30; bytes u1s = 31; bytes f4e2m1fns = 32; bytes f8e8m0fnus = 33",
    "DotDimensionNumbers": "repeated int64 lhs_contracting_dimensions = 1; "
                           "repeated int64 rhs_contracting_dimensions = 2; "
                           "repeated int64 lhs_batch_dimensions = 3; "
                           "repeated int64 rhs_batch_dimensions = 4",
    "ConvolutionDimensionNumbers": "int64 kernel_input_feature_dimension = 3; "
                                   "int64 kernel_output_feature_dimension = 4; "
                                   "repeated int64 kernel_spatial_dimensions = 6; "
                                   "int64 input_batch_dimension = 7; "
                                   "int64 input_feature_dimension = 8; "
                                   "int64 output_batch_dimension = 9; "
                                   "int64 output_feature_dimension = 10; "
                                   "repeated int64 input_spatial_dimensions = 11; "
                                   "repeated int64 output_spatial_dimensions = 12",
    "Window": "repeated WindowDimension dimensions = 1",
    "WindowDimension": "int64 size = 1; int64 stride = 2; int64 padding_low = 3; "
                       "int64 padding_high = 4; int64 window_dilation = 5; "
                       "int64 base_dilation = 6; bool window_reversal = 7",
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
    return 0 if bits is None else (math.prod(shape.dimensions) * bits + 7) // 8


class MissingDependency(ImportError):
    """The protobuf runtime is not installed (a missing package: exit 3 in every step)."""


def _build(pool, descriptor_pb2, package: str, messages: dict) -> None:
    fd = descriptor_pb2.FileDescriptorProto(name=f"{package}.subset.proto", package=package,
                                            syntax="proto3")
    proto = descriptor_pb2.FieldDescriptorProto
    optional = proto.LABEL_OPTIONAL
    scalars = {"int64", "int32", "uint64", "uint32", "float", "double", "string", "bytes", "bool"}

    def set_type(field, type_name):
        if type_name in scalars:
            field.type = getattr(proto, f"TYPE_{type_name.upper()}")
        else:
            field.type = proto.TYPE_MESSAGE
            field.type_name = f".{package}.{type_name}"

    for msg_name, fields in messages.items():
        msg = fd.message_type.add(name=msg_name)
        oneofs: dict[str, int] = {}
        for declaration in fields.split("; "):
            *label, type_name, name, _, number = declaration.split()
            field = msg.field.add(name=name, number=int(number), label=optional)
            if type_name.startswith("map<"):
                entry_name = "".join(p.capitalize() for p in name.split("_")) + "Entry"
                entry = msg.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                key_type, value_type = type_name[4:-1].split(",")
                set_type(entry.field.add(name="key", number=1, label=optional), key_type)
                set_type(entry.field.add(name="value", number=2, label=optional), value_type)
                label, type_name = ["repeated"], f"{msg_name}.{entry_name}"
            set_type(field, type_name)
            if label == ["repeated"]:
                field.label = proto.LABEL_REPEATED
            elif label:
                oneof = label[0].removeprefix("oneof:")
                if oneof not in oneofs:
                    oneofs[oneof] = len(msg.oneof_decl)
                    msg.oneof_decl.add(name=oneof)
                field.oneof_index = oneofs[oneof]
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
    return {name if package != BULK else f"{BULK}.{name}":
            message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for package, messages in packages for name in messages}
