"""The text simulated containers write: start-up banners, steady lines and failure evidence.

Diagnostics in gpuops classify a restart from what a person would read in `kubectl logs
--previous`, so each failure plants the lines the real software prints (PyTorch's CUDA OOM,
the NCCL watchdog, a Python traceback, CUDA errors after an Xid). Pure functions of their
inputs: the same pod, container and time always give the same text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .spec import ContainerSpec

# Total GPU memory as torch reports it ("GPU 0 has a total capacity of ..."), by product.
_GPU_CAPACITY_GIB = (("H200", 139.81), ("H100", 79.10), ("A100-SXM4-40GB", 39.39),
                     ("A100-PCIE-40GB", 39.39), ("A100", 79.15), ("L40S", 44.39),
                     ("L4", 22.03), ("A10G", 21.99), ("T4", 14.58))
XID_DESCRIPTIONS = {
    13: "Graphics Engine Exception", 31: "GPU memory page fault",
    43: "GPU stopped processing", 45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error", 63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure", 68: "NVDEC0 Exception",
    74: "NVLINK Error", 79: "GPU has fallen off the bus", 92: "High single-bit ECC error rate",
    94: "Contained ECC error", 95: "Uncontained ECC error", 109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout", 120: "GSP Error",
}
# Xids the application usually causes; the others point at the hardware or the driver.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_XID_CUDA_ERRORS = {
    13: "an illegal instruction was encountered", 31: "an illegal memory access was encountered",
    43: "unspecified launch failure", 48: "uncorrectable ECC error encountered",
    63: "uncorrectable ECC error encountered", 64: "uncorrectable ECC error encountered",
    74: "uncorrectable NVLink error detected during the execution",
    79: "unspecified launch failure", 94: "uncorrectable ECC error encountered",
    95: "uncorrectable ECC error encountered",
}


@dataclass(frozen=True)
class LogContext:
    """Facts about where the container runs that its messages mention."""

    pod: str
    namespace: str
    gpu_product: str = ""
    rank: int = 0


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha1("|".join(map(str, parts)).encode()).digest()[:8], "big")


def _vllm_ts(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M:%S")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def gpu_capacity_gib(product: str) -> float:
    for name, capacity in _GPU_CAPACITY_GIB:
        if name.lower() in product.lower():
            return capacity
    return 79.10


def model_name(spec: ContainerSpec) -> str:
    model = spec.arg("--model")
    if model:
        return model
    tail = spec.image.rsplit("/", 1)[-1].split(":")[0]
    return "meta-llama/Llama-3.1-8B-Instruct" if "vllm" in tail else tail


def _image_version(image: str, default: str) -> str:
    """`vllm/vllm-openai:v0.11.0` -> `0.11.0`; a tag that is no version gives `default`."""
    tail = image.split("@", 1)[0].rsplit("/", 1)[-1]
    tag = tail.split(":", 1)[1].lstrip("v") if ":" in tail else ""
    return tag if tag[:1].isdigit() else default


def _command_lines(prefix: str, spec: ContainerSpec) -> list[str]:
    """The command line, as an entrypoint that echoes it prints it (`$(VAR)`s already
    expanded by the kubelet); a value with newlines goes on over several lines."""
    if not spec.args:
        return []
    return (prefix + "command: " + " ".join(spec.args)).split("\n")


def start_lines(spec: ContainerSpec, ts: float, ctx: LogContext) -> list[str]:
    """What a container prints as it starts: always names its image; all but vLLM (which
    prints its own args line) echo their command line."""
    if spec.role == "init":
        return [f"init: starting {spec.name} (image {spec.image})",
                *_command_lines(f"init: {spec.name}: ", spec),
                f"init: {spec.name}: preparing /workspace for {ctx.pod}"]
    if spec.workload == "serving":
        t, model = _vllm_ts(ts), model_name(spec)
        tp = spec.arg("--tensor-parallel-size") or max(spec.gpus, 1)
        return [f"INFO {t} [__init__.py:239] Automatically detected platform cuda.",
                (f"INFO {t} [api_server.py:1043] vLLM API server version "
                 f"{_image_version(spec.image, '0.9.1')} (image {spec.image})"),
                (f"INFO {t} [api_server.py:1044] args: Namespace(host=None, "
                 f"port={spec.arg('--port') or 8000}, model='{model}', "
                 f"tensor_parallel_size={tp}, gpu_memory_utilization="
                 f"{spec.arg('--gpu-memory-utilization') or 0.9}, "
                 f"max_model_len={spec.arg('--max-model-len') or 8192})"),
                (f"INFO {t} [core.py:69] Initializing a V1 LLM engine with config: "
                 f"model='{model}', dtype=torch.bfloat16")]
    if spec.workload == "training":
        return [f"[rank{ctx.rank}]: starting {spec.name} from image {spec.image}",
                *_command_lines(f"[rank{ctx.rank}]: ", spec),
                (f"[rank{ctx.rank}]: torch 2.7.1+cu128, CUDA available: {spec.gpus > 0}, "
                f"devices: {spec.gpus}"),
                (f"[rank{ctx.rank}]: initializing process group backend=nccl "
                f"rank={ctx.rank}")]
    return [f"{_iso(ts)} INFO starting {spec.name} (image {spec.image})",
            *_command_lines(f"{_iso(ts)} INFO ", spec),
            f"{_iso(ts)} INFO listening on 0.0.0.0:8080"]


def loaded_lines(spec: ContainerSpec, ts: float, ctx: LogContext) -> list[str]:
    """Printed once the model (or the app) has finished loading."""
    if spec.workload == "serving":
        t = _vllm_ts(ts)
        weights = 14.99 / max(spec.gpus, 1)
        return [(f"INFO {t} [gpu_model_runner.py:1595] Model loading took {weights:.4f} GiB "
                f"and {spec.load_seconds:.6f} seconds"),
                f"INFO {t} [kv_cache_utils.py:715] GPU KV cache size: 452,880 tokens",
                (f"INFO {t} [api_server.py:1336] Starting vLLM API server on "
                "http://0.0.0.0:8000"),
                "INFO:     Application startup complete."]
    if spec.workload == "training":
        return [f"[rank{ctx.rank}]: loaded checkpoint and dataset in {spec.load_seconds:.1f}s"]
    return [f"{_iso(ts)} INFO ready"]


def steady_line(spec: ContainerSpec, ts: float, index: int, ctx: LogContext) -> str:
    """The n-th periodic line of a healthy running container."""
    s = _seed(ctx.namespace, ctx.pod, spec.name, index)
    if spec.workload == "serving":
        running, waiting = s % 24, (s >> 5) % 3
        kv = 20 + (s >> 9) % 600 / 10
        return (f"INFO {_vllm_ts(ts)} [loggers.py:118] Engine 000: Avg prompt throughput: "
                f"{800 + (s >> 13) % 2000:.1f} tokens/s, Avg generation throughput: "
                f"{300 + (s >> 20) % 900:.1f} tokens/s, Running: {running} reqs, Waiting: "
                f"{waiting} reqs, GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: "
                f"{40 + (s >> 27) % 50:.1f}%")
    if spec.workload == "training":
        step = (index + 1) * 50
        loss = 3.2 * 0.9995 ** step + (s % 100) / 1000
        return (f"[rank{ctx.rank}]: step {step} | loss {loss:.4f} | lr 3.00e-04 | "
                f"tokens/s {38000 + s % 6000} | grad_norm {0.5 + (s >> 8) % 80 / 100:.2f}")
    return (f'{_iso(ts)} INFO 10.0.{s % 250}.{(s >> 8) % 250} - "GET /api/v1/items '
            f'HTTP/1.1" 200 {(s >> 16) % 40 + 2}ms')


def completion_lines(spec: ContainerSpec, ts: float, ctx: LogContext) -> list[str]:
    if spec.role == "init":
        return [f"init: {spec.name}: done"]
    if spec.workload == "training":
        return [f"[rank{ctx.rank}]: training finished, saving final checkpoint",
                f"[rank{ctx.rank}]: exiting with code 0"]
    return [f"{_iso(ts)} INFO work finished, exiting"]


def _python_traceback(frames: list[tuple[str, int, str, str]], last: str) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return lines + [last]


def crash_lines(params: dict[str, Any]) -> list[str]:
    """An application error: a Python traceback ending in the exception line."""
    last = str(params.get("error") or "ConnectionRefusedError: [Errno 111] Connection refused")
    return [
        "ERROR:root:fatal error during startup, exiting",
        *_python_traceback([
            ("/app/main.py", 58, "<module>", "main()"),
            ("/app/main.py", 51, "main", "worker = Worker.from_env()"),
            ("/app/worker.py", 97, "from_env", "return cls(client=connect(settings.redis_url))"),
            ("/usr/local/lib/python3.11/site-packages/redis/connection.py", 707, "connect",
             "sock = self.retry.call_with_retry(self._connect, self.disconnect)"),
        ], last),
    ]


def config_error_lines(params: dict[str, Any]) -> list[str]:
    key = str(params.get("key") or "MODEL_NAME")
    return _python_traceback([
        ("/app/serve.py", 14, "<module>", f'MODEL_NAME = os.environ["{key}"]'),
        ("<frozen os>", 714, "__getitem__", "raise KeyError(key) from None"),
    ], f"KeyError: '{key}'")


def cuda_oom_lines(params: dict[str, Any], ctx: LogContext) -> list[str]:
    total = gpu_capacity_gib(ctx.gpu_product)
    tried = float(params.get("tried_gib", 2.0))
    free = float(params.get("free_gib", 1.02))
    in_use = total - free - 0.02
    gpu = int(params.get("gpu", 0))
    return [
        *_python_traceback([
            ("/workspace/train.py", 212, "<module>", "main()"),
            ("/workspace/train.py", 188, "main", "loss = model(**batch).loss"),
            ("/usr/local/lib/python3.11/dist-packages/torch/nn/modules/module.py", 1751,
             "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
            ("/usr/local/lib/python3.11/dist-packages/torch/nn/modules/module.py", 1762,
             "_call_impl", "return forward_call(*args, **kwargs)"),
            (("/usr/local/lib/python3.11/dist-packages/transformers/models/llama/"
             "modeling_llama.py"), 301, "forward", "attn_weights = torch.matmul(query, key_t)"),
        ], f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. "
           f"GPU {gpu} has a total capacity of {total:.2f} GiB of which {free:.2f} GiB is free. "
           f"Including non-PyTorch memory, this process has {in_use:.2f} GiB memory in use. "
           f"Of the allocated memory {in_use - 2.51:.2f} GiB is allocated by PyTorch, and "
           "2.51 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
           "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
           "fragmentation.  See documentation for Memory Management  "
           "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"),
    ]


def nccl_timeout_lines(params: dict[str, Any], ts: float, ctx: LogContext) -> list[str]:
    rank = int(params.get("rank", ctx.rank))
    seq = int(params.get("seq", 4211))
    op = str(params.get("op", "ALLREDUCE"))
    timeout_ms = int(params.get("timeout_ms", 600000))
    ran = timeout_ms + 21
    stamp = datetime.fromtimestamp(ts, UTC).strftime("%m%d %H:%M:%S") + ".123456789"
    work = (f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=262144000, NumelOut=262144000, "
            f"Timeout(ms)={timeout_ms})")
    head = f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp"
    return [
        (f"{head}:632] [Rank {rank}] Watchdog caught collective operation timeout: {work} ran "
        f"for {ran} milliseconds before timing out."),
        (f"{head}:2168] [PG ID 0 PG GUID 0(default_pg) Rank {rank}]  failure detected by "
        f"watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last "
        f"completed work: {seq - 1}"),
        (f"{head}:670] Stack trace of the failed collective not found, potentially because "
        "FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE "
        "to a non-zero value."),
        (f"{head}:684] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data."),
        (f"{head}:698] [Rank {rank}] To avoid data inconsistency, we are taking the entire "
        "process down."),
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        (f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread "
        f"terminated with exception: [Rank {rank}] Watchdog caught collective operation "
        f"timeout: {work} ran for {ran} milliseconds before timing out."),
    ]


def xid_lines(xid: int, *, first: bool) -> list[str]:
    """What the process sees after an Xid: a CUDA error, or no device once the GPU is lost."""
    if not first:
        return _python_traceback([
            ("/workspace/train.py", 40, "<module>", "torch.cuda.set_device(local_rank)"),
            ("/usr/local/lib/python3.11/dist-packages/torch/cuda/__init__.py", 529,
             "set_device", "torch._C._cuda_setDevice(device)"),
        ], "RuntimeError: CUDA error: no CUDA-capable device is detected")
    error = _XID_CUDA_ERRORS.get(xid, "unknown error")
    return [
        *_python_traceback([
            ("/workspace/train.py", 188, "main", "loss.backward()"),
            ("/usr/local/lib/python3.11/dist-packages/torch/_tensor.py", 648, "backward",
             "torch.autograd.backward("),
        ], f"RuntimeError: CUDA error: {error}"),
        ("CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect."),
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]


def oom_lines(spec: ContainerSpec, ts: float, ctx: LogContext) -> list[str]:
    """The kernel kills an OOM process without a word: the log just stops mid-work."""
    if spec.workload == "training":
        return [f"[rank{ctx.rank}]: loading shard 7/16 of the dataset into memory"]
    return [f"{_iso(ts)} INFO caching embeddings batch (in-memory cache growing)"]
