"""What each vendor's tracer writes, for the generator.

ROCm items follow the real AMD captures in ../shared/captures/ (seen). NVIDIA items rest on reading
XLA's CUPTI collector source (`xla/backends/profiler/gpu/cupti_collector.cc`,
`cupti_buffer_events.h`, `cupti_tracer.cc`), not on a real capture; each is marked [source]:
- [source] stream lines are `Stream #<id>(<kinds>)` with kernels listed as `Compute` (the V100
  TensorFlow capture agrees: `Stream #134(Compute)`);
- [source] kernel stats: `correlation_id` (uint64), `scope_range_id` (int64), `context_id` (str
  `$$<n>`), `cuda_graph_id`/`cuda_graph_node_id` (uint64, graph kernels only),
  `theoretical_occupancy_pct` (double), `occupancy_min_grid_size`/`occupancy_suggested_block_size`
  (int64), `kernel_details` (ref, `regs:… static_shared:… dynamic_shared:… grid:… block:…
  occ_pct:…`), `tf_op` (ref), then `hlo_op`, `hlo_module` (ref), `program_id` (int64);
- [source] host launch events are named after the kernel, carry `device_id` (uint64, the
  ordinal), `correlation_id`, `scope_range_id`, `context_id` and no `hlo_*` stats; graph launches
  are `cuGraphLaunch (CudaGraph:<exec id>)` with `cuda_graph_id`;
- [source] memcpys are device events named after their kind (`MemcpyD2D`, `MemcpyD2H`,
  `MemcpyH2D`: cupti_buffer_events.cc AddMemcpyActivityEvent) with `memcpy_details`
  `kind_src:<kind> kind_dst:<kind> size:<n> dest:<device> async:1` (cupti_collector.cc
  CreateXEvent; kinds from GetMemoryKindName: device, pinned, ...), and the annotation's stats
  like kernels (looked up by correlation id);
- [source] the host side of a memcpy/memset is the driver-API callback event: the tracer gives it
  no name (cupti_tracer.cc SetNormalMemcpyEventUponApiExit / SetCuMemsetEventUponApiExit), so the
  collector names it after its type (`MemcpyD2D`, `Memset`: GetTraceEventTypeName), with
  `memcpy_details` `kind_src:unknown kind_dst:unknown size:<n> dest:<ordinal> async:1` (memory
  kinds are not decoded on the API side) or `Memset_details` `kind:unknown num_bytes:<n> async:1`;
  `Scenario.api_launch_names` names them after the driver call instead
  (`cuMemcpyDtoDAsync_v2`, ...), as other CUPTI tracers show them: not what XLA writes;
- [source] a memset's device event is `Memset <CUpti_ActivityMemoryKind number>`
  (cupti_buffer_events.cc AddMemsetActivityEvent) with `Memset_details`; device memory is
  CUPTI's kind 3, so the generator writes `Memset 3`;
- [source] a stream line is named `Stream #<id>(<kinds>)`, the kinds of the events on it
  (cupti_collector.cc GetDeviceXLineName; kernels are `Compute`);
- [source] NCCL kernels are named by NCCL after the collective, its reduction and type
  (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`, ...): NCCL's naming, not XLA's;
- [source] the host API events sit on `Host Threads/<tid>` lines of `/host:CPU` (merged there from
  `/host:CUPTI` by line id), apart from the TraceMe lines, as on ROCm;
- [source] device plane stats add `gpu_device_name` to ROCm's set, with `device_vendor` "Nvidia".
"""

from __future__ import annotations

from dataclasses import dataclass

REF, STR, I64, U64, F64 = "ref", "str", "int64", "uint64", "double"
COPY_ROLES = frozenset({"copy", "copy_d2h", "copy_h2d"})


@dataclass(frozen=True)
class Device:
    vendor: str
    name: str
    clock_rate_khz: int
    cores: int
    memory_bandwidth: int
    memory_size: int
    cc: tuple[int, int]
    peak_flops: float     # for the generator's cost model only
    hbm_bytes_per_s: float


MI300X = Device("AMD", "", 2_100_000, 304, 2_662_400_000_000, 206_141_652_992, (9, 4),
                650e12, 4.0e12)
H100 = Device("Nvidia", "NVIDIA H100 80GB HBM3", 1_980_000, 132, 3_352_320_000_000,
              84_929_216_512, (9, 0), 700e12, 2.8e12)


class Rocm:
    name = "rocm"
    device = MI300X
    stream_suffix = "(Kernel)"
    copy_kernel = "__amd_rocclr_copyBuffer.kd"
    launch_thread_base = 583
    agent_base = 47645   # device_id on host events is an agent number, not the ordinal

    @staticmethod
    def stream_name(stream: int, roles) -> str:
        return f"Stream #{stream}{Rocm.stream_suffix}"

    @staticmethod
    def kernel_name(spec, index: int) -> str:
        if spec.role == "gemm":
            return ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_"
                    f"GRVW8_K1_WG32_8_1_{index % 4}")
        if spec.role == "collective":
            return "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
        if spec.role in COPY_ROLES:
            return Rocm.copy_kernel
        if spec.role == "memset":
            return "__amd_rocclr_fillBufferAligned.kd"
        if spec.name == "im2col":
            return "Im3d2Col.kd"
        if spec.name == "splitk_reduce":
            return "Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_PostGSU8_VW1"
        return spec.name + ".kd"

    @staticmethod
    def launch_name(spec, api_names: bool = False) -> str:
        if spec.role == "gemm":
            return "hipExtModuleLaunchKernel"
        if spec.role == "copy":
            return "hipMemcpyDtoDAsync"
        if spec.role == "copy_d2h":
            return "hipMemcpyDtoHAsync"
        if spec.role == "copy_h2d":
            return "hipMemcpyHtoDAsync"
        if spec.role == "memset":
            return "hipMemsetAsync"
        if spec.role == "collective":
            return "hipLaunchKernel"
        return "hipModuleLaunchKernel"

    graph_launch_name = "hipGraphLaunch"

    @staticmethod
    def kernel_details(spec) -> str:
        return " grid:256,1,1 block:256,1,1 private_mem:0 group_mem:0 occ_pct:0"

    @staticmethod
    def device_id(ordinal: int) -> int:
        return Rocm.agent_base + ordinal

    @staticmethod
    def device_stats(dev: Device) -> list:
        return [("clock_rate", I64, dev.clock_rate_khz), ("compute_cap_major", I64, dev.cc[0]),
                ("compute_cap_minor", I64, dev.cc[1]), ("core_count", I64, dev.cores),
                ("device_vendor", STR, dev.vendor),
                ("memory_bandwidth", U64, dev.memory_bandwidth),
                ("memory_size", U64, dev.memory_size)]

    @staticmethod
    def labels(k) -> list:
        """The annotation's stats; a copy's carries `prefix` instead of `name` (gemm capture)."""
        out = [("hlo_module", REF, k.module), ("hlo_op", REF, k.hlo_op_label),
               ("program_id", I64, k.program_id), ("tf_op", REF, "XlaModule:")]
        if k.spec.role in COPY_ROLES:
            return out + [("prefix", REF, "args[0]")]
        return out + [("name", REF, k.op_name or "kernel")]

    @staticmethod
    def gpu_kernel_stats(k, labels: bool) -> list:
        """Stats of a kernel event; k is the generator's planted kernel."""
        out = [("correlation_id", U64, k.correlation_id),
               ("kernel_details", REF, Rocm.kernel_details(k.spec))]
        return out + (Rocm.labels(k) if labels else [])

    @staticmethod
    def launch_stats(k, labels: bool, ordinal: int) -> list:
        out = [("correlation_id", U64, k.correlation_id), ("device_id", U64,
                                                            Rocm.device_id(ordinal))]
        if k.spec.role in COPY_ROLES:
            out.append(("memcpy_details", REF, "kind:Unknown size:0 dest:512 async:1"))
        return out + (Rocm.labels(k) if labels else [])

    @staticmethod
    def graph_stats(graph_id: int) -> list:
        return []

    memcpy_as_event = False


# NVIDIA's names of the device events that are not kernels, by the generator's role
# (cupti_buffer_events.cc AddMemcpyActivityEvent / GetTraceEventTypeName), and of their host API
# callbacks: type-named as XLA's tracer writes them, or driver-call-named (api_launch_names).
NV_MEMCPY = {"copy": "MemcpyD2D", "copy_d2h": "MemcpyD2H", "copy_h2d": "MemcpyH2D"}
NV_API = {"copy": "cuMemcpyDtoDAsync_v2", "copy_d2h": "cuMemcpyDtoHAsync_v2",
          "copy_h2d": "cuMemcpyHtoDAsync_v2", "memset": "cuMemsetD32Async"}
# cupti_collector.cc GetMemoryKindName, for the activity side of each memcpy role: the while
# loop's predicate lands in pinned host memory (while_thunk.cc HostMemoryPool), argument copies
# come from pinned staging buffers.
NV_KINDS = {"copy": ("device", "device"), "copy_d2h": ("device", "pinned"),
            "copy_h2d": ("pinned", "device")}
NCCL_KERNELS = {  # NCCL's device kernel names by collective (NCCL's naming)
    "all-reduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "all-gather": "ncclDevKernel_AllGather_RING_LL",
    "reduce-scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
}


class Nvidia:
    name = "nvidia"
    device = H100
    launch_thread_base = 91500
    graph_launch_name = "cuGraphLaunch"

    @staticmethod
    def stream_name(stream: int, roles) -> str:
        """cupti_collector.cc GetDeviceXLineName: the event types seen on the line (a hash set,
        so their order is unspecified; here kernels first)."""
        kinds = {"Compute" if r not in COPY_ROLES and r != "memset" else
                 NV_MEMCPY.get(r, "Memset") for r in roles}
        order = sorted(kinds, key=lambda x: (x != "Compute", x))
        return f"Stream #{stream}({','.join(order)})"

    @staticmethod
    def kernel_name(spec, index: int) -> str:
        if spec.role == "gemm" and not spec.name.startswith(("gemm_fusion", "triton")):
            return ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
                    "_execute_segment_k_off_kernel__5x_cublas")
        if spec.role == "collective":
            base = NCCL_KERNELS.get(spec.name, "ncclDevKernel_SendRecv")
            return f"{base}(ncclDevComm*, unsigned long, ncclWork*)"
        if spec.role in COPY_ROLES:
            return NV_MEMCPY[spec.role]
        if spec.role == "memset":
            return "Memset 3"  # [source] "Memset <memory kind>" (3: device), a memset's event
        if spec.name == "im2col":
            return "im2col4d_kernel"
        if spec.name == "splitk_reduce":
            return ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, "
                    "__nv_bfloat16, false, true, false>(cublasLt::cublasSplitKParams<float>)")
        return spec.name

    @staticmethod
    def launch_name(spec, api_names: bool = False) -> str:
        if api_names and spec.role in NV_API:
            return NV_API[spec.role]
        if spec.role in COPY_ROLES:
            return NV_MEMCPY[spec.role]
        if spec.role == "memset":
            return "Memset"  # [source] API calls without a kernel take their type's name
        return Nvidia.kernel_name(spec, 0)

    @staticmethod
    def kernel_details(spec) -> str:
        return ("regs:64 static_shared:0 dynamic_shared:49152 grid:132,1,1 block:256,1,1 "
                "occ_pct:50")

    @staticmethod
    def device_id(ordinal: int) -> int:
        return ordinal

    @staticmethod
    def device_stats(dev: Device) -> list:
        return [("clock_rate", I64, dev.clock_rate_khz), ("compute_cap_major", I64, dev.cc[0]),
                ("compute_cap_minor", I64, dev.cc[1]), ("core_count", I64, dev.cores),
                ("device_vendor", STR, dev.vendor), ("gpu_device_name", STR, dev.name),
                ("memory_bandwidth", U64, dev.memory_bandwidth),
                ("memory_size", U64, dev.memory_size)]

    @staticmethod
    def gpu_kernel_stats(k, labels: bool) -> list:
        out = [("correlation_id", U64, k.correlation_id),
               ("scope_range_id", I64, k.scope_range_id), ("context_id", STR, "$$1")]
        if k.graph_id:
            out += [("cuda_graph_id", U64, k.graph_id), ("cuda_graph_node_id", U64,
                                                           k.graph_node)]
        if k.spec.role in COPY_ROLES:
            src, dst = NV_KINDS[k.spec.role]
            out.append(("memcpy_details", REF,
                        f"kind_src:{src} kind_dst:{dst} size:{_size(k.spec)} "
                        f"dest:{k.device} async:1"))
        elif k.spec.role == "memset":
            out.append(("Memset_details", REF,
                        f"kind:device num_bytes:{_size(k.spec, memset=True)} async:1"))
        else:
            out += [("theoretical_occupancy_pct", F64, 50.0),
                    ("occupancy_min_grid_size", I64, 264),
                    ("occupancy_suggested_block_size", I64, 256),
                    ("kernel_details", REF, Nvidia.kernel_details(k.spec))]
        if labels:
            out += [("tf_op", REF, "XlaModule:"), ("hlo_op", REF, k.hlo_op_label),
                    ("hlo_module", REF, k.module), ("program_id", I64, k.program_id)]
        return out

    @staticmethod
    def launch_stats(k, labels: bool, ordinal: int) -> list:
        out = [("device_id", U64, ordinal), ("correlation_id", U64, k.correlation_id),
               ("scope_range_id", I64, k.scope_range_id), ("context_id", STR, "$$1")]
        if k.spec.role in COPY_ROLES:
            out.append(("memcpy_details", REF, f"kind_src:unknown kind_dst:unknown "
                        f"size:{_size(k.spec)} dest:{ordinal} async:1"))
        elif k.spec.role == "memset":
            out.append(("Memset_details", REF,
                        f"kind:unknown num_bytes:{_size(k.spec, memset=True)} async:1"))
        return out

    @staticmethod
    def graph_stats(graph_id: int) -> list:
        return [("cuda_graph_id", U64, graph_id)]

    memcpy_as_event = True


def _size(spec, memset: bool = False) -> int:
    """Bytes a memcpy moves / a memset writes (older specs carry only a cost in bytes)."""
    if spec.size:
        return spec.size
    return int(spec.bytes) if memset else int(spec.bytes) // 2


FLAVOURS = {"rocm": Rocm, "nvidia": Nvidia}
