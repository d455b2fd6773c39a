#!/usr/bin/env python3
"""Deterministic generator of a PyTorch-profiler (Kineto) Chrome trace.

The layout mimics the real traces in tests/data/kineto/*.json.gz (one event per line group,
``"distributedInfo": {"rank": R}`` with a space after the colon -- HTA finds the rank with the
regex ``"rank":\\s+(\\d+)``), but timestamps are floats with nanosecond fractions, as written by
newer PyTorch versions (e.g. ``1712867402348700.125``).

Per GPU kernel the trace holds 5 events: a ``cpu_op`` (``aten::...`` or ``record_param_comms``
for NCCL), a ``cuda_runtime`` ``cudaLaunchKernel``, an ``ac2g`` flow start (``ph: "s"``) and
end (``ph: "f"``), and the ``kernel`` itself (``args.stream``, ``args.correlation``,
``args.device``).  So ``--kernels 250000`` gives ~1.25M events.  A small number of
``gpu_memcpy`` / ``gpu_memset`` events (``cudaMemcpyAsync`` / ``cudaMemsetAsync``), ``cuda_sync``
``Stream Wait Event`` events (``cudaStreamWaitEvent``) and, when ``--steps`` > 0,
``user_annotation`` ``ProfilerStep#N`` spans are added.

Invariants (checked before writing): kernels on one stream never overlap; every device event
has a matching launch (same correlation) that starts before it; with ``--min-dur`` >= 3.25 us
(default) every device event still has a positive duration after HTA's ns rounding
(``ts -> ceil(ts)``, ``end -> floor(ts + dur)``), which keeps HTA's result well defined.

Patterns for the NCCL kernels (``--pattern``):
  partial   NCCL kernels are launched in the normal stream of work; they overlap compute
            partially (default).
  full      each NCCL kernel is placed inside a long GEMM on a compute stream (100% hidden).
  none      no NCCL kernels at all.

Usage:
  python benchmarks/gen_kineto.py OUT.json[.gz] --kernels 250000 --streams 4 --seed 0
"""
from __future__ import annotations

import argparse
import gzip
import io
import sys

import numpy as np

BASE_TS_NS = 1712867402300000_000  # epoch ns, same era as the real traces
PID = 3727853
GPU_PID = 0  # device id, as in Kineto
COMPUTE_STREAMS = [7, 20, 24, 28, 32, 36, 40, 44, 48]
COMM_STREAMS = [52, 56, 60]

COMPUTE_KERNELS = [
    # (cpu op, kernel name, mean duration us)
    ("aten::mm", "ampere_sgemm_128x64_nn", 40.0),
    ("aten::addmm", "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", 60.0),
    ("aten::add", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", 6.0),
    ("aten::relu", "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)", 5.0),
    ("aten::_softmax", "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*, int, int, int, bool const*, int, bool)", 12.0),
    ("aten::native_layer_norm", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)", 9.0),
    ("aten::_flash_attention_forward", "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::half_t> >, false, true, false, false, true, true, false>(pytorch_flash::Flash_fwd_params)", 80.0),
    ("aten::copy_", "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)", 7.0),
]
COMPUTE_WEIGHTS = np.array([0.18, 0.14, 0.2, 0.12, 0.08, 0.1, 0.06, 0.12])
BIG_GEMM = ("aten::mm", "ampere_sgemm_128x128_nn")

NCCL_KERNELS = [
    # (cpu op, kernel name, mean duration us)
    ("nccl:all_reduce", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 150.0),
    ("nccl:all_gather", "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 90.0),
    ("nccl:reduce_scatter", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 110.0),
    ("nccl:send", "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", 40.0),
]
MEMCPY_NAMES = [
    ("aten::copy_", "cudaMemcpyAsync", "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 1),
    ("aten::copy_", "cudaMemcpyAsync", "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 2),
    ("aten::copy_", "cudaMemcpyAsync", "gpu_memcpy", "Memcpy DtoD (Device -> Device)", 8),
    ("aten::zero_", "cudaMemsetAsync", "gpu_memset", "Memset (Device)", None),
]

DEVICE_PROPS = (
    '    {{\n      "id": {i}, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85097971712,\n'
    '      "computeMajor": 8, "computeMinor": 0,\n'
    '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
    '      "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,\n'
    '      "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 167936,\n'
    '      "numSms": 108, "sharedMemPerBlockOptin": 166912\n    }}'
)


def us(ns: int) -> str:
    """Integer ns -> microsecond JSON number with 3 decimals (ns fraction)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def jstr(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Gen:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.rng = np.random.default_rng(a.seed)
        self.events: list[tuple[int, str]] = []  # (sort key ts_ns, text)
        self.corr = 1000
        self.ext = 1
        self.min_dur = int(round(a.min_dur * 1000))
        ns = min(max(a.streams, 1), len(COMPUTE_STREAMS))
        self.cstreams = COMPUTE_STREAMS[:ns]
        self.mstreams = COMM_STREAMS[: max(1, min(a.comm_streams, len(COMM_STREAMS)))]
        self.free = {s: 0 for s in self.cstreams + self.mstreams}
        self.device_iv: dict[int, list[tuple[int, int]]] = {s: [] for s in self.free}
        self.launch_ts: dict[int, int] = {}
        self.cpu = BASE_TS_NS + 50_000_000  # CPU thread cursor (ns)
        self.n_device = 0

    # -- helpers -------------------------------------------------------------------------
    def dur(self, mean_us: float, sigma: float = 0.5) -> int:
        d = int(self.rng.lognormal(np.log(mean_us * 1000.0), sigma))
        return max(d, self.min_dur)

    def add(self, ts: int, text: str) -> None:
        self.events.append((ts, text))

    def cpu_op(self, name: str, ts: int, dur: int, extra: str = "") -> None:
        ext = self.ext
        self.ext += 1
        self.add(ts, (
            f'  {{\n    "ph": "X", "cat": "cpu_op", "name": {jstr(name)}, "pid": {PID}, "tid": {PID},\n'
            f'    "ts": {us(ts)}, "dur": {us(dur)},\n'
            f'    "args": {{\n      "External id": {ext},"Record function id": 0, "Sequence number": {ext}, '
            f'"Fwd thread id": 0, "Ev Idx": {ext}{extra}\n    }}\n  }}'))

    def runtime(self, name: str, ts: int, dur: int, corr: int, cbid: int) -> None:
        self.add(ts, (
            f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": {jstr(name)}, "pid": {PID}, "tid": {PID},\n'
            f'    "ts": {us(ts)}, "dur": {us(dur)},\n'
            f'    "args": {{\n      "External id": {self.ext - 1}, "cbid": {cbid}, "correlation": {corr}\n    }}\n  }}'))

    def flow(self, corr: int, launch_ts: int, dev_ts: int, stream: int) -> None:
        self.add(launch_ts, (
            f'  {{\n    "ph": "s", "id": {corr}, "pid": {PID}, "tid": {PID}, "ts": {us(launch_ts)},\n'
            f'    "cat": "ac2g", "name": "ac2g"\n  }}'))
        self.add(dev_ts, (
            f'  {{\n    "ph": "f", "id": {corr}, "pid": {GPU_PID}, "tid": {stream}, "ts": {us(dev_ts)},\n'
            f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'))

    def device(self, cat: str, name: str, stream: int, ts: int, dur: int, corr: int, extra: str) -> None:
        assert dur >= self.min_dur or cat == "cuda_sync"
        self.add(ts, (
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": {jstr(name)}, "pid": {GPU_PID}, "tid": {stream},\n'
            f'    "ts": {us(ts)}, "dur": {us(dur)},\n'
            f'    "args": {{\n      "External id": {self.ext - 1}, {extra}"device": 0, "context": 1,\n'
            f'      "stream": {stream}, "correlation": {corr}'
            + ('' if cat != "kernel" else ', "registers per thread": 128, "shared memory": 16384, '
               '"blocks per SM": 4.740741, "warps per SM": 18.962963, "grid": [128, 4, 1], '
               '"block": [128, 1, 1], "est. achieved occupancy %": 25')
            + '\n    }\n  }'))
        self.device_iv[stream].append((ts, ts + dur))
        self.free[stream] = max(self.free[stream], ts + dur)
        self.n_device += 1

    def launch(self, op: str, rt: str, cbid: int, op_dur_extra: int = 0,
               extra_args: str = "") -> tuple[int, int, int]:
        """Emit cpu_op + runtime launch at the CPU cursor. Returns (corr, launch_ts, launch_end)."""
        self.cpu += int(self.rng.integers(1_000, self.a.cpu_gap_ns))
        op_ts = self.cpu
        l_ts = op_ts + int(self.rng.integers(800, 3_000))
        l_dur = int(self.rng.integers(2_500, 6_000))
        op_end = l_ts + l_dur + int(self.rng.integers(300, 1_500)) + op_dur_extra
        corr = self.corr
        self.corr += 1
        self.cpu_op(op, op_ts, op_end - op_ts, extra_args)
        self.runtime(rt, l_ts, l_dur, corr, cbid)
        self.cpu = op_end
        self.launch_ts[corr] = l_ts
        return corr, l_ts, l_ts + l_dur

    def kernel(self, op: str, kname: str, stream: int, dur: int, not_before: int = 0,
               cat: str = "kernel", rt: str = "cudaLaunchKernel", cbid: int = 211,
               extra: str = "", extra_args: str = "") -> tuple[int, int]:
        corr, l_ts, l_end = self.launch(op, rt, cbid, extra_args=extra_args)
        ts = max(l_end + int(self.rng.integers(1_500, 6_000)), self.free[stream] + int(self.rng.integers(300, 2_000)), not_before)
        self.device(cat, kname, stream, ts, dur, corr, extra)
        self.flow(corr, l_ts, ts, stream)
        return ts, ts + dur

    # -- workload ------------------------------------------------------------------------
    def compute_kernel(self) -> None:
        i = int(self.rng.choice(len(COMPUTE_KERNELS), p=COMPUTE_WEIGHTS / COMPUTE_WEIGHTS.sum()))
        op, kname, mean = COMPUTE_KERNELS[i]
        stream = self.cstreams[int(self.rng.integers(0, len(self.cstreams)))]
        self.kernel(op, kname, stream, self.dur(mean))

    def comm_kernel(self, k: int) -> None:
        op, kname, mean = NCCL_KERNELS[int(self.rng.integers(0, len(NCCL_KERNELS)))]
        stream = self.mstreams[k % len(self.mstreams)]
        extra_args = ', "Collective name": "{}", "Group size": 8, "Process Group Name": "0"'.format(op.split(":")[1])
        if self.a.pattern == "full":
            # a long GEMM on compute stream 0, the NCCL kernel nested strictly inside it
            g0, g1 = self.kernel(BIG_GEMM[0], BIG_GEMM[1], self.cstreams[0], self.dur(400.0, 0.2) + 200_000)
            want = self.dur(mean, 0.4)
            corr, l_ts, l_end = self.launch("record_param_comms", "cudaLaunchKernel", 211, extra_args=extra_args)
            ts = max(l_end + 2_000, self.free[stream] + 500, g0 + 1_000)
            end = min(ts + want, g1 - 1_000)
            if end - ts < self.min_dur:  # GEMM too short for this launch: extend nothing, shrink
                ts = g0 + 1_000
                end = ts + self.min_dur
                assert ts >= l_end and ts >= self.free[stream] and end < g1, "full pattern invariant"
            self.device("kernel", kname, stream, ts, end - ts, corr, "")
            self.flow(corr, l_ts, ts, stream)
        else:
            self.kernel("record_param_comms", kname, stream, self.dur(mean, 0.4), extra_args=extra_args)

    def memcpy(self) -> None:
        op, rt, cat, name, kind = MEMCPY_NAMES[int(self.rng.integers(0, len(MEMCPY_NAMES)))]
        stream = self.cstreams[int(self.rng.integers(0, len(self.cstreams)))]
        nbytes = int(self.rng.integers(1, 64)) * 65536
        d = self.dur(8.0)
        bw = nbytes / d  # bytes/ns == GB/s
        extra = (f'"bytes": {nbytes}, "memory bandwidth (GB/s)": {bw:.6f}, ')
        self.kernel(op, name, stream, d, cat=cat, rt=rt, cbid=51 if cat == "gpu_memcpy" else 55, extra=extra)

    def stream_wait(self) -> None:
        if len(self.cstreams) < 2:
            return
        s_wait, s_on = self.rng.choice(len(self.cstreams), 2, replace=False)
        stream, on = self.cstreams[int(s_wait)], self.cstreams[int(s_on)]
        d = max(int(self.rng.integers(1_000, 2_600)), self.min_dur)
        rec_corr = self.corr - 1
        extra = (f'"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": {on}, '
                 f'"wait_on_cuda_event_record_corr_id": {rec_corr}, "wait_on_cuda_event_id": {self.corr % 97}, ')
        self.kernel("aten::record_stream", "Stream Wait Event", stream, d, cat="cuda_sync",
                    rt="cudaStreamWaitEvent", cbid=146, extra=extra,
                    not_before=self.free[on])

    def run(self) -> None:
        a = self.a
        n = a.kernels
        comm_frac = 0.0 if a.pattern == "none" else a.comm_frac
        steps = max(a.steps, 0)
        per_step = n // steps if steps else n
        k_comm = 0
        step_idx = 0
        step_start = self.cpu
        done = 0
        while done < n:
            if steps and step_idx < steps and done >= step_idx * per_step:
                # close the previous step, open a new one
                if step_idx > 0:
                    self.step_annotation(step_idx - 1, step_start, self.cpu + 2_000)
                    self.cpu += 5_000
                step_start = self.cpu
                self.cpu += 3_000
                step_idx += 1
            u = self.rng.random()
            if u < comm_frac:
                before = self.n_device
                self.comm_kernel(k_comm)
                k_comm += 1
                done += self.n_device - before
                continue
            if u < comm_frac + a.memcpy_frac:
                self.memcpy()
            elif u < comm_frac + a.memcpy_frac + a.sync_frac:
                self.stream_wait()
            else:
                self.compute_kernel()
            done += 1
        if steps:
            self.step_annotation(step_idx - 1, step_start, self.cpu + 2_000)

    def step_annotation(self, k: int, ts: int, end: int) -> None:
        # ProfilerStep#N is a user_annotation in current PyTorch (cpu_op in older versions)
        self.add(ts, (
            f'  {{\n    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{k + self.a.first_step}", '
            f'"pid": {PID}, "tid": {PID},\n    "ts": {us(ts)}, "dur": {us(end - ts)},\n'
            f'    "args": {{\n      "External id": {self.ext}, "Record function id": 0, "Ev Idx": {self.ext}\n    }}\n  }}'))
        self.ext += 1

    def check(self) -> None:
        for s, iv in self.device_iv.items():
            iv.sort()
            for (a0, a1), (b0, b1) in zip(iv, iv[1:]):
                assert b0 >= a1, f"stream {s}: device events overlap ({a0},{a1}) ({b0},{b1})"

    def write(self, out: str) -> None:
        self.check()
        self.events.sort(key=lambda e: e[0])
        t_first = self.events[0][0] - 10_000
        t_last = max(e[0] for e in self.events) + 1_000_000
        buf = io.StringIO()
        w = buf.write
        w('\n{\n  "schemaVersion": 1,\n')
        w(f'  "distributedInfo": {{"backend": "nccl", "rank": {self.a.rank}, "world_size": {self.a.world_size}, '
          f'"pg_count": 1, "pg_config": [], "nccl_version": "2.20.5"}},\n')
        w('  "deviceProperties": [\n')
        w(",\n".join(DEVICE_PROPS.format(i=i) for i in range(self.a.devices)))
        w('\n  ],\n  "cupti_version": 18,\n  "cuda_runtime_version": 12010,\n  "cuda_driver_version": 12020,\n'
          '  "trace_id": "GENERATED", "with_flops": false,\n  "record_shapes": 0,\n  "with_stack": 0,\n'
          '  "profile_memory": 0,\n  "traceEvents": [\n')
        w(",\n".join(t for _, t in self.events))
        meta = [
            f'  {{\n    "name": "process_name", "ph": "M", "ts": {us(t_first)}, "pid": {PID}, "tid": 0,\n    "args": {{\n      "name": "python3.11"\n    }}\n  }}',
            f'  {{\n    "name": "thread_name", "ph": "M", "ts": {us(t_first)}, "pid": {PID}, "tid": {PID},\n    "args": {{\n      "name": "thread {PID} (python3.11)"\n    }}\n  }}',
            f'  {{\n    "name": "process_name", "ph": "M", "ts": {us(t_first)}, "pid": {GPU_PID}, "tid": 0,\n    "args": {{\n      "name": "python3.11"\n    }}\n  }}',
            f'  {{\n    "name": "process_labels", "ph": "M", "ts": {us(t_first)}, "pid": {GPU_PID}, "tid": 0,\n    "args": {{\n      "labels": "GPU 0"\n    }}\n  }}',
        ]
        for s in self.cstreams + self.mstreams:
            if self.device_iv[s]:
                meta.append(
                    f'  {{\n    "name": "thread_name", "ph": "M", "ts": {us(t_first)}, "pid": {GPU_PID}, "tid": {s},\n'
                    f'    "args": {{\n      "name": "stream {s} "\n    }}\n  }}')
        meta.append(
            f'  {{\n    "ph": "X", "cat": "Trace", "ts": {us(t_first)}, "dur": {us(t_last - t_first)},\n'
            f'    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
            f'    "args": {{\n      "Op count": 0\n    }}\n  }}')
        meta.append(
            f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
            f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {us(t_first)}\n  }}')
        w(",\n" + ",\n".join(meta))
        w(f'\n  ],\n  "traceName": "{out.rsplit("/", 1)[-1]}"\n}}\n')
        data = buf.getvalue().encode()
        if out.endswith(".gz"):
            # mtime=0 keeps the .gz byte-identical across runs
            with open(out, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0,
                                                   compresslevel=getattr(self.a, "compresslevel", 9)) as gz:
                gz.write(data)
        else:
            with open(out, "wb") as fh:
                fh.write(data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output .json or .json.gz")
    p.add_argument("--kernels", type=int, default=250_000, help="number of device events (default 250000)")
    p.add_argument("--streams", type=int, default=4, help="compute streams (default 4)")
    p.add_argument("--comm-streams", type=int, default=1, help="NCCL streams (default 1)")
    p.add_argument("--pattern", choices=["partial", "full", "none"], default="partial")
    p.add_argument("--comm-frac", type=float, default=0.04, help="fraction of device events that are NCCL")
    p.add_argument("--memcpy-frac", type=float, default=0.01)
    p.add_argument("--sync-frac", type=float, default=0.005, help="fraction of Stream Wait Event")
    p.add_argument("--steps", type=int, default=10, help="ProfilerStep#N annotations (0 = none)")
    p.add_argument("--first-step", type=int, default=1)
    p.add_argument("--cpu-gap-ns", type=int, default=8_000, help="max extra CPU gap between ops (ns)")
    p.add_argument("--min-dur", type=float, default=3.25, help="min device event duration, us")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=8)
    p.add_argument("--devices", type=int, default=1, help="deviceProperties entries")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    g = Gen(a)
    g.run()
    g.write(a.out)
    print(f"{a.out}: {len(g.events) + 6} events, {g.n_device} device events", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
